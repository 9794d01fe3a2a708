"""`gpuops bench restart-storm`: a restart storm through the real watcher, trigger, flow and Slack.

What runs (all local, all real code paths):
- a Prefect server of its own (temporary PREFECT_HOME, free port; SQLite, or PostgreSQL and
  Redis with `prefect_database_url` / `prefect_redis`) unless `prefect_api_url` is given (the
  smoke test reuses the test session's server);
- simcluster in its own process as `gpuops up` runs it (`gpuops sim serve`, empty scenario,
  `speed`x virtual time; faults through its admin endpoints, as `gpuops sim fault` injects
  them) with GPU nodes created
  through the official client: general nodes, nodes of their own for the hardware-Xid pods (a
  hardware Xid marks the node) and for the evicted pods (eviction leaves node events);
- the Slack fake (`python -m gpuops.deployments.slackfake`, its own process);
- the deployments served by `serve_all()` in a subprocess, exactly as `gpuops up` serves them
  (throttled event trigger, one run at a time, later ones queued);
- the real `ClusterWatcher`, in this process so it can be killed mid-storm and replaced by a
  new one with the same state file; `force-410` and `drop-watches` are injected mid-storm too.

`workloads` workloads (Deployments of 2 replicas and bare pods), spread over `channels`
namespaces each routed to its own Slack channel (namespace label `gpuops.io/slack-channel`,
as teams route alerts; Slack takes about one message a second per channel), each crash-loop
with one known
cause, so the ground truth cause id per workload is known (see `FAULTS`; config errors fail
from the first start, the other faults strike running pods when the storm starts); evictions
are repeated on the `evict` workloads. The workloads start once the platform is up, i.e. the
deployment's standing run is running, as it is in steady state. After `duration_s` of wall
time the faults are recovered (and the virtual clock moved past the CrashLoopBackOff cap so
every pod runs again), the watcher catches up, and the bench waits (at most
`drain_timeout_s`) until the flow has handled every delivered restart and Slack is quiet.
Then the cold-start phase: the active run is cancelled and one crash-looping workload
crashes again, so its restarts wait for the trigger's run to start. Figures (wall-clock
seconds, one clock):

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
  (the fake's `ts`, set from the wall clock when it received the call): the threaded reply
  that lists it (one reply per batch lists each restart as "*Restart #N* at … `pod/container`"),
  else its thread's parent (the restarts found together open a thread in one parent).
  Restarts the policy skipped are left out; a restart still without a message when the
  bench ends counts with the time it has waited so far (`slack_not_posted_at_end`; the percentiles are then lower bounds).
  `restarts_not_handled`: delivered restarts no timeline row holds at the end. These
  percentiles are over the storm; `slack_cold_start_s` is the slowest of the cold-start
  phase's restarts (`cold_start_samples`).
- `watcher_internal_p95_s`: the watcher's own figure (its watch event received -> sent);
  parts of it: `watcher_queue_wait_p95_s` (waiting for a capture worker),
  `watcher_capture_p95_s` (reading the evidence), `event_send_p95_s` (the acknowledged POST).
- `max_parent_messages_per_workload_cause`: the most top-level Slack messages any
  (workload, cause) got (cause from the parent's "Cause" field, workload from its text); aim 1.
- `flow_runs` (runs of the on-restart deployment that left Scheduled during the bench),
  `flow_runs_cancelled` (queued runs superseded by the active one), `queue_high_water` (the
  watchers' capture queue), `wall_s`.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from gpuops.deployments import services
from gpuops.deployments.simadmin import post_admin
from gpuops.sensors.restart_detector import pod_failure_reason

NAMESPACE_PREFIX = "team-"  # workloads spread over `channels` namespaces, one Slack channel each
CHANNEL_LABEL = "gpuops.io/slack-channel"
LABEL = "gpuops.io/bench-workload"
ROLE = "gpuops.io/bench-role"
DEPLOYMENT = "restart-diagnostics/on-restart"
ACTIVE = ("RUNNING", "PENDING")  # flow run state types
# A phase is over once nothing new has happened for this long: no pod change after the
# storm (settle), no new Slack message (drain).
SETTLE_QUIET_S = 2.0
DRAIN_QUIET_S = 3.0
# The storm kills the watcher at 35 % of its duration and starts a new one 3 s later.
MIN_DURATION_S = 5.0
# fault kind, params, ground-truth cause id (gpuops/tasks/restarts/restart_rules.yaml), needs a GPU
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
    namespace: str

    @property
    def role(self) -> str:
        return {"gpu-xid": "xid", "evict": "evict"}.get(self.fault, "general")

    @property
    def pods(self) -> int:
        return 2 if self.kind == "Deployment" else 1


def plan(workloads: int, channels: int = 1) -> list[Workload]:
    out = []
    for i in range(workloads):
        fault, params, cause, gpu = FAULTS[i % len(FAULTS)]
        kind = "Deployment" if (i + i // len(FAULTS)) % 2 == 0 else "Pod"
        kind = {"gpu-xid": "Pod", "evict": "Deployment"}.get(fault, kind)
        out.append(Workload(f"w{i:02d}-{fault}", kind, fault, dict(params), cause, gpu,
                            f"{NAMESPACE_PREFIX}{i % channels}"))
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
        pod = {"metadata": {"name": w.name, "labels": labels}, "spec": _pod_spec(w)}
        core.create_namespaced_pod(w.namespace, pod)  # type: ignore[arg-type]  # the client takes plain dicts
        return
    apps.create_namespaced_deployment(w.namespace, {  # type: ignore[arg-type]  # the client takes plain dicts
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
        self.last_change = time.time()
        self.stop = threading.Event()
        self._rv: str | None = None
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)

    def start(self) -> RawPodWatch:
        self._relist()
        self._thread.start()
        return self

    def _see(self, pod: dict[str, Any], now: float) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        status = pod.get("status") or {}
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
        raw: Any = self.core.list_pod_for_all_namespaces(label_selector=LABEL,
                                                         _preload_content=False)
        body = json.loads(raw.data)
        now = time.time()
        for pod in body["items"]:
            self._see(pod, now)
        self._rv = body["metadata"]["resourceVersion"]

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                if self._rv is None:
                    self._relist()
                resp: Any = self.core.list_pod_for_all_namespaces(
                    label_selector=LABEL, watch=True, resource_version=self._rv,
                    timeout_seconds=300,
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

def _identity(p: dict[str, Any]) -> str:
    """The restart identity of an event payload (as `RestartEvidence.identity`)."""
    base = f"{p['pod_uid']}/{p['container']}/{p['restart_count']}"
    trigger = p.get("trigger", "restart")
    return base if trigger == "restart" else f"{base}/{trigger}-{p.get('trigger_reason', '')}"


def _visible_key(p: dict[str, Any]) -> tuple[str, str, int]:
    if p.get("trigger", "restart") == "pod-failed":
        return (p["pod_uid"], "", -1)
    return (p["pod_uid"], p["container"], int(p["restart_count"]))


def _wait(predicate: Any, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # an error counts as "not yet"
            if predicate():
                return True
        time.sleep(interval)
    return False


def _start_prefect(home: Path, database_url: str | None, redis: str | None
                   ) -> services.Service:
    """The bench's own Prefect server: SQLite, or Prefect's production setup (PostgreSQL
    at `database_url`, Redis messaging at `redis`, "host:port")."""
    port = services.free_port()
    os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    os.environ["PREFECT_HOME"] = str(home / "client")
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    settings = {}
    if database_url:
        settings["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database_url
    if redis:
        host, _, redis_port = redis.partition(":")
        settings.update(PREFECT_MESSAGING_BROKER="prefect_redis.messaging",
                        PREFECT_MESSAGING_CACHE="prefect_redis.messaging",
                        PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE="prefect_redis.lease_storage",
                        PREFECT_REDIS_MESSAGING_HOST=host,
                        PREFECT_REDIS_MESSAGING_PORT=redis_port or "6379")
    return services.start_prefect_server(home, port=port, timeout_s=180, settings=settings)


class RestartStorm:
    """One run: `setup`, `storm`, `settle`, `drain`, then `figures`."""

    def __init__(self, tmp: Path, workloads: int, duration_s: float, speed: float,
                 channels: int = 1, *, settle_quiet_s: float = SETTLE_QUIET_S,
                 drain_quiet_s: float = DRAIN_QUIET_S, cold_start_idle_s: float = 0.0) -> None:
        self.tmp = tmp
        self.cluster = f"storm-{uuid.uuid4().hex[:8]}"
        self.workloads = plan(workloads, channels)
        self.channels = channels
        self.duration_s, self.speed = duration_s, speed
        self.settle_quiet_s, self.drain_quiet_s = settle_quiet_s, drain_quiet_s
        self.cold_start_idle_s = cold_start_idle_s
        self.stops: list[Any] = []  # teardown, run in reverse
        self.evictions = 0
        self.down: list[tuple[float, float]] = []  # wall times with no watcher running
        self.delivered: dict[str, float] = {}  # identity -> when the server first took it
        self.deliveries: Counter[str] = Counter()  # identity -> times sent
        self.send_s: list[float] = []  # how long each acknowledged delivery took
        self.t0 = time.time()
        self.cold_from = math.inf  # restarts delivered from then on are the cold-start phase
        self.drain_s = 0.0

    # --- setup ----------------------------------------------------------------------------

    def setup(self) -> None:
        from gpuops.tasks.clients.kube import Kube

        self.slack = services.start_slack_fake_server(self.tmp)
        self.stops.append(self.slack.stop)
        # Its own process, as a real API server is: not sharing this process's GIL with
        # the watcher.
        kubeconfig = self.kubeconfig = self.tmp / "kubeconfig"
        sim = services.start_simcluster(self.tmp, kubeconfig=kubeconfig, scenario="empty",
                                        speed=self.speed)
        self.stops.append(sim.stop)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        # The deployments, served as `gpuops up` serves them.
        env = {**os.environ, "KUBECONFIG": str(kubeconfig),
               "GPUOPS_CLUSTER_NAME": self.cluster, "GPUOPS_SLACK_BASE_URL": self.slack.url,
               "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
        proc, self.serve_log = services.spawn(
            "serve", [sys.executable, "-c",
                      "from gpuops.deployments.serve import serve_all; serve_all()"],
            home=self.tmp, env=env)
        self.stops.append(services.Service("serve", "", proc, self.serve_log).stop)
        # Nodes, then both watches (the bench's raw one and the real watcher), then workloads.
        pods_by_role: Counter[str] = Counter()
        gpus_by_role: Counter[str] = Counter()
        for w in self.workloads:
            pods_by_role[w.role] += w.pods
            gpus_by_role[w.role] += w.pods if w.gpu else 0
        for role, pods in pods_by_role.items():
            for i in range(max(1, math.ceil(gpus_by_role[role] / 8), math.ceil(pods / 100))):
                self.core.create_node(_node(f"{role}-{i}", role))  # type: ignore[arg-type]  # the client takes plain dicts
        for namespace in sorted({w.namespace for w in self.workloads}):
            self.core.create_namespace({"metadata": {"name": namespace,  # type: ignore[arg-type]  # the client takes plain dicts
                                                     "labels": {CHANNEL_LABEL: namespace}}})
        self.raw = RawPodWatch(self.core).start()
        self.stops.append(self.raw.stop.set)
        self.kube = Kube(api, cluster_name=self.cluster)
        self.sender = self._timed_sender()
        self.watchers = [self._new_watcher()]
        self.stops.append(lambda: self.watchers[-1].stop())
        # The storm hits a platform that is up: its standing run is running (the first
        # restart after `gpuops up` starts waits for a run's process too: see `cold_start`).
        if not _wait(lambda: asyncio.run(self._deployment_id()), 120):
            raise RuntimeError(f"serve_all did not register {DEPLOYMENT}; see {self.serve_log}")
        self.deployment_id = asyncio.run(self._deployment_id())
        if not _wait(lambda: any(r.state_type.value == "RUNNING"
                                 for r in asyncio.run(self.flow_runs())), 180):
            raise RuntimeError(f"no standing {DEPLOYMENT} run started; see {self.serve_log}")
        for w in self.workloads:
            if w.fault == "config-error":
                self.inject(w)  # a missing setting fails from the first start, as in real life
            _create(self.core, apps, w)
        expected = sum(w.pods for w in self.workloads)

        def running() -> bool:  # a crash-looping pod's phase is Running too
            pods = self.pods()
            return len(pods) >= expected and all(p.status.phase == "Running" for p in pods)
        if not _wait(running, 120):
            raise RuntimeError("the workloads' pods did not all reach Running")

    def _timed_sender(self) -> Any:
        from gpuops.sensors.emitter import EventSender

        storm = self

        class TimedSender(EventSender):
            """Acknowledged delivery, timestamped per restart identity when the server took it."""

            def send(self, events: list, stop: Any = None) -> None:
                started = time.time()
                super().send(events, stop=stop)
                now = time.time()
                storm.send_s.append(now - started)
                for event in events:
                    if event.event == "gpuops.pod.restarted":
                        identity = _identity(event.payload)
                        storm.delivered.setdefault(identity, now)
                        storm.deliveries[identity] += 1

        return TimedSender()

    def _new_watcher(self) -> Any:
        from gpuops.sensors.cluster_watcher import ClusterWatcher

        return ClusterWatcher(self.kube, state_file=self.tmp / "watcher-state.json",
                              sender=self.sender).start()

    def fault(self, kind: str, target: str | None = None, **params: Any) -> Any:
        """Inject a simcluster fault through its admin endpoint (`gpuops sim fault`)."""
        return post_admin(self.kubeconfig, "/admin/faults",
                          {"kind": kind, "target": target, "params": params})

    def recover(self) -> None:
        """End every fault. Containers waiting out a CrashLoopBackOff start again at once
        (each such start is one more restart, of a container that crashed): move the
        virtual clock past the cap."""
        self.fault("recover")
        post_admin(self.kubeconfig, "/admin/clock", {"advance": 330})

    def inject(self, w: Workload) -> None:
        """A selector fault: it also hits the pods that replace the workload's pods."""
        self.fault(w.fault, w.namespace, selector=f"{LABEL}={w.name}", **w.params)

    async def _deployment_id(self) -> Any:
        from prefect.client.orchestration import get_client

        async with get_client() as c:
            return (await c.read_deployment_by_name(DEPLOYMENT)).id

    # --- the storm -------------------------------------------------------------------------

    def storm(self) -> None:
        """Faults for `duration_s`; a watcher kill and restart, a forced 410 and dropped
        watches on the way; evictions every few seconds; then `recover`."""
        started = time.time()
        for w in self.workloads:
            if w.fault not in ("evict", "config-error"):
                self.inject(w)
        d = self.duration_s
        kill_at = 0.35 * d
        actions = sorted([(kill_at, "kill"), (kill_at + max(3.0, 0.1 * d), "restart"),
                          (0.6 * d, "force-410"), (0.8 * d, "drop-watches")])
        evict_every, next_evict = max(4.0, d / 12), 1.0
        while (elapsed := time.time() - started) < d:
            while actions and actions[0][0] <= elapsed:
                self._disrupt(actions.pop(0)[1])
            if elapsed >= next_evict:
                for w in self.workloads:
                    if w.fault == "evict":
                        self.evictions += len(self.fault(
                            "evict", w.namespace, selector=f"{LABEL}={w.name}")["evicted"])
                next_evict += evict_every
            time.sleep(0.2)
        # A slow step (stopping a watcher can take seconds) can push the last actions past
        # the end of a short storm: run them now, so every storm ends with a watcher running
        # and each disruption done once.
        for _, action in actions:
            self._disrupt(action)
        self.recover()
        self.storm_s = time.time() - started

    def _disrupt(self, action: str) -> None:
        if action == "kill":  # down from the moment it is told to stop
            self.down.append((time.time(), math.inf))
            self.watchers[-1].stop()
        elif action == "restart":  # a new watcher, the same state file
            self.watchers.append(self._new_watcher())
            self.down[-1] = (self.down[-1][0], time.time())
        else:
            self.fault(action)

    def settle(self, timeout_s: float) -> None:
        """Every pod running again, nothing new for `settle_quiet_s`, the watcher's queue
        empty, and each container's latest restart delivered (or declared missed)."""
        watcher = self.watchers[-1]

        def caught_up() -> bool:
            done: dict[tuple[str, str], int] = {}
            for identity in list(self.delivered):
                uid, container, count = identity.split("/")[:3]
                done[(uid, container)] = max(done.get((uid, container), 0), int(count))
            return all(done.get(k, 0) >= n for k, n in self.raw.max_count.items() if n)

        def all_running() -> bool:
            return all(p.status.phase == "Failed" or all(
                cs.state.running for cs in p.status.container_statuses or [])
                for p in self.pods())

        quiet = self.settle_quiet_s
        _wait(lambda: time.time() - self.raw.last_change > quiet
              and watcher._queue.unfinished_tasks == 0  # noqa: SLF001 - idle watcher
              and caught_up() and all_running(),
              timeout_s, min(1.0, quiet))

    def drain(self, timeout_s: float) -> None:
        """Until every delivered restart is in a timeline (saved once its message is
        posted) and Slack has been quiet for `drain_quiet_s`. The standing run stays up."""
        started = time.time()
        last = [-1, time.time()]  # Slack message count, when it last changed

        def drained() -> bool:
            count = len(self.slack_messages())
            if count != last[0]:
                last[:] = [count, time.time()]
            return not set(self.delivered) - set(self.timeline_rows()) \
                and time.time() - last[1] >= self.drain_quiet_s
        _wait(drained, timeout_s, min(2.0, self.drain_quiet_s))
        self.drain_s += time.time() - started

    def cold_start(self, timeout_s: float) -> None:
        """A restart with no run up, as the first one after an outage or `gpuops up`: the
        active run is cancelled first, so the trigger's run has to start (runner poll, a new
        process, imports, blocks) before it can post. `slack_cold_start_s` is its figure.
        With `cold_start_idle_s`, the virtual clock first moves on that far, as after a quiet
        spell: past 600 s the kubelet has forgotten the storm's back-off and the crash
        restarts at once instead of after the longest back-off the storm built up."""
        from prefect.client.orchestration import get_client
        from prefect.states import Cancelling

        async def cancel_active() -> None:
            async with get_client() as c:
                for r in await self.flow_runs():
                    if r.state_type.value in ACTIVE:
                        await c.set_flow_run_state(r.id, Cancelling(), force=True)

        def none_active() -> bool:
            return not any(r.state_type.value in (*ACTIVE, "CANCELLING")
                           for r in asyncio.run(self.flow_runs()))
        asyncio.run(cancel_active())
        if not _wait(none_active, timeout_s):
            raise RuntimeError("the active restart-diagnostics run did not stop when cancelled")
        if self.cold_start_idle_s:
            post_admin(self.kubeconfig, "/admin/clock", {"advance": self.cold_start_idle_s})
        self.cold_from = time.time()
        self.inject(next(w for w in self.workloads if w.fault == "crashloop"))
        _wait(lambda: max(self.delivered.values()) >= self.cold_from, timeout_s, 0.2)
        self.recover()

    # --- reading back ----------------------------------------------------------------------

    def pods(self) -> list[Any]:
        return self.core.list_pod_for_all_namespaces(label_selector=LABEL).items

    def slack_messages(self) -> list[dict[str, Any]]:
        url = self.slack.url.removesuffix("/api/") + "/_fake/messages"
        with services._direct.open(url, timeout=30) as resp:  # noqa: SLF001 - no-proxy opener
            return json.loads(resp.read())["messages"]

    def timeline_rows(self) -> dict[str, tuple[Any, Any]]:
        """identity -> (timeline, row) over this cluster's workload timelines."""
        from gpuops.tasks.restarts.history import load_all_timelines

        return {r.identity: (t, r) for t in asyncio.run(load_all_timelines())
                if t.workload_key.startswith(f"{self.cluster}/") for r in t.rows}

    async def flow_runs(self) -> list[Any]:
        """Runs of the on-restart deployment created during the bench, Scheduled ones aside."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

        runs: list[Any] = []
        async with get_client() as c:
            while True:
                page = await c.read_flow_runs(deployment_filter=DeploymentFilter(
                    id=DeploymentFilterId(any_=[self.deployment_id])), limit=200,
                    offset=len(runs))
                runs += page
                if len(page) < 200:
                    break
        return [r for r in runs if r.created and r.created.timestamp() >= self.t0
                and r.state_type is not None and r.state_type.value != "SCHEDULED"]

    def restart_events(self) -> dict[str, dict[str, Any]]:
        """identity -> payload of this cluster's `gpuops.pod.restarted` events (50 a page)."""
        from datetime import UTC, datetime, timedelta

        from gpuops.tasks.restarts.events import read_restart_events

        events = asyncio.run(read_restart_events(
            self.cluster, datetime.fromtimestamp(self.t0, UTC) - timedelta(minutes=1),
            datetime.now(UTC) + timedelta(minutes=1), max_events=1_000_000))
        return {_identity(e.payload): e.payload for e in events}

    # --- figures ---------------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        for p in self.pods():
            for cs in (p.status.init_container_statuses or []) + (
                    p.status.container_statuses or []):
                key = (p.metadata.uid, cs.name)
                self.raw.max_count[key] = max(self.raw.max_count.get(key, 0),
                                              cs.restart_count or 0)
        container_restarts = sum(self.raw.max_count.values())
        injected = container_restarts + self.evictions
        end = time.time()
        payloads = self.restart_events()
        missed = sum(int(p.get("restarts_missed") or 0) for p in payloads.values())
        reported = len(payloads) + missed
        restarts = [p for p in payloads.values() if p.get("trigger", "restart") == "restart"]
        with_log = sum(1 for p in restarts if p.get("previous_log"))
        detect, excluded = self._detect_latencies(payloads)
        rows = self.timeline_rows()
        accuracy, checked, errors = self._cause_accuracy(payloads, rows)
        messages = self.slack_messages()
        latency, waiting, skipped = self._slack_latencies(payloads, rows, messages, end)
        slack = [t for i, t in latency.items() if self.delivered[i] < self.cold_from]
        cold = [t for i, t in latency.items() if self.delivered[i] >= self.cold_from]
        parents = self._parents_per_workload_cause(messages)
        runs = asyncio.run(self.flow_runs())
        states = Counter(r.state_type.value for r in runs)
        return {
            "workloads": len(self.workloads), "duration_s": self.duration_s,
            "speed": self.speed, "channels": self.channels,
            "restarts_injected": injected, "container_restarts": container_restarts,
            "evictions": self.evictions,
            "restarts_reported": reported, "reported_with_evidence": len(payloads),
            "missed_while_down": missed,
            "reported_pct": _pct(reported, injected),
            "duplicate_deliveries": sum(n - 1 for n in self.deliveries.values()),
            "logs_captured_pct": _pct(with_log, len(restarts)),
            "cause_accuracy_pct": accuracy, "causes_checked": checked,
            "cause_errors": errors,
            "detect_p50_s": _percentile(detect, 50), "detect_p95_s": _percentile(detect, 95),
            "detect_max_s": _percentile(detect, 100), "detect_samples": len(detect),
            "detect_excluded_while_down": excluded,
            "watcher_internal_p95_s": _percentile(
                [x for w in self.watchers for x in w.stats.detect_latencies_s], 95),
            "watcher_queue_wait_p95_s": _percentile(
                [x for w in self.watchers for x in w.stats.queue_wait_s], 95),
            "watcher_capture_p95_s": _percentile(
                [x for w in self.watchers for x in w.stats.capture_s], 95),
            "event_send_p95_s": _percentile(self.send_s, 95),
            "slack_p50_s": _percentile(slack, 50), "slack_p95_s": _percentile(slack, 95),
            "slack_max_s": _percentile(slack, 100), "slack_samples": len(slack),
            "slack_cold_start_s": _percentile(cold, 100), "cold_start_samples": len(cold),
            "slack_not_posted_at_end": waiting, "slack_skipped_by_policy": skipped,
            "restarts_not_handled": len(set(payloads) - set(rows)),
            "max_parent_messages_per_workload_cause": max(parents.values(), default=0),
            "parent_messages": sum(parents.values()), "slack_messages": len(messages),
            "flow_runs": len(runs), "flow_runs_cancelled": states.get("CANCELLED", 0),
            "flow_runs_failed": states.get("FAILED", 0) + states.get("CRASHED", 0),
            "queue_high_water": max(w.stats.queue_high_water for w in self.watchers),
            "capture_errors": sum(w.stats.capture_errors for w in self.watchers),
            "watcher_restarts": len(self.watchers) - 1,
            "relists": sum(w.pods.relists for w in self.watchers),
            "storm_s": round(self.storm_s, 1), "drain_s": round(self.drain_s, 1),
            "wall_s": round(time.time() - self.t0, 1),
        }

    def _detect_latencies(self, payloads: dict[str, dict[str, Any]]) -> tuple[list[float], int]:
        """Raw watch saw it -> the server took its event; not for what showed while down."""
        latencies, excluded = [], 0
        for identity, p in payloads.items():
            seen, sent = self.raw.visible.get(_visible_key(p)), self.delivered.get(identity)
            if seen is None or sent is None:
                continue
            if any(a <= seen <= b for a, b in self.down):
                excluded += 1
            else:
                latencies.append(sent - seen)
        return latencies, excluded

    def _cause_accuracy(self, payloads: dict[str, Any], rows: dict[str, tuple[Any, Any]]
                        ) -> tuple[float | None, int, dict[str, int]]:
        truth = {w.name: w.cause for w in self.workloads}
        checked = correct = 0
        errors: Counter[str] = Counter()
        for identity, (timeline, row) in rows.items():
            if identity in payloads:
                expected = truth.get(timeline.workload[2])
                checked += 1
                correct += row.cause == expected
                if row.cause != expected:
                    errors[f"{expected}->{row.cause}"] += 1
        return _pct(correct, checked), checked, dict(errors)

    def _slack_latencies(self, payloads: dict[str, dict[str, Any]],
                         rows: dict[str, tuple[Any, Any]], messages: list[dict[str, Any]],
                         end: float) -> tuple[dict[str, float], int, int]:
        """Event taken -> the Slack message carrying that restart posted: the threaded reply
        that lists it ("*Restart #N* at … `pod/container`"), else its thread's parent (the
        restarts a run found together open the thread in one parent). A restart with no
        message at the end counts with the time it has waited (the figure is a lower bound)."""
        parents = {m["ts"] for m in messages if m.get("thread_ts") in (None, m["ts"])}
        replies: dict[tuple[str, str], float] = {}
        for m in messages:
            if m.get("thread_ts") in (None, m["ts"]):
                continue
            for count, who in re.findall(r"Restart #(\d+)\* at [^`]*`([^`]+)`",
                                         json.dumps(m.get("blocks") or [])):
                replies.setdefault((m["thread_ts"], f"{who}#{count}"), float(m["ts"]))
        latencies: dict[str, float] = {}
        waiting = skipped = 0
        for identity, p in payloads.items():
            sent = self.delivered.get(identity)
            if sent is None:
                continue
            posted: float | None = None
            if identity in rows:
                _, row = rows[identity]
                if not row.reported.startswith("posted") or not row.thread_ts:
                    skipped += 1
                    continue
                who = f"{p['pod']}/{p['container']}#{p['restart_count']}"
                posted = replies.get((row.thread_ts, who))
                if posted is None and row.thread_ts in parents:
                    posted = float(row.thread_ts)
            if posted is None:
                waiting += 1
                posted = end
            latencies[identity] = posted - sent
        return latencies, waiting, skipped

    def _parents_per_workload_cause(self, messages: list[dict[str, Any]]
                                    ) -> Counter[tuple[str, str]]:
        """Top-level messages per (workload, cause), read from each parent as first posted."""
        parents: Counter[tuple[str, str]] = Counter()
        for m in messages:
            if m.get("thread_ts") not in (None, m["ts"]):
                continue
            original = (m.get("updates") or [m])[0]
            cause = re.search(r"\*Cause\*\\n`([^`]+)`", json.dumps(original.get("blocks") or []))
            workload = re.search(r": (\w+/[\w.-]+) in " + re.escape(self.cluster),
                                 original.get("text") or "")
            parents[(workload[1] if workload else "?", cause[1] if cause else "?")] += 1
        return parents


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def run(workloads: int = 30, duration_s: float = 120.0, speed: float = 10.0,
        channels: int = 6, prefect_api_url: str | None = None, drain_timeout_s: float = 1800.0,
        settle_timeout_s: float = 90.0, keep_logs: bool = False,
        prefect_database_url: str | None = None, prefect_redis: str | None = None, *,
        settle_quiet_s: float = SETTLE_QUIET_S, drain_quiet_s: float = DRAIN_QUIET_S,
        cold_start_idle_s: float = 0.0) -> dict[str, Any]:
    if duration_s < MIN_DURATION_S:
        raise ValueError(f"duration_s={duration_s}: the storm kills the watcher at 35 % of it "
                         f"and starts a new one 3 s later, so it must be at least "
                         f"{MIN_DURATION_S} s (try `--duration-s {MIN_DURATION_S:.0f}`)")
    tmp = Path(tempfile.mkdtemp(prefix="gpuops-restart-storm-"))
    bench = RestartStorm(tmp, workloads, duration_s, speed, channels,
                         settle_quiet_s=settle_quiet_s, drain_quiet_s=drain_quiet_s,
                         cold_start_idle_s=cold_start_idle_s)
    try:
        if prefect_api_url is None:
            if "prefect" in sys.modules:
                raise RuntimeError("prefect was imported before the bench could point it at "
                                   "its own server; pass prefect_api_url")
            # Before anything imports prefect.
            bench.stops.append(_start_prefect(tmp, prefect_database_url, prefect_redis).stop)
        else:
            os.environ["PREFECT_API_URL"] = prefect_api_url
        bench.setup()
        bench.storm()
        bench.settle(settle_timeout_s)
        bench.drain(drain_timeout_s)
        bench.cold_start(settle_timeout_s)
        bench.settle(settle_timeout_s)
        bench.drain(drain_timeout_s)
        result = bench.figures()
    except BaseException:
        print(f"restart-storm failed; logs kept in {tmp / 'logs'}", file=sys.stderr)
        raise
    else:
        if keep_logs:
            print(f"restart-storm logs kept in {tmp / 'logs'}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        for stop in reversed(bench.stops):
            with contextlib.suppress(Exception):  # best-effort teardown
                stop()
    return result


def main(json_output: bool = True, workloads: int = 30, duration_s: float = 120.0,
         speed: float = 10.0, channels: int = 6, prefect_api_url: str | None = None,
         drain_timeout_s: float = 1800.0, keep_logs: bool = False,
         prefect_database_url: str | None = None, prefect_redis: str | None = None,
         settle_quiet_s: float = SETTLE_QUIET_S, drain_quiet_s: float = DRAIN_QUIET_S,
         cold_start_idle_s: float = 0.0, settle_timeout_s: float = 90.0) -> dict[str, Any]:
    """`--prefect-database-url postgresql+asyncpg://…/DB --prefect-redis 127.0.0.1:6379`
    runs the bench's Prefect server in Prefect's production setup (the database must exist
    and be empty). A small run (the smoke test's) takes every path in well under a minute:
    `--workloads 8` (one per fault kind), `--duration-s 6` (the shortest storm that kills
    and restarts the watcher), short quiet periods (`--settle-quiet-s`, `--drain-quiet-s`)
    and `--cold-start-idle-s 660` (the cold-start crash restarts at once)."""
    result = run(int(workloads), float(duration_s), float(speed), int(channels),
                 prefect_api_url, float(drain_timeout_s), float(settle_timeout_s),
                 keep_logs=bool(keep_logs),
                 prefect_database_url=prefect_database_url, prefect_redis=prefect_redis,
                 settle_quiet_s=float(settle_quiet_s), drain_quiet_s=float(drain_quiet_s),
                 cold_start_idle_s=float(cold_start_idle_s))
    if not json_output:
        for key, value in result.items():
            print(f"{key:>40}: {value}")
    print(json.dumps(result))
    return result
