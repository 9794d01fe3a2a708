"""What the cluster watcher captures the moment a container restarts (pure data).

The model is the payload of `gpuops.pod.restarted` and the input of the diagnosis: the
evidence that is about to vanish (the previous container's log, `lastState`, recent events)
plus the context needed to classify and route it. Validation errors name the field and never
echo the value (a payload carries logs, which may hold what redaction missed).

Times are parsed here, once, into timezone-aware UTC datetimes (STYLE.md, "parse at the
boundary"): RFC 3339 / ISO 8601 strings with a date and a time. A time without an offset is
taken as UTC, as Kubernetes writes every time in UTC; a value that is not a time is refused,
so the event carrying it is rejected at the edge (`event_intake.py`) instead of failing every
later use.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

SCHEMA_VERSION = 1
_HAS_DATE_AND_TIME = re.compile(r"^\s*\d{4}-?\d{2}-?\d{2}[Tt ]\d")


def parse_timestamp(value: Any) -> datetime:
    """An aware UTC datetime from an ISO 8601 string or a datetime; naive means UTC.

    The error never repeats the value: it may be a fragment of a log."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and _HAS_DATE_AND_TIME.match(value):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError("not an RFC 3339 time (e.g. 2025-06-01T10:00:01Z)") from None
    else:
        raise ValueError("not an RFC 3339 time with a date and a time "
                         "(e.g. 2025-06-01T10:00:01Z)")
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def rfc3339(at: datetime | str | None) -> str:
    """How gpuops shows a time: `2025-06-01T10:00:01Z` (as Kubernetes does), or "".
    A string is shown as it is (a model built with `model_copy(update=...)` is unvalidated)."""
    if not at:
        return ""
    if isinstance(at, str):
        return at
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


#: A point in time, parsed once (see the module docstring).
Timestamp = Annotated[AwareDatetime, BeforeValidator(parse_timestamp)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True)


class TerminatedState(_Model):
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    message: str = ""
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class ContainerState(_Model):
    """A container's `state` or `lastState`: one of waiting / running / terminated."""

    waiting_reason: str = ""
    waiting_message: str = ""
    running_since: Timestamp | None = None
    terminated: TerminatedState | None = None


class KubeEvent(_Model):
    type: str = "Normal"
    reason: str = ""
    message: str = ""
    count: int = 1
    last_seen: Timestamp | None = None
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
    #: the GPU's PCI bus id as the driver names it (`0000:3b:00` in `NVRM: Xid (PCI:...)`)
    pci_bus_id: str = ""
    time: Timestamp | None = None
    message: str = ""


class GpuDevice(_Model):
    """A GPU given to the container (from the kubelet's pod-resources or the device plugin):
    an Xid counts as this container's evidence only when it is on one of these."""

    index: int | None = None
    uuid: str = ""
    pci_bus_id: str = ""  # `00000000:3B:00.0` as nvidia-smi writes it


class Workload(_Model):
    kind: str
    name: str
    namespace: str
    uid: str | None = None
    #: the owner is mid-rollout (new template being rolled out): a termination may be planned
    rolling_out: bool = False


Trigger = Literal["restart", "pod-failed", "waiting", "terminated"]


class RestartEvidence(_Model):
    """One restart of one container instance; `identity` is unique per restart.

    Not only restarts: a container that failed in a pod that will not restart it (a Job's
    pod with restartPolicy Never) is reported the same way (`trigger` "terminated"), and so
    is a pod taken away ("pod-failed") or a container that cannot start ("waiting")."""

    schema_version: int = SCHEMA_VERSION
    cluster: str
    namespace: str
    pod: str
    pod_uid: str
    container: str
    container_kind: Literal["init", "sidecar", "app"] = "app"
    restart_count: int = Field(ge=0)
    #: what was seen: a container restart, a container that failed and will not be
    #: restarted (`state.terminated`), a pod taken away (evicted, preempted, node failure),
    #: or a container stuck before it could start (image pull, config error)
    trigger: Trigger = "restart"
    trigger_reason: str = ""  # the pod's failure reason, or the container's waiting reason
    #: for "terminated": which container instance ended (its containerID, else finishedAt)
    container_instance: str = ""
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
    #: the pod's `gpuops.io/` annotations: what gpuops itself recorded on it (an eviction)
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    workload: Workload
    #: the log of the instance that ended: the previous one for a restart, the current one
    #: when no restart followed (a failed Job pod, a pod taken away)
    previous_log: str = ""
    previous_log_bytes: int = 0
    previous_log_truncated: bool = False
    previous_log_ref: str | None = None  # result-storage key when the log is too big to inline
    log_error: str = ""  # why the previous log could not be read, if it could not
    pod_events: list[KubeEvent] = Field(default_factory=list)
    node_events: list[KubeEvent] = Field(default_factory=list)
    node_conditions: list[Condition] = Field(default_factory=list)
    node_xids: list[XidEvent] = Field(default_factory=list)
    #: the GPUs the container was given, when known (empty: unknown, every Xid may be its)
    gpus: list[GpuDevice] = Field(default_factory=list)
    restarts_missed: int = 0  # earlier restarts seen only by their count (no evidence left)
    observed_at: Timestamp  # when the API server showed the restart (watch event received)
    captured_at: Timestamp  # when the evidence was complete

    @property
    def identity(self) -> str:
        base = f"{self.pod_uid}/{self.container}/{self.restart_count}"
        if self.trigger == "restart":
            return base
        if self.trigger == "terminated":
            return f"{base}/terminated-{self.container_instance}"
        return f"{base}/{self.trigger}-{self.trigger_reason}"

    def termination(self) -> TerminatedState | None:
        """The termination this event is about: `lastState` for a restart (falling back to
        `state`), the current `state` when no restart followed. A pod taken away is not a
        termination of its own: an older `lastState` (a crash an hour ago) is not its cause."""
        if self.trigger == "restart":
            return self.last_state.terminated or self.state.terminated
        if self.trigger == "waiting":
            return self.last_state.terminated
        return self.state.terminated

    @property
    def termination_field(self) -> str:
        """Where `termination()` comes from, as the pod's status names it."""
        last = self.last_state.terminated
        if last is not None and self.termination() is last:
            return "lastState.terminated"
        return "state.terminated"

    @property
    def workload_key(self) -> str:
        w = self.workload
        return f"{self.cluster}/{w.namespace}/{w.kind}/{w.name}"

    def log_tail(self, lines: int = 20) -> list[str]:
        return self.previous_log.splitlines()[-lines:]


class JobFailure(_Model):
    """A Job that gave up: its `Failed` condition (`BackoffLimitExceeded`, `DeadlineExceeded`,
    ...), as the watcher saw it. The payload of `gpuops.job.failed`; reported in the Slack
    threads of the Job's failed pods."""

    schema_version: int = SCHEMA_VERSION
    cluster: str
    namespace: str
    name: str
    uid: str
    reason: str = ""
    message: str = ""
    failed_pods: int = Field(0, ge=0)  # `status.failed`
    succeeded_pods: int = Field(0, ge=0)
    backoff_limit: int | None = None  # `spec.backoffLimit` (Kubernetes' default is 6)
    active_deadline_seconds: int | None = None
    started_at: Timestamp | None = None  # `status.startTime`
    failed_at: Timestamp | None = None  # the condition's lastTransitionTime
    owner: str = ""  # "CronJob/nightly" when a CronJob made the Job
    pod_labels: dict[str, str] = Field(default_factory=dict)  # the pod template's
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    namespace_annotations: dict[str, str] = Field(default_factory=dict)
    observed_at: Timestamp

    @property
    def identity(self) -> str:
        return f"{self.uid}/job-failed-{self.reason}"

    @property
    def workload(self) -> Workload:
        return Workload(kind="Job", name=self.name, namespace=self.namespace, uid=self.uid)

    @property
    def workload_key(self) -> str:
        """As the Job's pods' evidence has it, so both land in one timeline."""
        return f"{self.cluster}/{self.namespace}/Job/{self.name}"
