"""`gpuops bench sim-scale`: list and watch a 5,000-node, 100,000-pod simcluster.

The server runs in its own process (so its RSS is its own) and is populated in-process;
the client is the official `kubernetes` client: a paginated list, then a watch consuming
pod updates that the server generates (`pod-churn`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from kubernetes import client, config, watch


def _start_server(kubeconfig: Path, nodes: int, pods: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "gpuops.bench.scale_server", "--nodes",
                             str(nodes), "--pods", str(pods), "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("ready"):
        proc.kill()
        raise RuntimeError(f"scale server failed to start: {line!r}")
    return proc


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def run(nodes: int = 5000, pods: int = 100_000, updates: int = 50_000, page: int = 500
        ) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        started = time.monotonic()
        server = _start_server(kubeconfig, nodes, pods)
        populate_s = time.monotonic() - started
        try:
            api = config.new_client_from_config(str(kubeconfig))
            v1 = client.CoreV1Api(api)
            url = api.configuration.host

            t0 = time.monotonic()
            listed, token, rv = 0, None, None
            while True:
                resp: Any = v1.list_pod_for_all_namespaces(limit=page, _continue=token,
                                                           _preload_content=False)
                body = json.loads(resp.data)
                listed += len(body["items"])
                rv = rv or body["metadata"]["resourceVersion"]
                token = body["metadata"].get("continue")
                if not token:
                    break
            list_s = time.monotonic() - t0

            received: list[float] = []
            done = threading.Event()

            def consume() -> None:
                for _event in watch.Watch().stream(v1.list_pod_for_all_namespaces,
                                                   resource_version=rv, deserialize=False,
                                                   timeout_seconds=600):
                    received.append(time.monotonic())
                    if len(received) >= updates:
                        break
                done.set()

            watcher = threading.Thread(target=consume, daemon=True)
            watcher.start()
            time.sleep(0.5)
            _post(f"{url}/admin/faults", {"kind": "pod-churn", "params": {"count": updates}})
            done.wait(600)
            span = (received[-1] - received[0]) if len(received) > 1 else 0.0
            rss_mb = psutil.Process(server.pid).memory_info().rss / 2**20
        finally:
            server.terminate()
            server.wait(30)
    return {"nodes": nodes, "pods": pods, "pods_listed": listed, "page_size": page,
            "populate_s": round(populate_s, 2), "list_s": round(list_s, 3),
            "watch_events": len(received),
            "watch_events_per_s": round(len(received) / span, 1) if span > 0 else 0.0,
            "server_rss_mb": round(rss_mb, 1)}


def main(json_output: bool = True, nodes: int = 5000, pods: int = 100_000,
         updates: int = 50_000, page: int = 500) -> dict[str, Any]:
    result = run(int(nodes), int(pods), int(updates), int(page))
    if not json_output:
        for key, value in result.items():
            print(f"{key:>20}: {value}")
    print(json.dumps(result))
    return result
