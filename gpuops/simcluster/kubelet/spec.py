"""What the simulated kubelet reads from a pod: per-container timings, probes and references.

A real kubelet learns how long an image pull or a model load takes from the world; here the
pod says it through annotations (pod-wide, or for one container with a `.<container>` suffix:
`sim.gpuops.io/run-seconds.worker`):

- `sim.gpuops.io/pull-seconds`: image pull time when the image is not on the node yet
  (default 2 s, or the cluster's `PullTimes`: a scenario's `sim.kubelet.pull_seconds` and
  per-image globs in `sim.kubelet.image_pull_seconds`).
- `sim.gpuops.io/load-seconds`: model-load time after start; readiness (and the startup and
  liveness probes) fail until it is over (default 0). A `slow-version` fault's load time
  (`core/versions.py`: image, model or command-line globs) replaces it for matching containers
  of pods the kubelet takes on after the fault.
- `sim.gpuops.io/run-seconds`: how long the container runs before exiting by itself (absent:
  forever; init containers default to 1 s). `sim.gpuops.io/exit-code` is its exit code (0).
- `sim.gpuops.io/memory-growth-mib-per-min` (+ `sim.gpuops.io/memory-base-mib`, default a
  tenth of the limit): memory grows until the container's memory limit, then OOMKilled.
- `sim.gpuops.io/workload`: `serving`, `training` or `generic`, the flavour of its log lines
  (default guessed from the image).

Parsing is pure: it turns a pod dict into frozen dataclasses the lifecycle works on.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuops.common.quantity import parse_quantity

from ..core.gpus import container_gpu_request
from ..core.versions import LoadTimes

PREFIX = "sim.gpuops.io/"
PULL_SECONDS = PREFIX + "pull-seconds"
LOAD_SECONDS = PREFIX + "load-seconds"
RUN_SECONDS = PREFIX + "run-seconds"
EXIT_CODE = PREFIX + "exit-code"
MEMORY_GROWTH = PREFIX + "memory-growth-mib-per-min"
MEMORY_BASE = PREFIX + "memory-base-mib"
WORKLOAD = PREFIX + "workload"

DEFAULT_PULL_SECONDS = 2.0
DEFAULT_INIT_RUN_SECONDS = 1.0

_SERVING_HINTS = ("vllm", "sglang", "text-generation-inference", "tgi", "triton", "llm-d",
                  "tensorrt-llm", "serve", "inference")
_TRAINING_HINTS = ("pytorch", "torch", "nemo", "megatron", "deepspeed", "train", "trainer",
                   "jax", "cuda")


@dataclass(frozen=True)
class Probe:
    kind: str  # httpGet, tcpSocket, exec, grpc
    initial_delay: float
    period: float
    failure_threshold: int
    path: str = "/"
    port: str = ""
    scheme: str = "http"
    command: str = ""

    def tick_at_or_after(self, start: float, t: float) -> float:
        """The first probe time >= t for a container started at `start`."""
        first = start + self.initial_delay
        if math.isinf(t):
            return t
        if t <= first:
            return first
        return first + math.ceil((t - first) / self.period - 1e-9) * self.period

    def failure(self, ip: str, *, loading: bool) -> str:
        """The probe's failure text as the kubelet's prober writes it."""
        if self.kind == "httpGet":
            if loading:
                return (f'Get "{self.scheme}://{ip}:{self.port}{self.path}": dial tcp '
                        f"{ip}:{self.port}: connect: connection refused")
            return "HTTP probe failed with statuscode: 500"
        if self.kind == "tcpSocket":
            return f"dial tcp {ip}:{self.port}: connect: connection refused"
        if self.kind == "grpc":
            return (f'timeout: failed to connect service "{ip}:{self.port}" within 1s: '
                    "context deadline exceeded")
        return f"command {self.command!r} exited with 1"


@dataclass(frozen=True)
class ConfigRef:
    kind: str  # configmap, secret
    name: str
    key: str | None = None
    volume: str | None = None  # set for a volume source: a FailedMount, not a config error


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None = None  # a literal value
    ref: ConfigRef | None = None  # configMapKeyRef / secretKeyRef (with its key)


@dataclass(frozen=True)
class EnvFrom:
    ref: ConfigRef  # a whole ConfigMap or Secret
    prefix: str = ""


def parse_env(container: Mapping[str, Any]) -> tuple[tuple[EnvVar, ...], tuple[EnvFrom, ...]]:
    """The `env` and `envFrom` entries of a container spec."""
    env: list[EnvVar] = []
    for entry in container.get("env") or ():
        value_from = entry.get("valueFrom") or {}
        ref = None
        for field_name, kind in (("configMapKeyRef", "configmap"), ("secretKeyRef", "secret")):
            source = value_from.get(field_name)
            if source and source.get("name"):
                ref = ConfigRef(kind, source["name"], source.get("key"))
        value = entry.get("value")
        env.append(EnvVar(str(entry.get("name", "")), None if value is None else str(value),
                          ref))
    env_from: list[EnvFrom] = []
    for source in container.get("envFrom") or ():
        for field_name, kind in (("configMapRef", "configmap"), ("secretRef", "secret")):
            ref = source.get(field_name)
            if ref and ref.get("name"):
                env_from.append(EnvFrom(ConfigRef(kind, ref["name"]),
                                        str(source.get("prefix") or "")))
    return tuple(env), tuple(env_from)


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str
    role: str  # init, sidecar, app
    pull_policy: str
    pull_seconds: float
    load_seconds: float
    run_seconds: float | None
    exit_code: int
    memory_limit_mib: float | None
    memory_growth_mib_per_min: float | None
    memory_base_mib: float
    gpus: int  # GPU devices it sees: its whole GPUs, or 1 for a share of one
    workload: str
    readiness: Probe | None = None
    liveness: Probe | None = None
    startup: Probe | None = None
    config_refs: tuple[ConfigRef, ...] = ()
    args: tuple[str, ...] = ()  # command and args, for the log lines that echo them
    env: tuple[EnvVar, ...] = ()
    env_from: tuple[EnvFrom, ...] = ()

    @property
    def refers_to_env(self) -> bool:
        """The command line holds `$(VAR)` references the kubelet expands at start."""
        return any("$(" in a for a in self.args)

    def arg(self, flag: str) -> str | None:
        """The value of `--flag value` or `--flag=value` on the command line, if given."""
        for i, token in enumerate(self.args):
            if token == flag and i + 1 < len(self.args):
                return self.args[i + 1]
            if token.startswith(flag + "="):
                return token.split("=", 1)[1]
        return None


@dataclass(frozen=True)
class PodSpecView:
    restart_policy: str
    containers: tuple[ContainerSpec, ...]  # init and sidecar containers first, in order
    volume_refs: tuple[ConfigRef, ...] = field(default=())
    grace_seconds: float = 30.0
    active_deadline: float | None = None
    host_network: bool = False


def _annotation(annotations: dict[str, str], key: str, container: str) -> str | None:
    return annotations.get(f"{key}.{container}", annotations.get(key))


def _float(annotations: dict[str, str], key: str, container: str) -> float | None:
    text = _annotation(annotations, key, container)
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _probe(raw: dict[str, Any] | None) -> Probe | None:
    if not raw:
        return None
    for kind in ("httpGet", "tcpSocket", "grpc", "exec"):
        if kind in raw:
            action = raw[kind] or {}
            break
    else:
        kind, action = "exec", {}
    return Probe(
        kind=kind,
        initial_delay=float(raw.get("initialDelaySeconds") or 0),
        period=float(raw.get("periodSeconds") or 10),
        failure_threshold=int(raw.get("failureThreshold") or 3),
        path=str(action.get("path") or "/"),
        port=str(action.get("port") or ""),
        scheme=str(action.get("scheme") or "HTTP").lower(),
        command=" ".join(str(a) for a in action.get("command") or ()),
    )


def _mib(value: Any) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(parse_quantity(value)) / 2**20
    except ValueError:
        return None


def guess_workload(image: str, annotations: dict[str, str], container: str) -> str:
    declared = _annotation(annotations, WORKLOAD, container)
    if declared in ("serving", "training", "generic"):
        return declared
    lowered = image.lower()
    if any(h in lowered for h in _SERVING_HINTS):
        return "serving"
    if any(h in lowered for h in _TRAINING_HINTS):
        return "training"
    return "generic"


def _config_refs(container: dict[str, Any]) -> tuple[ConfigRef, ...]:
    refs: list[ConfigRef] = []
    for source in container.get("envFrom") or ():
        for field_name, kind in (("configMapRef", "configmap"), ("secretRef", "secret")):
            ref = source.get(field_name)
            if ref and ref.get("name") and not ref.get("optional"):
                refs.append(ConfigRef(kind, ref["name"]))
    for env in container.get("env") or ():
        value_from = env.get("valueFrom") or {}
        for field_name, kind in (("configMapKeyRef", "configmap"), ("secretKeyRef", "secret")):
            ref = value_from.get(field_name)
            if ref and ref.get("name") and not ref.get("optional"):
                refs.append(ConfigRef(kind, ref["name"], ref.get("key")))
    return tuple(refs)


def _volume_refs(spec: dict[str, Any]) -> tuple[ConfigRef, ...]:
    refs: list[ConfigRef] = []
    for volume in spec.get("volumes") or ():
        name = volume.get("name", "")
        cm, secret = volume.get("configMap"), volume.get("secret")
        if cm and cm.get("name") and not cm.get("optional"):
            refs.append(ConfigRef("configmap", cm["name"], volume=name))
        if secret and secret.get("secretName") and not secret.get("optional"):
            refs.append(ConfigRef("secret", secret["secretName"], volume=name))
        for source in (volume.get("projected") or {}).get("sources") or ():
            for field_name, kind in (("configMap", "configmap"), ("secret", "secret")):
                ref = source.get(field_name)
                if ref and ref.get("name") and not ref.get("optional"):
                    refs.append(ConfigRef(kind, ref["name"], volume=name))
    return tuple(refs)


def default_pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


@dataclass(frozen=True)
class PullTimes:
    """How long an image pull takes when the pod does not say: the first matching glob's
    seconds, else the default."""

    default_seconds: float = DEFAULT_PULL_SECONDS
    by_image: tuple[tuple[str, float], ...] = ()  # (glob, seconds), in order


def _pull_seconds(image: str, annotations: dict[str, str], name: str,
                  pulls: PullTimes) -> float:
    explicit = _float(annotations, PULL_SECONDS, name)
    if explicit is not None:
        return max(0.0, explicit)
    for pattern, seconds in pulls.by_image:
        if fnmatch.fnmatch(image, pattern):
            return seconds
    return pulls.default_seconds


def container_spec(raw: dict[str, Any], role: str, annotations: dict[str, str],
                   pulls: PullTimes, loads: LoadTimes | None = None) -> ContainerSpec:
    name, image = raw["name"], raw.get("image", "")
    resources = raw.get("resources") or {}
    limits = resources.get("limits") or {}
    memory_limit = _mib(limits.get("memory"))
    growth = _float(annotations, MEMORY_GROWTH, name)
    base = _float(annotations, MEMORY_BASE, name)
    run = _float(annotations, RUN_SECONDS, name)
    if run is None and role == "init":
        run = DEFAULT_INIT_RUN_SECONDS
    exit_code = _float(annotations, EXIT_CODE, name)
    env, env_from = parse_env(raw)
    request = container_gpu_request(raw)
    gpus = request.whole or (1 if request.milli else 0)  # a share still sees one device
    args = tuple(str(a) for a in (raw.get("command") or []) + (raw.get("args") or []))
    load = loads.seconds_for(image, args) if loads is not None else None
    if load is None:
        load = _float(annotations, LOAD_SECONDS, name) or 0.0
    return ContainerSpec(
        name=name, image=image, role=role,
        pull_policy=raw.get("imagePullPolicy") or default_pull_policy(image),
        pull_seconds=_pull_seconds(image, annotations, name, pulls),
        load_seconds=max(0.0, load),
        run_seconds=None if role == "sidecar" else run,
        exit_code=int(exit_code or 0),
        memory_limit_mib=memory_limit,
        memory_growth_mib_per_min=growth if growth and growth > 0 else None,
        memory_base_mib=base if base is not None else (memory_limit or 0) / 10,
        gpus=gpus,
        workload=guess_workload(image, annotations, name),
        readiness=_probe(raw.get("readinessProbe")),
        liveness=_probe(raw.get("livenessProbe")),
        startup=_probe(raw.get("startupProbe")),
        config_refs=_config_refs(raw),
        args=args,
        env=env,
        env_from=env_from,
    )


def pod_spec_view(pod: dict[str, Any], pulls: PullTimes = PullTimes(),
                  loads: LoadTimes | None = None) -> PodSpecView:
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    containers: list[ContainerSpec] = []
    for raw in spec.get("initContainers") or ():
        role = "sidecar" if raw.get("restartPolicy") == "Always" else "init"
        containers.append(container_spec(raw, role, annotations, pulls, loads))
    for raw in spec.get("containers") or ():
        containers.append(container_spec(raw, "app", annotations, pulls, loads))
    grace = spec.get("terminationGracePeriodSeconds")
    deadline = spec.get("activeDeadlineSeconds")
    return PodSpecView(
        restart_policy=spec.get("restartPolicy") or "Always",
        containers=tuple(containers),
        volume_refs=_volume_refs(spec),
        grace_seconds=30.0 if grace is None else float(grace),
        active_deadline=None if deadline is None else float(deadline),
        host_network=bool(spec.get("hostNetwork")),
    )
