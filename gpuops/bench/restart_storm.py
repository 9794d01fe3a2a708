"""`gpuops bench restart-storm`: a restart storm through the real watcher, trigger, flow and Slack.

What runs (all local, all real code paths):
- a Prefect server of its own (temporary PREFECT_HOME, free port) unless `prefect_api_url` is
  given (the smoke test reuses the test session's server);
- simcluster (`SimClusterThread`, empty scenario, `speed`x virtual time) with GPU nodes created
  through the official client: general nodes, nodes of their own for the hardware-Xid pods (a
  hardware Xid marks the node) and for the evicted pods (eviction leaves node events);
- the Slack fake (`python -m gpuops.deployments.slackfake`, its own process);
- the deployments served by `serve_all()` in a subprocess, exactly as `gpuops up` serves them
  (event trigger, one run at a time, CANCEL_NEW);
- the real `ClusterWatcher`, in this process so it can be killed mid-storm and replaced by a
  new one with the same state file; `force-410` and `drop-watches` are injected mid-storm too.

`workloads` workloads (Deployments of 2 replicas and bare pods) each crash-loop with one known
cause, so the ground truth cause id per workload is known (see `FAULTS`); evictions are
repeated on the `evict` workloads. After `duration_s` of wall time the faults are recovered,
the watcher catches up, and the bench waits until the flow has handled every delivered restart
and Slack is quiet. Figures (times are wall-clock seconds, one machine, one clock):

- `restarts_injected`: restarts that really happened: the sum over every container of its
  highest `restartCount` (read through the official client at the end, and on the bench's own
  watch for pods that went away) plus the pods evicted (`evictions`, a pod-level restart).
- `restarts_reported` = `reported_with_evidence` + `missed_while_down`: distinct restart
  identities in the `gpuops.pod.restarted` events read back from the Prefect API (50 a page),
  plus the `restarts_missed` those events declare (a count that jumped while no watcher was
  looking: counted, but their evidence is gone). `reported_pct` = reported / injected.
- `logs_captured_pct`: share of the reported container restarts (trigger `restart`) whose
  evidence has a non-empty `previous_log` (evictions have no previous container: excluded).
- `cause_accuracy_pct`: the flow's cause (per-workload timeline table artifacts, one row per
  handled restart) vs the workload's ground truth; `cause_errors` lists "expected->got".
- `detect_p50_s` / `detect_p95_s`: API server update -> event accepted. The start is the wall
  time at which the bench's own raw watch (a second watch stream, opened by the bench) first
  receives the pod update carrying the new restartCount (or the Failed/Evicted status); the end
  is the wall time at which `EventSender.send` returned for that restart's event, i.e. the
  Prefect server acknowledged it (the sender is wrapped to timestamp deliveries per identity).
  Restarts that became visible while no watcher was running are left out (they are
  `missed_while_down` or caught on the relist: `detect_excluded_while_down`).
- `slack_p50_s` / `slack_p95_s`: event accepted -> the Slack message for that restart posted
  (the fake's `ts`, set from the wall clock when it received the call). The message is the
  thread's parent when the restart opened the thread (timeline row `thread_ts` = message `ts`),
  else the threaded reply whose text is "Restart #N of <pod>/<container>". Restarts the policy
  skipped are not counted; delivered restarts no timeline row holds are `restarts_not_handled`.
- `max_parent_messages_per_workload_cause`: the most top-level Slack messages any
  (workload, cause) got (cause from the parent's "Cause" field, workload from its text); aim 1.
- `flow_runs` (runs of the on-restart deployment that left Scheduled during the bench),
  `flow_runs_cancelled` (CANCEL_NEW collisions), `queue_high_water` (the watchers' capture
  queue), `wall_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from gpuops.deployments import services
from gpuops.sensors.restart_detector import pod_failure_reason
from gpuops.simcluster.server import SimConfig
from gpuops.simcluster.testing import SimClusterThread

NAMESPACE = "default"
LABEL = "gpuops.io/bench-workload"
ROLE = "gpuops.io/bench-role"
DEPLOYMENT = "restart-diagnostics/on-restart"
# fault kind, params, ground-truth cause id (gpuops/tasks/restart_rules.yaml), needs a GPU
FAULTS: list[tuple[str, dict[str, Any], str, bool]] = [
    ("crashloop", {"exit_code": 3, "error": "RuntimeError: tokenizer.json is corrupt"},
     "app-error", False),
    ("oom", {"after_seconds": 4}, "oom-killed-limit", False),
    ("cuda-oom", {"after_seconds": 4}, "cuda-oom", True),
    ("nccl-timeout", {"after_seconds": 6}, "nccl-error", True),
    ("liveness", {}, "liveness-probe", False),
    ("config-error", {}, "config-error", False),
    ("evict", {}, "evicted", False),
    ("gpu-xid", {"xid": 79, "after_seconds": 2}, "gpu-xid-hardware", True),
]


@dataclass
class Workload:
    name: str
    kind: str  # Deployment | Pod
    fault: str
    params: dict[str, Any]
    cause: str
    gpu: bool

    @property
    def role(self) -> str:
        return {"gpu-xid": "xid", "evict": "evict"}.get(self.fault, "general")

    @property
    def pods(self) -> int:
        return 2 if self.kind == "Deployment" else 1


def plan(workloads: int) -> list[Workload]:
    out = []
    for i in range(workloads):
        fault, params, cause, gpu = FAULTS[i % len(FAULTS)]
        kind = "Deployment" if (i + i // len(FAULTS)) % 2 == 0 else "Pod"
        kind = {"gpu-xid": "Pod", "evict": "Deployment"}.get(fault, kind)
        out.append(Workload(f"w{i:02d}-{fault}", kind, fault, dict(params), cause, gpu))
    return out


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None without samples)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)], 3)


# --- Kubernetes objects ---------------------------------------------------------------------

def _node(name: str, role: str) -> dict[str, Any]:
    capacity = {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {"metadata": {"name": name, "labels": {"gpuops.io/pool": "h100", ROLE: role}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod_spec(w: Workload) -> dict[str, Any]:
    limits = {"cpu": "2", "memory": "8Gi", **({"nvidia.com/gpu": "1"} if w.gpu else {})}
    container: dict[str, Any] = {"name": "main", "image": "ghcr.io/example/llm-server:1.4",
                                 "resources": {"limits": limits, "requests": dict(limits)}}
    if w.fault == "liveness":
        container["livenessProbe"] = {"httpGet": {"path": "/health", "port": 8000},
                                      "periodSeconds": 5, "failureThreshold": 3}
    return {"nodeSelector": {ROLE: w.role}, "containers": [container]}


def _create(core: client.CoreV1Api, apps: client.AppsV1Api, w: Workload) -> None:
    labels = {LABEL: w.name, "app": w.name}
    if w.kind == "Pod":
        core.create_namespaced_pod(NAMESPACE, {"metadata": {"name": w.name, "labels": labels},
                                               "spec": _pod_spec(w)})
        return
    apps.create_namespaced_deployment(NAMESPACE, {
        "metadata": {"name": w.name, "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": {LABEL: w.name}},
                 "template": {"metadata": {"labels": labels}, "spec": _pod_spec(w)}}})


# --- the bench's own watch: when the API server showed each restart --------------------------

class RawPodWatch:
    """A second watch stream on pods: the wall time each restart first became visible.

    Keys: `(pod uid, container, restartCount)` for a container restart, `(pod uid, "", -1)` for
    a pod taken away (evicted). Reconnects at once after a dropped watch, relists on 410."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.visible: dict[tuple[str, str, int], float] = {}
        self.max_count: dict[tuple[str, str], int] = {}
        self.workload_of: dict[str, str] = {}  # pod uid -> workload name
        self.last_change = time.time()
        self.stop = threading.Event()
        self._rv: str | None = None
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def start(self) -> RawPodWatch:
        self._relist()
        self._thread.start()
        return self

    def _see(self, pod: dict[str, Any], now: float) -> None:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        uid = meta.get("uid", "")
        self.workload_of[uid] = (meta.get("labels") or {}).get(LABEL, "")
        for cs in (status.get("initContainerStatuses") or []) + (
                status.get("containerStatuses") or []):
            count = int(cs.get("restartCount") or 0)
            key = (uid, cs["name"])
            if count > self.max_count.get(key, 0):
                self.max_count[key] = count
                self.last_change = now
            if count > 0 and (cs.get("lastState") or {}).get("terminated"):
                self.visible.setdefault((uid, cs["name"], count), now)
        if pod_failure_reason(pod) and (uid, "", -1) not in self.visible:
            self.visible[(uid, "", -1)] = now
            self.last_change = now

    def _relist(self) -> None:
        body = json.loads(self.core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)
        now = time.time()
        for pod in body["items"]:
            self._see(pod, now)
        self._rv = body["metadata"]["resourceVersion"]

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                if self._rv is None:
                    self._relist()
                resp = self.core.list_namespaced_pod(
                    NAMESPACE, watch=True, resource_version=self._rv, timeout_seconds=300,
                    allow_watch_bookmarks=True, _preload_content=False, _request_timeout=330)
                try:
                    for line in iter_resp_lines(resp):
                        if self.stop.is_set():
                            return
                        if not line:
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                self._rv = None
                            break
                        if event.get("type") != "BOOKMARK":
                            self._see(obj, time.time())
                        self._rv = (obj.get("metadata") or {}).get("resourceVersion") or self._rv
                finally:
                    resp.close()
                    resp.release_conn()
            except ApiException as e:
                if e.status == 410:
                    self._rv = None
                else:
                    time.sleep(0.1)
            except Exception:  # noqa: BLE001 - a dropped connection: watch again at once
                time.sleep(0.05)


# --- the bench ------------------------------------------------------------------------------

@dataclass
class Storm:
    """Mutable state of one run, filled as it goes."""

    cluster: str
    workloads: list[Workload]
    evictions: int = 0
    down: list[tuple[float, float]] = field(default_factory=list)  # watcher down (wall times)
    delivered: dict[str, float] = field(default_factory=dict)  # identity -> first accepted
    deliveries: Counter[str] = field(default_factory=Counter)  # identity -> sends


def _timed_sender(storm: Storm) -> Any:
    from gpuops.sensors.emitter import EventSender

    class TimedSender(EventSender):
        """Acknowledged delivery, timestamped per restart identity when the server took it."""

        def send(self, events: list, stop: Any = None) -> None:
            super().send(events, stop=stop)
            now = time.time()
            for event in events:
                if event.event == "gpuops.pod.restarted":
                    identity = _identity(event.payload)
                    storm.delivered.setdefault(identity, now)
                    storm.deliveries[identity] += 1

    return TimedSender()


def _identity(p: dict[str, Any]) -> str:
    base = f"{p['pod_uid']}/{p['container']}/{p['restart_count']}"
    trigger = p.get("trigger", "restart")
    return base if trigger == "restart" else f"{base}/{trigger}-{p.get('trigger_reason', '')}"


def _visible_key(p: dict[str, Any]) -> tuple[str, str, int]:
    if p.get("trigger", "restart") == "pod-failed":
        return (p["pod_uid"], "", -1)
    return (p["pod_uid"], p["container"], int(p["restart_count"]))


def _start_prefect(home: Path) -> Any:
    port = services.free_port()
    os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    os.environ["PREFECT_HOME"] = str(home / "client")
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    return services.start_prefect_server(home, port=port, timeout_s=180)


def _wait(predicate: Any, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # an error counts as "not yet"
            if predicate():
                return True
        time.sleep(interval)
    return False


async def _deployment_id() -> Any:
    from prefect.client.orchestration import get_client

    async with get_client() as c:
        return (await c.read_deployment_by_name(DEPLOYMENT)).id


async def _flow_runs(deployment_id: Any, since: float) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    runs: list[Any] = []
    async with get_client() as c:
        while True:
            page = await c.read_flow_runs(deployment_filter=DeploymentFilter(
                id=DeploymentFilterId(any_=[deployment_id])), limit=200, offset=len(runs))
            runs += page
            if len(page) < 200:
                break
    return [r for r in runs if r.created and r.created.timestamp() >= since
            and r.state_type is not None and r.state_type.value != "SCHEDULED"]


def _slack_messages(slack_url: str) -> list[dict[str, Any]]:
    import urllib.request

    root = slack_url.removesuffix("/api/")
    with services._direct.open(urllib.request.Request(f"{root}/_fake/messages"),
                               timeout=30) as resp:
        return json.loads(resp.read())["messages"]


def run(workloads: int = 30, duration_s: float = 120.0, speed: float = 10.0,
        prefect_api_url: str | None = None, drain_timeout_s: float = 900.0,
        settle_timeout_s: float = 90.0) -> dict[str, Any]:
    wall0 = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="gpuops-restart-storm-"))
    stack: list[Any] = []  # things to stop, in reverse
    try:
        if prefect_api_url is None:
            if "prefect" in sys.modules:
                raise RuntimeError("prefect was imported before the bench could point it at its "
                                   "own server; pass prefect_api_url")
            stack.append(_start_prefect(tmp).stop)
        else:
            os.environ["PREFECT_API_URL"] = prefect_api_url
        # Imported only now: Prefect reads PREFECT_API_URL on import.
        from gpuops.sensors.cluster_watcher import ClusterWatcher
        from gpuops.tasks.kube import Kube
        from gpuops.tasks.restart_events import read_restart_events
        from gpuops.tasks.restart_history import load_all_timelines

        storm = Storm(f"storm-{uuid.uuid4().hex[:8]}", plan(int(workloads)))
        slack = services.start_slack_fake_server(tmp)
        stack.append(slack.stop)
        sim = SimClusterThread(SimConfig(scenario="empty", speed=float(speed)),
                               tmp / "kubeconfig").start()
        stack.append(sim.stop)
        api = config.new_client_from_config(config_file=str(sim.kubeconfig))
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig),
               "GPUOPS_CLUSTER_NAME": storm.cluster, "GPUOPS_SLACK_BASE_URL": slack.url,
               "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
        serve_proc, serve_log = services.spawn(
            "serve", [sys.executable, "-c",
                      "from gpuops.deployments.serve import serve_all; serve_all()"],
            home=tmp, env=env)
        serve = services.Service("serve", "", serve_proc, serve_log)
        stack.append(serve.stop)

        # Nodes and workloads; every pod running before the storm.
        by_role: Counter[str] = Counter()
        gpus: Counter[str] = Counter()
        for w in storm.workloads:
            by_role[w.role] += w.pods
            gpus[w.role] += w.pods if w.gpu else 0
        for role, pods in by_role.items():
            for i in range(max(1, math.ceil(gpus[role] / 8), math.ceil(pods / 100))):
                core.create_node(_node(f"{role}-{i}", role))
        for w in storm.workloads:
            _create(core, apps, w)
        expected_pods = sum(w.pods for w in storm.workloads)

        def running() -> bool:
            pods = core.list_namespaced_pod(NAMESPACE).items
            return len(pods) >= expected_pods and all(p.status.phase == "Running" for p in pods)
        if not _wait(running, 120):
            raise RuntimeError("the workloads' pods did not all reach Running")
        if not _wait(lambda: asyncio.run(_deployment_id()), 120):
            raise RuntimeError(f"serve_all did not register {DEPLOYMENT}; see {serve_log}")
        deployment_id = asyncio.run(_deployment_id())

        raw = RawPodWatch(core).start()
        stack.append(raw.stop.set)
        kube = Kube(api, cluster_name=storm.cluster)
        sender = _timed_sender(storm)
        state_file = tmp / "watcher-state.json"
        watchers = [ClusterWatcher(kube, state_file=state_file, sender=sender).start()]
        stack.append(lambda: watchers[-1].stop())

        # The storm.
        storm_t0 = time.time()
        for w in storm.workloads:
            if w.fault != "evict":
                sim.fault(w.fault, NAMESPACE, selector=f"{LABEL}={w.name}", **w.params)
        duration = float(duration_s)
        kill_at, down_for = 0.35 * duration, max(3.0, 0.1 * duration)
        actions = sorted([(kill_at, "kill"), (kill_at + down_for, "restart"),
                          (0.6 * duration, "force-410"), (0.8 * duration, "drop-watches")])
        evict_every = max(4.0, duration / 12)
        next_evict = 1.0
        while (elapsed := time.time() - storm_t0) < duration:
            while actions and actions[0][0] <= elapsed:
                _, action = actions.pop(0)
                if action == "kill":
                    watchers[-1].stop()
                    storm.down.append((time.time(), math.inf))
                elif action == "restart":
                    watchers.append(ClusterWatcher(kube, state_file=state_file,
                                                   sender=sender).start())
                    storm.down[-1] = (storm.down[-1][0], time.time())
                else:
                    sim.fault(action)
            if elapsed >= next_evict:
                for w in storm.workloads:
                    if w.fault == "evict":
                        storm.evictions += len(sim.fault("evict", NAMESPACE,
                                                         selector=f"{LABEL}={w.name}")["evicted"])
                next_evict += evict_every
            time.sleep(0.2)
        sim.fault("recover")
        # Containers waiting out a CrashLoopBackOff start again at once (each such start is
        # one more restart, of a container that crashed): move the virtual clock past the cap.
        sim.advance(330)
        storm_s = time.time() - storm_t0

        # Settle: every pod running again, nothing new visible for 2 s, the watcher's queue
        # empty and every container's latest restart delivered (or declared missed).
        watcher = watchers[-1]

        def caught_up() -> bool:
            done: dict[tuple[str, str], int] = {}
            for identity in list(storm.delivered):
                uid, container, count = identity.split("/")[:3]
                done[(uid, container)] = max(done.get((uid, container), 0), int(count))
            return all(done.get(k, 0) >= n for k, n in raw.max_count.items() if n)

        def all_running() -> bool:
            return all(p.status.phase == "Failed" or all(
                cs.state.running for cs in p.status.container_statuses or [])
                for p in core.list_namespaced_pod(NAMESPACE).items)

        def settled() -> bool:
            return (time.time() - raw.last_change > 2 and watcher._queue.unfinished_tasks == 0
                    and caught_up() and all_running())
        _wait(settled, settle_timeout_s, 1.0)

        # Drain: every delivered restart in a timeline, no run active, Slack quiet.
        drain_t0 = time.time()
        prefix = f"{storm.cluster}/"

        def handled() -> set[str]:
            timelines = asyncio.run(load_all_timelines())
            return {r.identity for t in timelines if t.workload_key.startswith(prefix)
                    for r in t.rows}
        last_slack = [-1, time.time()]

        def drained() -> bool:
            count = len(_slack_messages(slack.url))
            if count != last_slack[0]:
                last_slack[:] = [count, time.time()]
            if set(storm.delivered) - handled():
                return False
            runs = asyncio.run(_flow_runs(deployment_id, wall0))
            active = [r for r in runs if r.state_type.value in ("RUNNING", "PENDING")]
            return not active and time.time() - last_slack[1] >= 5
        _wait(drained, float(drain_timeout_s), 2.0)
        drain_s = time.time() - drain_t0

        # --- figures ------------------------------------------------------------------------
        pods = core.list_namespaced_pod(NAMESPACE).items
        for p in pods:
            for cs in (p.status.init_container_statuses or []) + (
                    p.status.container_statuses or []):
                key = (p.metadata.uid, cs.name)
                raw.max_count[key] = max(raw.max_count.get(key, 0), cs.restart_count or 0)
        container_restarts = sum(raw.max_count.values())
        injected = container_restarts + storm.evictions

        now = time.time()
        from datetime import UTC, datetime, timedelta
        events = asyncio.run(read_restart_events(
            storm.cluster, datetime.fromtimestamp(wall0, UTC) - timedelta(minutes=1),
            datetime.fromtimestamp(now, UTC) + timedelta(minutes=1), max_events=100_000))
        payloads = {_identity(e.payload): e.payload for e in events}
        missed = sum(int(p.get("restarts_missed") or 0) for p in payloads.values())
        reported = len(payloads) + missed
        container_payloads = [p for p in payloads.values() if p.get("trigger") == "restart"]
        with_log = sum(1 for p in container_payloads if p.get("previous_log"))

        def while_down(t: float) -> bool:
            return any(a <= t <= b for a, b in storm.down)
        detect, excluded = [], 0
        for identity, p in payloads.items():
            seen_at, sent_at = raw.visible.get(_visible_key(p)), storm.delivered.get(identity)
            if seen_at is None or sent_at is None:
                continue
            if while_down(seen_at):
                excluded += 1
                continue
            detect.append(sent_at - seen_at)

        truth = {w.name: w.cause for w in storm.workloads}
        timelines = [t for t in asyncio.run(load_all_timelines())
                     if t.workload_key.startswith(prefix)]
        rows = {r.identity: (t, r) for t in timelines for r in t.rows}
        correct, checked, errors = 0, 0, Counter()
        for identity, (t, r) in rows.items():
            if identity not in payloads:
                continue
            expected = truth.get(t.workload[2])
            checked += 1
            if r.cause == expected:
                correct += 1
            else:
                errors[f"{expected}->{r.cause}"] += 1

        messages = [m for m in _slack_messages(slack.url) if storm.cluster in json.dumps(m)
                    or m.get("thread_ts")]
        by_ts = {m["ts"]: m for m in messages}
        replies: dict[tuple[str, str], float] = {}
        for m in messages:
            if m.get("thread_ts") and m["thread_ts"] != m["ts"]:
                first = m.get("updates", [{}])[0].get("text") if m.get("updates") else None
                match = re.match(r"Restart #(\d+) of (\S+?):", first or m.get("text") or "")
                if match:
                    replies.setdefault((m["thread_ts"], f"{match[2]}#{match[1]}"),
                                       float(m["ts"]))
        slack_lat, unmatched, skipped, opened = [], 0, 0, set()
        for identity, p in payloads.items():
            if identity not in rows:
                continue
            t, r = rows[identity]
            if not r.reported.startswith("posted") or not r.thread_ts:
                skipped += 1
                continue
            sent_at = storm.delivered.get(identity)
            first_in_thread = next(x for x in t.rows if x.thread_ts == r.thread_ts)
            if first_in_thread.identity == identity and r.thread_ts in by_ts \
                    and r.thread_ts not in opened:
                opened.add(r.thread_ts)
                posted_at: float | None = float(r.thread_ts)
            else:
                posted_at = replies.get(
                    (r.thread_ts, f"{p['pod']}/{p['container']}#{p['restart_count']}"))
            if posted_at is None or sent_at is None:
                unmatched += 1
                continue
            slack_lat.append(posted_at - sent_at)

        parents: Counter[tuple[str, str]] = Counter()
        for m in messages:
            if m.get("thread_ts") not in (None, m["ts"]):
                continue
            original = (m.get("updates") or [m])[0]
            blocks = json.dumps(original.get("blocks") or [])
            cause = re.search(r"\*Cause\*\\n`([^`]+)`", blocks)
            workload = re.search(r": (\w+/[\w.-]+) in " + re.escape(storm.cluster),
                                 original.get("text") or "")
            parents[(workload[1] if workload else "?", cause[1] if cause else "?")] += 1

        runs = asyncio.run(_flow_runs(deployment_id, wall0))
        states = Counter(r.state_type.value for r in runs)
        result = {
            "workloads": len(storm.workloads), "duration_s": duration, "speed": float(speed),
            "restarts_injected": injected, "container_restarts": container_restarts,
            "evictions": storm.evictions,
            "restarts_reported": reported, "reported_with_evidence": len(payloads),
            "missed_while_down": missed,
            "reported_pct": round(100 * reported / injected, 1) if injected else None,
            "duplicate_deliveries": sum(n - 1 for n in storm.deliveries.values()),
            "logs_captured_pct": round(100 * with_log / len(container_payloads), 1)
            if container_payloads else None,
            "cause_accuracy_pct": round(100 * correct / checked, 1) if checked else None,
            "causes_checked": checked, "cause_errors": dict(errors),
            "detect_p50_s": _percentile(detect, 50), "detect_p95_s": _percentile(detect, 95),
            "detect_max_s": _percentile(detect, 100), "detect_samples": len(detect),
            "detect_excluded_while_down": excluded,
            "slack_p50_s": _percentile(slack_lat, 50), "slack_p95_s": _percentile(slack_lat, 95),
            "slack_max_s": _percentile(slack_lat, 100), "slack_samples": len(slack_lat),
            "slack_unmatched": unmatched, "slack_skipped_by_policy": skipped,
            "restarts_not_handled": len(set(payloads) - set(rows)),
            "max_parent_messages_per_workload_cause": max(parents.values(), default=0),
            "parent_messages": sum(parents.values()), "slack_messages": len(messages),
            "flow_runs": len(runs), "flow_runs_cancelled": states.get("CANCELLED", 0),
            "flow_runs_failed": states.get("FAILED", 0) + states.get("CRASHED", 0),
            "queue_high_water": max(w.stats.queue_high_water for w in watchers),
            "capture_errors": sum(w.stats.capture_errors for w in watchers),
            "watcher_restarts": len(watchers) - 1,
            "relists": sum(w.pods.relists for w in watchers),
            "storm_s": round(storm_s, 1), "drain_s": round(drain_s, 1),
            "wall_s": round(time.time() - wall0, 1),
        }
    except BaseException:
        print(f"restart-storm failed; logs kept in {tmp / 'logs'}", file=sys.stderr)
        tmp = None  # type: ignore[assignment]
        raise
    finally:
        for stop in reversed(stack):
            try:
                stop()
            except Exception:  # noqa: BLE001, S110 - best effort teardown
                pass
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def main(json_output: bool = True, workloads: int = 30, duration_s: float = 120.0,
         speed: float = 10.0, prefect_api_url: str | None = None,
         drain_timeout_s: float = 900.0) -> dict[str, Any]:
    result = run(int(workloads), float(duration_s), float(speed), prefect_api_url,
                 float(drain_timeout_s))
    if not json_output:
        for key, value in result.items():
            print(f"{key:>40}: {value}")
    print(json.dumps(result))
    return result
