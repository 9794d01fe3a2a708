"""`gpuops bench sim-scale`: list and watch a 5,000-node, 100,000-pod simcluster.

The server runs in its own process (so its RSS is its own) and is populated in-process;
the client is the official `kubernetes` client: a paginated list, then a watch consuming
pod updates that the server generates (`pod-churn`).

Two more paginated lists time the paths other clients take: the Table `kubectl get pods -A`
asks for (kubectl's Accept header; the default page, 500, is kubectl's `--chunk-size`), and a list asking for
protobuf first as client-go's protobuf clients do. simcluster answers that one in JSON (it
decodes protobuf request bodies but never encodes protobuf), so the figure is JSON served to
a protobuf Accept, and the answered media type is reported beside it as measured. The first
list pays for the server's first pass over 100,000 pods (`list_s`, the cold figure the aim is
about); the JSON list is timed again last (`list_warm_s`), the fair comparison for the others.

The full default run takes about a minute on a 2-core machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
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


# What kubectl get sends (get.go's transformRequests), and client-go's protobuf negotiation.
TABLE_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,"
                "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
PROTOBUF_ACCEPT = "application/vnd.kubernetes.protobuf,application/json"


@dataclass(frozen=True)
class Paged:
    seconds: float
    items: int
    resource_version: str
    content_type: str


def _list_paged(v1: client.CoreV1Api, page: int, accept: str | None = None,
                key: str = "items") -> Paged:
    """Every pod, `page` at a time with limit/continue as kubectl and informers page."""
    headers = {"Accept": accept} if accept else None
    t0 = time.monotonic()
    listed, token, rv, content_type = 0, None, "", ""
    while True:
        resp: Any = v1.list_pod_for_all_namespaces(limit=page, _continue=token,
                                                   _preload_content=False, _headers=headers)
        content_type = resp.headers.get("Content-Type", "")
        body = json.loads(resp.data)
        listed += len(body[key])
        rv = rv or body["metadata"]["resourceVersion"]
        token = body["metadata"].get("continue")
        if not token:
            break
    return Paged(time.monotonic() - t0, listed, rv, content_type)


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

            plain = _list_paged(v1, page)
            table = _list_paged(v1, page, TABLE_ACCEPT, key="rows")
            protobuf = _list_paged(v1, page, PROTOBUF_ACCEPT)
            warm = _list_paged(v1, page)
            rv = plain.resource_version

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
    return {"nodes": nodes, "pods": pods, "pods_listed": plain.items, "page_size": page,
            "populate_s": round(populate_s, 2), "list_s": round(plain.seconds, 3),
            "list_warm_s": round(warm.seconds, 3),
            "list_table_s": round(table.seconds, 3), "table_rows": table.items,
            "list_protobuf_accept_s": round(protobuf.seconds, 3),
            "protobuf_accept_pods_listed": protobuf.items,
            "protobuf_accept_answered_as": protobuf.content_type.split(";")[0],
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
