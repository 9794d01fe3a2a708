"""What the cluster watcher captures the moment a container restarts (pure data).

The model is the payload of `gpuops.pod.restarted` and the input of the diagnosis: the
evidence that is about to vanish (the previous container's log, `lastState`, recent events)
plus the context needed to classify and route it. Validation errors name the field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class TerminatedState(_Model):
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None


class ContainerState(_Model):
    """A container's `state` or `lastState`: one of waiting / running / terminated."""

    waiting_reason: str = ""
    waiting_message: str = ""
    running_since: str | None = None
    terminated: TerminatedState | None = None


class KubeEvent(_Model):
    type: str = "Normal"
    reason: str = ""
    message: str = ""
    count: int = 1
    last_seen: str | None = None
    source: str = ""
    object_kind: str = ""
    object_name: str = ""
    #: `involvedObject.fieldPath`, e.g. `spec.containers{app}`: which container it is about
    field_path: str = ""


class Condition(_Model):
    """A node's or a pod's condition."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


class PodCondition(_Model):
    """A pod condition, e.g. `DisruptionTarget` with reason `PreemptionByScheduler`."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


NodeCondition = Condition  # the name the diagnosis rules use


class XidEvent(_Model):
    xid: int
    gpu: int | None = None
    time: str | None = None
    message: str = ""


class Workload(_Model):
    kind: str
    name: str
    namespace: str
    uid: str | None = None
    #: the owner is mid-rollout (new template being rolled out): a termination may be planned
    rolling_out: bool = False


class RestartEvidence(_Model):
    """One restart of one container instance; `identity` is unique per restart."""

    schema_version: int = SCHEMA_VERSION
    cluster: str
    namespace: str
    pod: str
    pod_uid: str
    container: str
    container_kind: Literal["init", "sidecar", "app"] = "app"
    restart_count: int = Field(ge=0)
    #: what was seen: a container restart, a pod taken away (evicted, preempted, node
    #: failure), or a container stuck before it could start (image pull, config error)
    trigger: Literal["restart", "pod-failed", "waiting"] = "restart"
    trigger_reason: str = ""  # the pod's failure reason, or the container's waiting reason
    image: str = ""
    node: str = ""
    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)
    last_state: ContainerState
    state: ContainerState = Field(default_factory=ContainerState)
    pod_phase: str = ""
    #: `status.reason` / `status.message`: Evicted, Preempting, Terminated (node shutdown)…
    pod_reason: str = ""
    pod_message: str = ""
    pod_conditions: list[PodCondition] = Field(default_factory=list)
    pod_deleting: bool = False
    pod_labels: dict[str, str] = Field(default_factory=dict)
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    namespace_annotations: dict[str, str] = Field(default_factory=dict)
    workload: Workload
    previous_log: str = ""
    previous_log_bytes: int = 0
    previous_log_truncated: bool = False
    previous_log_ref: str | None = None  # result-storage key when the log is too big to inline
    log_error: str = ""  # why the previous log could not be read, if it could not
    pod_events: list[KubeEvent] = Field(default_factory=list)
    node_events: list[KubeEvent] = Field(default_factory=list)
    node_conditions: list[Condition] = Field(default_factory=list)
    node_xids: list[XidEvent] = Field(default_factory=list)
    restarts_missed: int = 0  # earlier restarts seen only by their count (no evidence left)
    observed_at: str  # when the API server showed the restart (watch event received)
    captured_at: str  # when the evidence was complete

    @property
    def identity(self) -> str:
        base = f"{self.pod_uid}/{self.container}/{self.restart_count}"
        if self.trigger == "restart":
            return base
        return f"{base}/{self.trigger}-{self.trigger_reason}"

    @property
    def workload_key(self) -> str:
        w = self.workload
        return f"{self.cluster}/{w.namespace}/{w.kind}/{w.name}"

    def log_tail(self, lines: int = 20) -> list[str]:
        return self.previous_log.splitlines()[-lines:]
