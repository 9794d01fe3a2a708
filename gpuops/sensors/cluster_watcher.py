"""The cluster watcher: Kubernetes watch -> evidence capture -> Prefect events.

Pods and nodes are listed and watched (`WatchLoop`: resume after a dropped connection,
relist on 410). A pod update that shows a new restart is queued at once; capture workers
read the evidence that is about to vanish; one delivery thread sends `gpuops.pod.restarted`
to Prefect (several events per request when they pile up) and, once the server has them,
marks the restarts reported (persisted, so a restarted watcher neither loses nor repeats
one). The queues are bounded: in a restart storm the watch thread waits (backpressure), and
anything the server drops meanwhile comes back on the re-watch or relist.
Node state changes that metrics miss (cordon, NotReady) are emitted as events too.
The same pod and node watches feed the GPU side (`gpu_sensor`: `gpuops.gpu.stranded`,
`gpuops.node.gpu-idle`, the GPU gauges).
Evidence is redacted before it is queued: by shape, and by the values the pod may print (its
literal env values and those of the Secrets it references, read by `pod_secrets` unless
`GPUOPS_WATCHER_READ_POD_SECRETS=false`); the watcher's own log lines go through the same
redaction.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from gpuops.common.events import workload_related
from gpuops.common.settings import PrometheusSettings, WatcherSettings, get_settings
from gpuops.sensors.emitter import PAYLOAD_LIMIT_BYTES, EventSender, build_event
from gpuops.sensors.evidence_capture import EvidenceCapture
from gpuops.sensors.gpu_sensor import GpuSensor, watcher_settings
from gpuops.sensors.job_failures import JobFailureWatch
from gpuops.sensors.pod_secrets import PodSecretReader, redact_watcher_logs
from gpuops.sensors.restart_detector import DetectedRestart, ReportedStore, detect_restarts
from gpuops.sensors.watch_loop import WatchLoop
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus
from gpuops.tasks.restarts.evidence import RestartEvidence

log = logging.getLogger("gpuops.sensors.watcher")

INLINE_LOG_BYTES = 256 * 1024  # what stays in the event when the evidence is too big
SEND_BATCH_EVENTS = 50  # events per request to Prefect, when they pile up
SEND_BATCH_BYTES = 4 << 20


@dataclass
class _Outgoing:
    restart: DetectedRestart
    event: Any
    observed: datetime
    size: int


@dataclass
class WatcherStats:
    detected: int = 0
    emitted: int = 0
    capture_errors: int = 0
    node_events: int = 0
    queue_high_water: int = 0
    detect_latencies_s: list[float] = field(default_factory=list)  # watch event -> sent
    queue_wait_s: list[float] = field(default_factory=list)  # watch event -> a worker took it
    capture_s: list[float] = field(default_factory=list)  # reading the evidence


def _now() -> datetime:
    return datetime.now(UTC)


def _done(restart: DetectedRestart) -> int:
    """What `ReportedStore` keeps for a reported restart: its restartCount, or 1 for a one-off
    trigger (pod failed, stuck waiting), whose restartCount may well be 0."""
    return restart.restart_count if restart.trigger == "restart" else 1


class ClusterWatcher:
    def __init__(self, kube: Kube, *, state_file: Path | None = None, workers: int = 8,
                 queue_size: int = 1000, log_cap_bytes: int = 1 << 20,
                 sender: EventSender | None = None, read_pod_secrets: bool | None = None,
                 gpu: bool = True) -> None:
        """`read_pod_secrets`: read the Secrets each restarted pod references to redact their
        values (None: the `GPUOPS_WATCHER_READ_POD_SECRETS` setting, on by default). `gpu`:
        run the GPU side (stranded GPUs, idle GPU nodes, gauges)."""
        settings = watcher_settings()  # a bad value fails here, naming its variable
        self.kube = kube
        self.cluster = kube.cluster_name
        self.reported = ReportedStore(state_file)
        if read_pod_secrets is None:
            read_pod_secrets = get_settings(WatcherSettings).read_pod_secrets
        self.secrets = PodSecretReader(kube) if read_pod_secrets else None
        redact_watcher_logs()
        # A GPU pod's GPUs and its node's Xids from DCGM's series where the cluster does not
        # record them (a real cluster has no gpu-index annotation): the GPU side's Prometheus.
        self.capture = EvidenceCapture(
            kube, log_cap_bytes=log_cap_bytes,
            gpu_metrics=Prometheus(get_settings(PrometheusSettings).url, timeout_s=5.0)
            if gpu else None,
            **cast(dict[str, Any], {"secret_values": self.secrets.values_for}
                   if self.secrets else {}))
        self.sender = sender or EventSender()
        self.stop_event = threading.Event()
        self.stats = WatcherStats()
        self._queue: queue.Queue[tuple[DetectedRestart, dict[str, Any], datetime]] = queue.Queue(
            queue_size)
        self._outbox: queue.Queue[_Outgoing] = queue.Queue(queue_size)
        self._pending: dict[str, int] = {}  # container key -> restartCount queued
        self._deleted: set[str] = set()  # pod uids to forget once their restarts are reported
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[bool, str]] = {}  # name -> (unschedulable, Ready status)
        self._threads: list[threading.Thread] = []
        self._workers = workers
        self.pods = WatchLoop("pods", kube.core.list_pod_for_all_namespaces,
                              on_event=self._on_pod, on_relist=self._on_pod_relist,
                              stop=self.stop_event)
        self.nodes = WatchLoop("nodes", kube.core.list_node, on_event=self._on_node,
                               on_relist=self._on_node_relist, stop=self.stop_event)
        # A Job's own end (backoffLimit, deadline): `gpuops.job.failed` (job_failures.py).
        self.jobs = JobFailureWatch(kube, self.sender, state_file=state_file,
                                    stop=self.stop_event)
        self.gpu = GpuSensor(cluster=self.cluster, sender=self.sender, stop=self.stop_event,
                             settings=settings, state_file=state_file) if gpu else None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ClusterWatcher:
        for target, name in ((self.pods.run, "watch-pods"), (self.nodes.run, "watch-nodes"),
                             (self.jobs.run, "watch-jobs"), (self._deliver, "deliver")):
            self._threads.append(threading.Thread(target=target, name=name, daemon=True))
        for target, name in self.gpu.threads() if self.gpu else ():
            self._threads.append(threading.Thread(target=target, name=name, daemon=True))
        for i in range(self._workers):
            self._threads.append(threading.Thread(target=self._work, name=f"capture-{i}",
                                                  daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop within `timeout` overall: capture workers finish their current restart; a
        watch thread blocked on a quiet stream is a daemon and ends with the process."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # --- pods ----------------------------------------------------------------------------------

    def _on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        if self.gpu:
            self.gpu.on_pod(event_type, pod)
        self._detect(pod)  # a deleted pod's last status may carry a restart too
        if event_type == "DELETED":
            uid = pod["metadata"].get("uid", "")
            with self._lock:
                self._deleted.add(uid)
            self._forget_deleted(uid)

    def _on_pod_relist(self, pods: list[dict[str, Any]]) -> None:
        log.info("pods relisted: %d pods; reconciling restarts", len(pods))
        if self.gpu:
            self.gpu.on_pod_relist(pods)
        for pod in pods:
            self._detect(pod)
        # Pods deleted while no watch was open never send DELETED: forget them here.
        live = {p["metadata"].get("uid") for p in pods}
        with self._lock:
            self._deleted |= self.reported.pod_uids() - live
        for uid in list(self._deleted):
            self._forget_deleted(uid)

    def _forget_deleted(self, uid: str) -> None:
        """Forget a deleted pod once none of its restarts is still being reported."""
        with self._lock:
            if uid not in self._deleted or any(k.startswith(uid + "/") for k in self._pending):
                return
            self._deleted.discard(uid)
            self.reported.forget_pods({uid})

    def _detect(self, pod: dict[str, Any]) -> None:
        observed = _now()
        with self._lock:
            known = {}
            for cs in ((pod.get("status") or {}).get("containerStatuses") or []) + (
                    (pod.get("status") or {}).get("initContainerStatuses") or []):
                key = f"{pod['metadata'].get('uid')}/{cs['name']}"
                known[key] = max(self.reported.get(key), self._pending.get(key, 0))
            # One-off triggers (pod failed, stuck waiting) have keys of their own: look them up.
            found = [r for r in detect_restarts(pod, known) if r.trigger == "restart"
                     or max(self.reported.get(r.key), self._pending.get(r.key, 0)) < 1]
            for restart in found:
                self._pending[restart.key] = _done(restart)
        for restart in found:
            self.stats.detected += 1
            self._queue.put((restart, pod, observed))  # blocks when full: backpressure
            self.stats.queue_high_water = max(self.stats.queue_high_water, self._queue.qsize())

    def _work(self) -> None:
        while not self.stop_event.is_set():
            try:
                restart, pod, observed = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._capture(restart, pod, observed)
            except Exception:
                self.stats.capture_errors += 1
                log.exception("could not report restart %s", restart.identity)
                self._unqueue(restart)  # a later update will retry it
            finally:
                self._queue.task_done()

    def _unqueue(self, restart: DetectedRestart) -> None:
        with self._lock:
            if self._pending.get(restart.key) == _done(restart):
                del self._pending[restart.key]
        self._forget_deleted(restart.pod_uid)

    def _capture(self, restart: DetectedRestart, pod: dict[str, Any], observed: datetime
                 ) -> None:
        taken = _now()
        evidence = self.capture.capture(restart, pod, observed.isoformat())
        self.stats.queue_wait_s.append((taken - observed).total_seconds())
        self.stats.capture_s.append((_now() - taken).total_seconds())
        payload, size = self._fit(evidence)
        w = evidence.workload
        event = build_event(
            obj="pod", what="restarted", cluster=self.cluster, kind="Pod",
            namespace=restart.namespace, name=restart.pod, identity=restart.identity,
            payload=payload,
            labels={"gpuops.workload": evidence.workload_key, "gpuops.container": restart.container,
                    "gpuops.node": evidence.node},
            related_resources=[workload_related(self.cluster, w.kind, w.namespace, w.name)])
        self._outbox.put(_Outgoing(restart, event, observed, size))  # bounded: backpressure

    def _deliver(self) -> None:
        """One thread sends what the capture workers produced, several events per request
        when they pile up, and marks each restart reported once the server has it."""
        while not self.stop_event.is_set():
            try:
                batch = [self._outbox.get(timeout=0.2)]
            except queue.Empty:
                continue
            size = batch[0].size
            while len(batch) < SEND_BATCH_EVENTS and size < SEND_BATCH_BYTES:
                try:
                    batch.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
                size += batch[-1].size
            if not self._send(batch):
                return

    def _send(self, batch: list[_Outgoing]) -> bool:
        """Deliver a batch and mark it reported; False if the watcher stopped first."""
        try:
            self.sender.send([item.event for item in batch], stop=self.stop_event)
        except RuntimeError:  # stopped before delivery: a new watcher will find them
            for item in batch:
                self._unqueue(item.restart)
            return False
        sent = _now()
        done: dict[str, int] = {}
        for item in batch:
            done[item.restart.key] = max(done.get(item.restart.key, 0), _done(item.restart))
        with self._lock:  # one write of the state file per batch
            self.reported.mark_all(done)
        for item in batch:
            self.stats.emitted += 1
            self.stats.detect_latencies_s.append((sent - item.observed).total_seconds())
            self._unqueue(item.restart)
        return True

    def _fit(self, evidence: RestartEvidence) -> tuple[dict[str, Any], int]:
        """The event payload and its size; a log too big for an event goes to result storage
        instead."""
        payload = evidence.model_dump(mode="json")
        size = len(json.dumps(payload))
        if size <= PAYLOAD_LIMIT_BYTES:
            return payload, size
        from prefect.results import get_default_result_storage

        ref = f"gpuops/evidence/{evidence.identity.replace('/', '_')}.log"
        storage: Any = get_default_result_storage()  # a sync_compatible Block: sync here
        storage.write_path(ref, evidence.previous_log.encode())
        payload["previous_log"] = evidence.previous_log[-INLINE_LOG_BYTES:]
        payload["previous_log_ref"] = ref
        return payload, len(json.dumps(payload))

    # --- nodes ---------------------------------------------------------------------------------

    def _node_state(self, node: dict[str, Any]) -> tuple[bool, str]:
        ready = next((c.get("status", "Unknown") for c in (node.get("status") or {}).get(
            "conditions") or [] if c.get("type") == "Ready"), "Unknown")
        return bool((node.get("spec") or {}).get("unschedulable")), ready

    def _on_node_relist(self, nodes: list[dict[str, Any]]) -> None:
        if self.gpu:
            self.gpu.on_node_relist(nodes)
        for node in nodes:
            self._on_node("MODIFIED", node)

    def _on_node(self, event_type: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if self.gpu:
            self.gpu.on_node(event_type, node)
        if event_type == "DELETED":
            self._nodes.pop(name, None)
            return
        new = self._node_state(node)
        old = self._nodes.get(name)
        self._nodes[name] = new
        if old is None:
            return  # first sight: nothing changed that we saw
        changes = []
        if new[0] != old[0]:
            changes.append("cordoned" if new[0] else "uncordoned")
        if new[1] != old[1]:
            changes.append("ready" if new[1] == "True" else "not-ready")
        for what in changes:
            event = build_event(obj="node", what=what, cluster=self.cluster, kind="Node",
                                namespace=None, name=name,
                                identity=f"{name}/{what}/{node['metadata'].get('resourceVersion')}",
                                payload={"unschedulable": new[0], "ready": new[1]})
            self.sender.send([event], stop=self.stop_event)
            self.stats.node_events += 1
