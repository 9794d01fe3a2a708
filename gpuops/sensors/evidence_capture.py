"""Capture the evidence of one restart before it vanishes, through the Kubernetes API.

The previous container's log exists only until the next restart, and events expire after
an hour: this runs the moment a restart is seen. Reads that fail (a log already rotated, a
forbidden owner) are recorded in the evidence rather than dropping the restart.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpuops.common.annotations import GPU_INDEX, gpuops_annotations
from gpuops.common.errors import KubeError, KubeNotFound, PrometheusError
from gpuops.common.redact import pod_env_secrets, redact, redact_text
from gpuops.sensors.job_failures import owning_workload
from gpuops.sensors.restart_detector import DetectedRestart
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus
from gpuops.tasks.restarts.dcgm_gpus import read_container_gpus, read_node_xids
from gpuops.tasks.restarts.evidence import (
    Condition,
    ContainerState,
    GpuDevice,
    KubeEvent,
    PodCondition,
    RestartEvidence,
    TerminatedState,
    Workload,
    XidEvent,
    parse_timestamp,
)

log = logging.getLogger("gpuops.sensors.capture")

def _now() -> str:
    return datetime.now(UTC).isoformat()


def container_state(raw: dict[str, Any] | None) -> ContainerState:
    raw = raw or {}
    term = raw.get("terminated")
    return ContainerState(
        waiting_reason=(raw.get("waiting") or {}).get("reason", ""),
        waiting_message=(raw.get("waiting") or {}).get("message", ""),
        running_since=(raw.get("running") or {}).get("startedAt"),
        terminated=None if not term else TerminatedState(
            reason=term.get("reason", ""), exit_code=term.get("exitCode"),
            signal=term.get("signal"), message=term.get("message", ""),
            started_at=term.get("startedAt"), finished_at=term.get("finishedAt")))


def to_event(raw: dict[str, Any]) -> KubeEvent:
    involved = raw.get("involvedObject") or raw.get("regarding") or {}
    return KubeEvent(type=raw.get("type", "Normal"), reason=raw.get("reason", ""),
                     message=raw.get("message") or raw.get("note") or "",
                     count=raw.get("count") or 1,
                     last_seen=raw.get("lastTimestamp") or raw.get("eventTime"),
                     source=(raw.get("source") or {}).get("component", ""),
                     object_kind=involved.get("kind", ""), object_name=involved.get("name", ""))


def xids_from(node: dict[str, Any], node_events: list[KubeEvent]) -> list[XidEvent]:
    """GPU Xid errors on a node: from Xid events (DCGM / device plugin) and, where an
    exporter records them, the node annotation `sim.gpuops.io/xid-events` style list."""
    found = []
    for ev in node_events:
        m = re.search(r"\bXid\s*(?:\(PCI:[0-9a-fA-F:.]+\))?[\s:(]*(\d+)", ev.message)
        if m:
            gpu = re.search(r"GPU[\s-]*(\d+)", ev.message)
            # which GPU, by bus id: the driver's `NVRM: Xid (PCI:0000:3b:00): 79`, or an
            # exporter's `(GPU 3, PCI 0000:5D:00.0)`
            bus = re.search(r"\(PCI:([0-9a-fA-F:.]+)\)|\bPCI ([0-9a-fA-F]{4,8}:[0-9a-fA-F:.]+)",
                            ev.message)
            found.append(XidEvent(xid=int(m.group(1)), gpu=int(gpu.group(1)) if gpu else None,
                                  pci_bus_id=(bus.group(1) or bus.group(2)) if bus else "",
                                  time=ev.last_seen, message=ev.message))
    for key, value in ((node.get("metadata") or {}).get("annotations") or {}).items():
        if key.endswith("/xid-events"):
            try:
                for item in json.loads(value):
                    found.append(XidEvent(xid=int(item["xid"]), gpu=item.get("gpu"),
                                          pci_bus_id=str(item.get("pciBusId")
                                                         or item.get("pci_bus_id") or ""),
                                          time=str(item.get("time")) if item.get("time") else None,
                                          message=str(item.get("message", ""))))
            except (ValueError, KeyError, TypeError):
                log.warning("unreadable Xid annotation %s on node %s", key,
                            node["metadata"].get("name"))
    return found


def gpus_from(pod: dict[str, Any]) -> list[GpuDevice]:
    """The GPUs the pod was given, by index, as the scheduler recorded them
    (`gpuops.io/gpu-index`: "3", "0,1"); empty when not recorded (then every Xid of the
    node may be the container's). Only what the pod itself shows: no node-local API."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX) or ""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        return []
    return [GpuDevice(index=int(p)) for p in parts]


def _holds_gpus(resources: dict[str, Any]) -> bool:
    """Whether the container asks for GPUs (whole `nvidia.com/gpu`, or a gpuops share)."""
    asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    return any(str(asked.get(name, "0")) not in ("0", "") for name in
               ("nvidia.com/gpu", "gpuops.io/gpu-milli"))


def _ended_at(status: dict[str, Any]) -> datetime | None:
    """When the container's last instance ended (its lastState, else its state)."""
    for key in ("lastState", "state"):
        finished = ((status.get(key) or {}).get("terminated") or {}).get("finishedAt")
        if finished:
            try:
                return parse_timestamp(finished)
            except ValueError:
                return None
    return None


def _rolling_out(owner: dict[str, Any]) -> bool:
    status, spec = owner.get("status") or {}, owner.get("spec") or {}
    if owner.get("kind") not in ("Deployment", "StatefulSet", "DaemonSet", "LeaderWorkerSet"):
        return False
    if (owner.get("metadata") or {}).get("generation", 0) > status.get("observedGeneration", 0):
        return True
    replicas = spec.get("replicas", 1)
    return status.get("updatedReplicas", replicas) < replicas or (
        status.get("replicas", replicas) > replicas)


def _no_secret_values(pod: dict[str, Any]) -> list[str]:
    return []


class EvidenceCapture:
    """Reads one restart's evidence and redacts all of it: by the values the pod may print
    (its literal env values and, from `secret_values`, those of the Secrets it references)
    and by shape, in every field, before it leaves as an event."""

    def __init__(self, kube: Kube, *, log_cap_bytes: int = 1 << 20, max_events: int = 30,
                 secret_values: Callable[[dict[str, Any]], list[str]] = _no_secret_values,
                 gpu_metrics: Prometheus | None = None) -> None:
        """`gpu_metrics`: a Prometheus with DCGM exporter series, asked for a GPU pod's GPUs
        and its node's Xids when the pod and the node do not record them (dcgm_gpus.py)."""
        self.kube = kube
        self.gpu_metrics = gpu_metrics
        self.secret_values = secret_values
        self.log_cap_bytes = log_cap_bytes
        self.max_events = max_events
        self._owners: dict[str, dict[str, Any]] = {}
        self._namespaces: dict[str, dict[str, Any]] = {}

    def capture(self, restart: DetectedRestart, pod: dict[str, Any], observed_at: str
                ) -> RestartEvidence:
        ns, name = restart.namespace, restart.pod
        log_text, log_bytes, truncated, log_error = self._previous_log(restart)
        status = pod.get("status") or {}
        cs: dict[str, Any] = next((c for c in (status.get("initContainerStatuses") or [])
                   + (status.get("containerStatuses") or []) if c["name"] == restart.container),
                  {})
        spec_c: dict[str, Any] = next((c for c in ((pod.get("spec") or {}).get("initContainers") or [])
                       + ((pod.get("spec") or {}).get("containers") or [])
                       if c["name"] == restart.container), {})
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        pod_events = self._events(ns, f"involvedObject.name={name},involvedObject.uid="
                                  f"{restart.pod_uid}")
        node, node_events = {}, []
        if node_name:
            try:
                node = self.kube.get_node(node_name)
            except KubeError as e:
                log.info("node %s unreadable: %s", node_name, e)
            node_events = self._events(None, f"involvedObject.kind=Node,involvedObject.name="
                                       f"{node_name}")
        owner = self._owner(pod)
        namespace = self._namespace(ns)
        secrets = pod_env_secrets(pod) + self.secret_values(pod)
        resources = spec_c.get("resources") or {}
        gpus, xids = gpus_from(pod), xids_from(node, node_events)
        if self.gpu_metrics is not None and node_name and _holds_gpus(resources) and (
                not gpus or not xids):
            gpus, xids = self._from_dcgm(self.gpu_metrics, restart, node_name, cs, gpus,
                                         xids)
        evidence = RestartEvidence(
            cluster=self.kube.cluster_name, namespace=ns, pod=name, pod_uid=restart.pod_uid,
            container=restart.container, container_kind=restart.kind,
            restart_count=restart.restart_count, trigger=restart.trigger,
            trigger_reason=restart.reason, container_instance=restart.instance,
            pod_reason=status.get("reason", ""),
            pod_message=status.get("message", ""),
            pod_conditions=[PodCondition(type=c.get("type", ""), status=c.get("status", ""),
                                      reason=c.get("reason", ""), message=c.get("message", ""))
                            for c in status.get("conditions") or []],
            image=cs.get("image") or spec_c.get("image", ""),
            node=node_name, requests={k: str(v) for k, v in (resources.get("requests") or {}).items()},
            limits={k: str(v) for k, v in (resources.get("limits") or {}).items()},
            last_state=container_state(cs.get("lastState")), state=container_state(cs.get("state")),
            pod_phase=status.get("phase", ""),
            pod_deleting=bool((pod.get("metadata") or {}).get("deletionTimestamp")),
            pod_labels=(pod.get("metadata") or {}).get("labels") or {},
            namespace_labels=(namespace.get("metadata") or {}).get("labels") or {},
            namespace_annotations={k: v for k, v in ((namespace.get("metadata") or {}).get(
                "annotations") or {}).items() if k.startswith("gpuops.io/")},
            pod_annotations=gpuops_annotations((pod.get("metadata") or {}).get("annotations")),
            workload=Workload(kind=owner.get("kind", "Pod"),
                              name=(owner.get("metadata") or {}).get("name", name),
                              namespace=ns, uid=(owner.get("metadata") or {}).get("uid"),
                              rolling_out=_rolling_out(owner)),
            previous_log=redact_text(log_text, secrets), previous_log_bytes=log_bytes,
            previous_log_truncated=truncated, log_error=log_error,
            pod_events=pod_events, node_events=node_events,
            node_conditions=[Condition(type=c.get("type", ""), status=c.get("status", ""),
                                           reason=c.get("reason", ""),
                                           message=c.get("message", ""))
                             for c in (node.get("status") or {}).get("conditions") or []],
            node_xids=xids, gpus=gpus,
            observed_at=observed_at,
            captured_at=_now(), restarts_missed=restart.missed)
        # Defence in depth: no value this pod may print leaves in any field.
        return RestartEvidence.model_validate(redact(evidence.model_dump(), secrets))

    @staticmethod
    def _from_dcgm(prometheus: Prometheus, restart: DetectedRestart, node: str,
                   status: dict[str, Any], gpus: list[GpuDevice], xids: list[XidEvent]
                   ) -> tuple[list[GpuDevice], list[XidEvent]]:
        """What DCGM's series add where the pod or the node said nothing: the GPUs the pod
        held (as mapped when it ended) and the node's Xids of the look-back before that."""
        ended = _ended_at(status) or datetime.now(UTC)
        try:
            if not gpus:
                gpus = read_container_gpus(prometheus, restart.namespace, restart.pod,
                                           restart.container, at=ended)
            if not xids:
                xids = read_node_xids(prometheus, node, ended)
        except PrometheusError as e:  # the evidence goes out without it, as before
            log.info("DCGM series for %s/%s unreadable: %s", restart.namespace, restart.pod, e)
        return gpus, xids

    def _previous_log(self, restart: DetectedRestart) -> tuple[str, int, bool, str]:
        if restart.log_source == "none":
            return "", 0, False, "no previous container instance"
        try:  # a container that was not restarted: its own log is the one that ended
            text = self.kube.read_log(restart.namespace, restart.pod, restart.container,
                                      previous=restart.log_source == "previous",
                                      limit_bytes=self.log_cap_bytes + 1)
        except KubeError as e:
            return "", 0, False, str(e)
        raw = text.encode()
        truncated = len(raw) > self.log_cap_bytes
        if truncated:  # keep the end: the last lines say why it died
            raw = raw[-self.log_cap_bytes:]
        return raw.decode(errors="replace"), len(raw), truncated, ""

    def _events(self, namespace: str | None, selector: str) -> list[KubeEvent]:
        try:
            raw = self.kube.list_events(namespace, field_selector=selector)
        except KubeError as e:
            log.info("events %s unreadable: %s", selector, e)
            return []
        raw.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return [to_event(e) for e in raw[-self.max_events:]]

    def _owner(self, pod: dict[str, Any]) -> dict[str, Any]:
        refs = (pod.get("metadata") or {}).get("ownerReferences") or []
        ref = next((r for r in refs if r.get("controller")), None)
        if ref is None:
            return pod
        # Rollout state changes, so owners are re-read; only the chain shape is cached.
        try:
            return owning_workload(self.kube, pod)
        except KubeError as e:
            log.info("owner of %s unreadable: %s", pod["metadata"]["name"], e)
            return {"kind": ref["kind"], "metadata": {"name": ref["name"], "uid": ref.get("uid")}}

    def _namespace(self, name: str) -> dict[str, Any]:
        if name not in self._namespaces:
            try:
                self._namespaces[name] = self.kube.get_namespace(name)
            except KubeNotFound:
                self._namespaces[name] = {}
            except KubeError as e:
                log.info("namespace %s unreadable: %s", name, e)
                return {}
        return self._namespaces[name]
