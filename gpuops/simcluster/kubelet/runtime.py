"""The simulated kubelet's view of a pod: runtime state, phase and conditions, identities.

Plain data shared by the lifecycle (`lifecycle.py`, which moves it through time), the plans
of container instances (`containerplan.py`) and the status renderer (`status.py`). The
state machine reaches the world only through `World` (questions it asks) and `Outbox`
(effects it leaves: events, log lines, Xid records), both provided by the kubelet plumbing.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.clock import rfc3339
from . import containerlogs as text
from .backoff import BackoffEntry
from .spec import ConfigRef, ContainerSpec, PodSpecView

INF = math.inf
PodKey = tuple[str, str]


@functools.lru_cache(maxsize=65536)
def _rfc3339_second(second: int) -> str:
    return rfc3339(second)


def timestamp(ts: float) -> str:
    """rfc3339 (second resolution, as the API shows times), cached: status writes repeat them."""
    return _rfc3339_second(math.floor(ts))


@dataclass(frozen=True)
class Tunables:
    log_interval: float = 30.0  # virtual seconds between steady log lines
    max_backfill_lines: int = 200  # steady lines written at once after a long quiet spell
    pull_fail_seconds: float = 1.0
    show_err_image_pull: float = 2.0  # ErrImagePull shows this long before ImagePullBackOff
    mount_retry_cap: float = 120.0


@dataclass
class Fault:
    kind: str
    params: dict[str, Any]
    since: float
    once: bool = False
    fired: int = 0


class World(Protocol):
    def pull_error(self, pod: PodRuntime, spec: ContainerSpec) -> str | None: ...
    def image_present(self, pod: PodRuntime, image: str) -> bool: ...
    def image_pulled(self, pod: PodRuntime, image: str) -> None: ...
    def config_error(self, pod: PodRuntime, refs: tuple[ConfigRef, ...]) -> str | None: ...
    def environment(self, pod: PodRuntime, spec: ContainerSpec) -> dict[str, str]: ...
    def faults(self, pod: PodRuntime, container: str) -> list[Fault]: ...
    def fault_fired(self, pod: PodRuntime, container: str, fault: Fault) -> None: ...


@dataclass
class Outbox:
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # subject,type,reason,msg
    logs: list[tuple[str, str, float, str]] = field(default_factory=list)  # op,container,ts,line
    xids: list[dict[str, Any]] = field(default_factory=list)

    def event(self, reason: str, message: str, type: str = "Normal", subject: str = "pod") -> None:
        self.events.append((subject, type, reason, message))

    def log(self, container: str, ts: float, lines: list[str]) -> None:
        self.logs.extend(("write", container, ts, line) for line in lines)

    def rotate(self, container: str) -> None:
        self.logs.append(("rotate", container, 0.0, ""))


@dataclass
class Termination:
    at: float
    exit_code: int
    reason: str  # Completed, Error, OOMKilled
    cause: str  # run, memory, startup, liveness, changed, or a fault kind
    fault: Fault | None = None
    loading: bool = False


@dataclass
class Instance:
    container_id: str
    started_at: float
    loaded_at: float
    startup_ok_at: float
    ready_at: float
    steady_from: float
    end: Termination | None = None
    forced_end: Termination | None = None  # probes failing while loading, a changed spec
    loaded_logged: bool = False
    started: bool = False
    ready: bool = False
    steady_written: int = 0  # steady lines are made lazily: on reads and at the end

    def next_due(self) -> float:
        due = self.end.at if self.end else INF
        if not self.loaded_logged:
            due = min(due, self.loaded_at)
        if not self.started:
            due = min(due, self.startup_ok_at)
        if not self.ready:
            due = min(due, self.ready_at)
        return due


@dataclass
class ContainerRuntime:
    spec: ContainerSpec
    stage: str = "pending"  # + pulling, pull-error, pull-backoff, config-error, running,
    due: float = INF  #        backoff, completed (init done), exited (final)
    restart_count: int = 0
    instances: int = 0
    instance: Instance | None = None
    terminated: dict[str, Any] | None = None  # the last instance's end, status shape
    last_terminated: dict[str, Any] | None = None
    waiting_reason: str | None = None
    waiting_message: str | None = None
    image_id: str = ""
    finished_at: float = 0.0
    ever_started: bool = False
    backoff: BackoffEntry | None = None
    pull_backoff: BackoffEntry | None = None
    pull_started: float = 0.0
    retry_delay: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def ready(self) -> bool:
        return self.stage == "running" and self.instance is not None and self.instance.ready


@dataclass
class PodRuntime:
    namespace: str
    name: str
    uid: str
    node: str
    spec: PodSpecView
    admitted_at: float
    host_ip: str
    pod_ip: str
    ctx: text.LogContext
    containers: list[ContainerRuntime]
    tun: Tunables = field(default_factory=Tunables)
    sandbox_due: float = 0.0
    sandbox_ready_at: float | None = None
    mount_retry: float = 0.0
    initialized_at: float | None = None
    phase: str = "Pending"
    failure: tuple[str, str] | None = None  # (reason, message): Evicted, DeadlineExceeded
    terminating_at: float | None = None
    finalize_at: float = INF
    done: str | None = None  # "terminal" (Succeeded/Failed) or "deleted"
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra_conditions: list[dict[str, Any]] = field(default_factory=list)
    deletion_grace: float | None = None  # set once the pod has a deletionTimestamp
    deletion_seen_at: float = 0.0
    scheduled_due: float | None = None  # the kubelet's heap bookkeeping

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def formatted(self) -> str:
        """The kubelet's format.Pod: `name_namespace(uid)`."""
        return f"{self.name}_{self.namespace}({self.uid})"

    def container(self, name: str) -> ContainerRuntime | None:
        return next((c for c in self.containers if c.name == name), None)

    def app(self) -> list[ContainerRuntime]:
        return [c for c in self.containers if c.spec.role == "app"]

    def next_due(self) -> float:
        if self.done:
            return INF
        if self.terminating_at is not None:
            return self.finalize_at
        due = self.sandbox_due if self.sandbox_ready_at is None else INF
        if self.spec.active_deadline is not None:
            due = min(due, self.admitted_at + self.spec.active_deadline)
        return min([due, *(c.due for c in self.containers)])


def new_pod_runtime(namespace: str, name: str, uid: str, node: str, spec: PodSpecView, *,
                    now: float, host_ip: str, pod_ip: str, ctx: text.LogContext,
                    tun: Tunables | None = None) -> PodRuntime:
    pod = PodRuntime(namespace, name, uid, node, spec, now, host_ip, pod_ip, ctx,
                     [ContainerRuntime(c) for c in spec.containers], tun=tun or Tunables(),
                     sandbox_due=now)
    pending = "PodInitializing" if any(c.role != "app" for c in spec.containers) \
        else "ContainerCreating"
    for c in pod.containers:
        c.waiting_reason = pending
    update_conditions(pod, now)
    return pod


# --- phase and conditions -----------------------------------------------------------------------

def compute_phase(pod: PodRuntime) -> str:
    """kubelet's getPhase over the runtime state."""
    if pod.failure:
        return "Failed"
    for c in pod.containers:
        if c.spec.role == "init" and c.stage == "exited" and c.terminated and \
                c.terminated["exitCode"] != 0:
            return "Failed"
    if pod.initialized_at is None:
        return "Pending"
    waiting = running = stopped = succeeded = 0
    for c in pod.app():
        if c.stage == "running":
            running += 1
        elif c.stage == "exited":
            stopped += 1
            succeeded += c.terminated is None or c.terminated["exitCode"] == 0
        elif c.terminated is not None or c.last_terminated is not None:
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    policy = pod.spec.restart_policy
    if policy == "Always":
        return "Running"
    if all(c.stage == "exited" for c in pod.app()):
        return "Succeeded" if stopped == succeeded else "Failed"
    return "Running"


def _names(containers: list[ContainerRuntime]) -> str:
    return "[" + " ".join(c.name for c in containers) + "]"


def update_conditions(pod: PodRuntime, t: float) -> None:
    started_sidecars = [c for c in pod.containers if c.spec.role == "sidecar"]
    incomplete = [c for c in pod.containers if
                  (c.spec.role == "init" and c.stage != "completed")
                  or (c.spec.role == "sidecar" and not c.ever_started)]
    if pod.initialized_at is not None:
        initialized: tuple[str, str | None, str | None] = ("True", None, None)
    else:
        initialized = ("False", "ContainersNotInitialized",
                       f"containers with incomplete status: {_names(incomplete)}")
    unready = [c for c in pod.app() + started_sidecars if not c.ready]
    if pod.phase == "Succeeded":
        ready: tuple[str, str | None, str | None] = ("False", "PodCompleted", None)
    elif unready:
        ready = ("False", "ContainersNotReady",
                 f"containers with unready status: {_names(unready)}")
    else:
        ready = ("True", None, None)
    sandbox = "True" if pod.sandbox_ready_at is not None and not pod.done else "False"
    for kind, (status, reason, message) in (
            ("PodReadyToStartContainers", (sandbox, None, None)),
            ("Initialized", initialized), ("Ready", ready), ("ContainersReady", ready)):
        old = pod.conditions.get(kind)
        if old is not None and old["status"] == status and old.get("reason") == reason \
                and old.get("message") == message:
            continue
        cond: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None,
                                "lastTransitionTime": timestamp(t)}
        if old is not None and old["status"] == status:
            cond["lastTransitionTime"] = old["lastTransitionTime"]
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        pod.conditions[kind] = cond


# --- identities ---------------------------------------------------------------------------------

def container_id(uid: str, name: str, restart_count: int) -> str:
    return "containerd://" + hashlib.sha256(f"{uid}/{name}/{restart_count}".encode()).hexdigest()


def normalized_image(image: str) -> str:
    """`nginx:1.25` -> `docker.io/library/nginx`, as containerd names repositories."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    first = repo.split("/", 1)[0]
    if "/" not in repo:
        return f"docker.io/library/{repo}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{repo}"
    return repo


def image_id(image: str) -> str:
    digest = hashlib.sha256(image.encode()).hexdigest()
    return f"{normalized_image(image)}@sha256:{digest}"


def image_size(image: str) -> int:
    h = int(hashlib.sha1(image.encode()).hexdigest()[:8], 16)
    if any(k in image.lower() for k in ("vllm", "pytorch", "nemo", "cuda", "triton")):
        return 6_000_000_000 + h % 4_000_000_000
    return 20_000_000 + h % 400_000_000
