"""`gpuops bench redaction`: do credentials survive redaction, unit and end to end?

Unit: every format of the credential corpus (`credential_corpus.py`) through `redact_text`
(the line as the software prints it) and through `redact` (the line in a payload, each value
under a secret-looking key); the ordinary-log corpus (`ordinary_log_corpus.py`) through
`redact_text` for false redactions.

End to end, all real code paths: simcluster (in this process, reached over HTTP through the
official client), the real `ClusterWatcher`, and a Prefect server of the bench's own (SQLite,
temporary home; or `prefect_api_url`). For every format, three crash-looping pods whose
previous log prints the credential's line:

- `literal`: the values come from literal `env[].value`s, printed through `$(VAR)` in args;
- `secret`: the values come from a Secret, through `secretKeyRef` (even formats) or
  `envFrom.secretRef` (odd formats), printed the same way;
- `log`: the line is in the args as written: only its shape can give it away;

plus one pod that prints the whole ordinary-log corpus. The `gpuops.pod.restarted` events are
read back from the Prefect API as stored. Figures (last line, one JSON object):

- `formats`: credential formats in the corpus (or the `formats` subset run);
- `leaked_unit`: formats whose random parts survive `redact_text` (`LEAK_WINDOW` characters
  in a row is a leak); `leaked_unit_mapping`: the same through `redact` on a payload;
- `leaked_end_to_end`: (format, path) cases whose random parts are in a stored event payload,
  `leaked_by_path`; `cases_captured`: cases whose event arrived with a log;
- `false_redaction_pct`: ordinary lines `redact_text` changes; `false_redaction_e2e_pct`: the
  ordinary lines the end-to-end pod printed that arrived changed;
- `secret_reads`: Secret reads by the watcher (one per referenced Secret and minute, however
  many restarts), `secrets_referenced`; `leaked_formats`: names; `wall_s`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuops.bench.credential_corpus import FORMATS, Credential, render
from gpuops.bench.ordinary_log_corpus import ordinary_lines
from gpuops.common.redact import redact, redact_text

NS = "default"
PATHS = ("literal", "secret", "log")
PODS_PER_NODE = 100
CRASH = {"sim.gpuops.io/run-seconds": "1", "sim.gpuops.io/exit-code": "1"}


def _selected(formats: int | None, seed: int) -> list[Credential]:
    """Every format, or `formats` of them spread over the corpus (every family)."""
    import random

    chosen = list(FORMATS)
    if formats is not None and formats < len(chosen):
        step = len(chosen) / formats
        chosen = [chosen[int(i * step)] for i in range(formats)]
    return [render(f, random.Random(f"{seed}:{f.name}")) for f in chosen]


# --- unit ---------------------------------------------------------------------------------------

def unit_figures(corpus: list[Credential], seed: int) -> dict[str, Any]:
    leaked = [c.format.name for c in corpus if c.leaked_in(redact_text(c.line))]
    leaked_mapping = [c.format.name for c in corpus if c.leaked_in(json.dumps(redact(
        {"previous_log": c.line, "settings": {f"{k}_password": v for k, v in c.values.items()}
         })))]
    lines = ordinary_lines(seed)
    started = time.perf_counter()
    changed = sum(1 for line in lines if redact_text(line) != line)
    per_line_us = (time.perf_counter() - started) / len(lines) * 1e6
    return {"leaked_unit": len(leaked), "leaked_unit_mapping": len(leaked_mapping),
            "leaked_unit_formats": leaked + [n for n in leaked_mapping if n not in leaked],
            "ordinary_lines": len(lines),
            "false_redaction_pct": round(100 * changed / len(lines), 2),
            "redact_us_per_ordinary_line": round(per_line_us, 1)}


# --- end to end ---------------------------------------------------------------------------------

def _env_name(value_name: str) -> str:
    return "CRED_" + value_name  # as `envFrom` with prefix `CRED_` names the Secret's keys


def _templated(c: Credential) -> str:
    """The credential's line with each value replaced by `$(VAR)` for the kubelet to expand."""
    line = c.format.line
    for name in c.values:
        line = line.replace("{{" + name + "}}", f"$({_env_name(name)})")
    return line


def pod_for(c: Credential, index: int, path: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The pod (and the Secret it needs) that prints `c`'s line in its previous log."""
    container: dict[str, Any] = {"name": "app", "image": "ghcr.io/acme/api:1.4.2",
                                 "command": ["/app/serve"],
                                 "args": [c.line if path == "log" else _templated(c)]}
    secret = None
    if path == "literal":
        container["env"] = [{"name": _env_name(k), "value": v} for k, v in c.values.items()]
    elif path == "secret":
        name = f"cred-{index}"
        secret = {"metadata": {"name": name}, "data": {
            k: base64.b64encode(v.encode()).decode() for k, v in c.values.items()}}
        if index % 2 == 0:
            container["env"] = [{"name": _env_name(k), "valueFrom": {"secretKeyRef": {
                "name": name, "key": k}}} for k in c.values]
        else:
            container["envFrom"] = [{"secretRef": {"name": name}, "prefix": _env_name("")}]
    pod = {"metadata": {"name": f"{path}-{index}", "annotations": CRASH},
           "spec": {"nodeName": f"node-{index * len(PATHS) // PODS_PER_NODE}",
                    "containers": [container]}}
    return pod, secret


def changed_lines(printed: list[str], captured_log: str) -> int:
    """How many of the `printed` lines did not arrive as written (the first one follows the
    container's `command: /app/serve ` prefix)."""
    arrived = captured_log.splitlines()
    exact = set(arrived)
    changed = 0
    for i, line in enumerate(printed):
        if i == 0:
            changed += not any(a.endswith(" " + line) for a in arrived)
        else:
            changed += line not in exact
    return changed


def _node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "256", "memory": "2Ti", "pods": str(PODS_PER_NODE * 4)}
    return {"metadata": {"name": name}, "status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True"}]}}


def _stored_events(cluster: str, since: Any) -> list[Any]:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.events.filters import (
        EventFilter,
        EventNameFilter,
        EventOccurredFilter,
        EventResourceFilter,
    )

    async def read() -> list[Any]:
        async with get_client() as c:
            page = await c.read_events(filter=EventFilter(
                event=EventNameFilter(name=["gpuops.pod.restarted"]),
                occurred=EventOccurredFilter(since=since),
                resource=EventResourceFilter(id_prefix=[f"k8s.{cluster}."])), limit=50)
            events = list(page.events)
            while page.next_page:
                page = await c.read_events_page(str(page.next_page))
                events += page.events
            return events
    return asyncio.run(read())


def _wait(predicate: Callable[[], bool], timeout_s: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


class _TrackingSender:
    """The watcher's sender, noting which pods' events the server acknowledged (progress
    only; the figures come from the events read back)."""

    def __init__(self) -> None:
        from gpuops.sensors.emitter import EventSender

        self.inner = EventSender()
        self.pods_with_log: set[str] = set()

    def send(self, events: list[Any], stop: Any = None) -> None:
        self.inner.send(events, stop=stop)
        for event in events:
            if event.payload.get("previous_log"):
                self.pods_with_log.add(event.payload["pod"])


def end_to_end_figures(corpus: list[Credential], tmp: Path, seed: int, *, speed: float,
                       timeout_s: float) -> dict[str, Any]:
    from datetime import UTC, datetime

    from kubernetes import client, config

    from gpuops.sensors.cluster_watcher import ClusterWatcher
    from gpuops.simcluster.config import SimConfig
    from gpuops.simcluster.testing import SimClusterThread
    from gpuops.tasks.clients.kube import Kube

    cluster = f"redaction-{uuid.uuid4().hex[:8]}"
    sim = SimClusterThread(SimConfig(scenario="empty", speed=speed), tmp / "kubeconfig").start()
    try:
        api = config.new_client_from_config(config_file=str(sim.kubeconfig))
        core = client.CoreV1Api(api)
        for n in range(len(corpus) * len(PATHS) // PODS_PER_NODE + 1):
            core.create_node(_node(f"node-{n}"))  # type: ignore[arg-type]  # the client takes plain dicts
        ordinary = ordinary_lines(seed)
        since = datetime.now(UTC)
        sender = _TrackingSender()
        watcher = ClusterWatcher(Kube(api, cluster_name=cluster),
                                 sender=sender)  # type: ignore[arg-type]  # same send()
        watcher.start()
        try:
            expected = set()
            for i, c in enumerate(corpus):
                for path in PATHS:
                    pod, secret = pod_for(c, i, path)
                    if secret is not None:
                        core.create_namespaced_secret(NS, secret)  # type: ignore[arg-type]  # the client takes plain dicts
                    core.create_namespaced_pod(NS, pod)  # type: ignore[arg-type]  # the client takes plain dicts
                    expected.add(pod["metadata"]["name"])
            core.create_namespaced_pod(NS, {  # type: ignore[arg-type]  # the client takes plain dicts
                "metadata": {"name": "ordinary", "annotations": CRASH},
                "spec": {"nodeName": "node-0", "containers": [{
                    "name": "app", "image": "ghcr.io/acme/api:1.4.2", "command": ["/app/serve"],
                    "args": ["\n".join(ordinary)]}]}})
            expected.add("ordinary")
            _wait(lambda: expected <= sender.pods_with_log, timeout_s)
        finally:
            watcher.stop()
        reads = watcher.secrets.stats.reads if watcher.secrets else 0
        events = _stored_events(cluster, since)
    finally:
        sim.stop()
    payloads: dict[str, list[str]] = {}
    for event in events:
        payloads.setdefault(event.payload["pod"], []).append(json.dumps(event.payload))
    leaked: dict[str, list[str]] = {path: [] for path in PATHS}
    captured = 0
    for i, c in enumerate(corpus):
        for path in PATHS:
            texts = payloads.get(f"{path}-{i}", [])
            captured += any(json.loads(t).get("previous_log") for t in texts)
            if any(c.leaked_in(t) for t in texts):
                leaked[path].append(c.format.name)
    printed = "\n".join(ordinary).split("\n")
    logs = [json.loads(t)["previous_log"] for t in payloads.get("ordinary", [])]
    logs = [log for log in logs if log]
    changed = changed_lines(printed, logs[-1]) if logs else None
    return {"cases": len(corpus) * len(PATHS), "cases_captured": captured,
            "leaked_end_to_end": sum(len(v) for v in leaked.values()),
            "leaked_by_path": {k: len(v) for k, v in leaked.items()},
            "leaked_end_to_end_formats": sorted({n for v in leaked.values() for n in v}),
            "false_redaction_e2e_pct": None if changed is None else round(
                100 * changed / len(printed), 2),
            "secret_reads": reads, "secrets_referenced": len(corpus),
            "events_stored": len(events)}


def _own_prefect(tmp: Path) -> Callable[[], None]:
    from gpuops.deployments import services

    port = services.free_port()
    os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    os.environ["PREFECT_HOME"] = str(tmp / "client")
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    return services.start_prefect_server(tmp, port=port, timeout_s=180).stop


def run(formats: int | None = None, seed: int = 0, end_to_end: bool = True,
        prefect_api_url: str | None = None, speed: float = 1.0, timeout_s: float = 300.0
        ) -> dict[str, Any]:
    started = time.monotonic()
    corpus = _selected(formats, seed)
    result: dict[str, Any] = {"formats": len(corpus),
                              "families": sorted({c.format.family for c in corpus})}
    result.update(unit_figures(corpus, seed))
    result["leaked_end_to_end"] = None
    if end_to_end:
        tmp = Path(tempfile.mkdtemp(prefix="gpuops-bench-redaction-"))
        stops: list[Callable[[], None]] = []
        try:
            if prefect_api_url is None:
                if "prefect" in sys.modules:
                    raise RuntimeError("prefect was imported before the bench could point it "
                                       "at its own server; pass prefect_api_url")
                stops.append(_own_prefect(tmp))
            else:
                os.environ["PREFECT_API_URL"] = prefect_api_url
            result.update(end_to_end_figures(corpus, tmp, seed, speed=speed,
                                             timeout_s=timeout_s))
        finally:
            for stop in stops:
                with contextlib.suppress(Exception):  # best-effort teardown
                    stop()
            shutil.rmtree(tmp, ignore_errors=True)
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def main(json_output: bool = True, formats: int | None = None, seed: int = 0,
         end_to_end: bool = True, prefect_api_url: str | None = None, speed: float = 1.0,
         timeout_s: float = 300.0) -> dict[str, Any]:
    """`--formats N` runs N formats spread over the corpus; `--end-to-end false` the unit
    part only."""
    result = run(None if formats is None else int(formats), int(seed), bool(end_to_end),
                 prefect_api_url, float(speed), float(timeout_s))
    if not json_output:
        for key, value in result.items():
            print(f"{key:>32}: {value}")
    print(json.dumps(result))
    return result
