"""Workload faults the simulated kubelet injects, each leaving the evidence a real cluster shows.

Inject with `POST /admin/faults {"kind", "target", "params"}` (or `gpuops sim fault ...`).
`target` is a pod or a workload, `"namespace/name"` or `"kind/namespace/name"`; or a
namespace (`"ml"`, or null for every namespace) together with `params.selector`, a label
selector (faulttargets.py). A workload or selector fault is also a *rule* that hits pods
created later (a Deployment's or Job's replacements) until `recover` with the same target
and selector. `params.container` picks the container (default: the first container asking for
`nvidia.com/gpu` for GPU faults, else the first container). Every fault is sticky per
(pod, container) -- each new instance fails the same way, so crash loops keep crashing --
unless `params.once` is true. `params.after_seconds` is how long an instance runs before the
fault strikes (measured from injection for a running instance). Each kind's parameters are a
typed model below: anything else is refused with a 400 before any pod is touched.

| kind | evidence | params (defaults) |
|---|---|---|
| `crashloop` | exit code, Python traceback in the log, CrashLoopBackOff | exit_code (1), error (last traceback line), after_seconds (3) |
| `oom` | `lastState.terminated` OOMKilled, exit 137 | after_seconds (5), once |
| `cuda-oom` | exit 1, `torch.OutOfMemoryError: CUDA out of memory...` traceback | tried_gib (2.0), free_gib (1.02), gpu (0), after_seconds (15) |
| `nccl-timeout` | exit 134 (SIGABRT), NCCL watchdog lines | rank (job index), seq (4211), op (ALLREDUCE), timeout_ms (600000), after_seconds (30) |
| `gpu-xid` | Warning event `GPUXid` on the node (`Xid 79: GPU has fallen off the bus ...`), the node annotation `sim.gpuops.io/xid-events` (JSON list), CUDA error in the log, exit 1; after a hardware Xid later instances fail with `no CUDA-capable device` (application Xids 13/31/43/45/68/109 are one-shot) | xid (79), gpu (the pod's first GPU as the metrics show it, else 0), after_seconds (1). A node name as target records the Xid on the node and crashes its GPU pods once |
| `liveness` | the liveness probe fails: `Unhealthy` events, `Killing` "failed liveness probe, will be restarted", exit 137 | (the container's probe settings) |
| `image-pull` | ErrImagePull then ImagePullBackOff, `Failed` events | image (no target: every pull of that image fails, cluster-wide; nodes that have it cached still start it with IfNotPresent), reason (NotFound, Unauthorized, Timeout). With a pod or workload target, the pods' next pulls fail; a running container pulls only when it starts again, so a pod whose containers all run is refused (400) with what to do instead |
| `config-error` | exit 1 with `KeyError: 'MODEL_NAME'` | key (MODEL_NAME), after_seconds (1) |
| `evict` | pod Failed, reason Evicted, `The node was low on resource: memory. ...`, DisruptionTarget condition | resource (memory), message |
| `recover` | clears faults of the target (all, or `params.kind`), rules with the same selector, `params.image` | kind, container, image |

A container referencing a missing ConfigMap or Secret (env `valueFrom`, `envFrom`) needs no
fault: it waits in CreateContainerConfigError (`configmap "x" not found`) until it appears;
a missing volume source keeps the pod in ContainerCreating with FailedMount events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import Field

from ..core import errors
from ..core.clock import VirtualClock
from ..core.faults import FaultParams, FaultRegistry
from ..core.gpus import container_gpu_request
from ..core.selectors import Requirement, labels_match
from ..core.store import Store
from .containerlogs import APPLICATION_XIDS
from .faulttargets import select_pods
from .runtime import Fault, PodKey, normalized_image

GPU_KINDS = ("cuda-oom", "nccl-timeout", "gpu-xid")
PULL_ERRORS = {
    "NotFound": 'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": '
                'failed to resolve reference "{ref}": {ref}: not found',
    "Unauthorized": 'rpc error: code = Unknown desc = failed to pull and unpack image "{ref}": '
                    'failed to resolve reference "{ref}": pull access denied, repository does '
                    "not exist or may require authorization: server message: "
                    "insufficient_scope: authorization failed",
    "Timeout": 'rpc error: code = DeadlineExceeded desc = failed to pull and unpack image '
               '"{ref}": failed to resolve reference "{ref}": failed to do request: Head '
               '"https://{registry}/v2/{repo}/manifests/{tag}": dial tcp 203.0.113.10:443: '
               "i/o timeout",
}


PULL_REASONS = Literal["NotFound", "Unauthorized", "Timeout"]
# PyTorch's c10d OpType names, as its NCCL watchdog prints them
NCCL_OPS = Literal["BROADCAST", "ALLREDUCE", "ALLREDUCE_COALESCED", "REDUCE", "ALLGATHER",
                   "_ALLGATHER_BASE", "ALLGATHER_COALESCED", "GATHER", "SCATTER",
                   "REDUCE_SCATTER", "ALLTOALL_BASE", "ALLTOALL", "SEND", "RECV",
                   "RECVANYSOURCE", "BARRIER", "_REDUCE_SCATTER_BASE", "COALESCED"]
EXIT_CODE_MAX = 255  # what a process can exit with (signals show as 128 + n)
GPU_INDEX_MAX = 63


# --- parameters of each kind (None: the kubelet decides, as the description says) ----------

class PodSelection(FaultParams):
    selector: str | None = Field(None, min_length=1, description="a label selector: with a "
                                 "namespace target (none: every namespace), every matching "
                                 "pod, now and later, until `recover`")
    namespace: str | None = Field(None, min_length=1, description="the namespace of a "
                                  "selector (default: the target)")


class ContainerFault(PodSelection):
    container: str | None = Field(None, min_length=1, description="the container (default: "
                                  "the first asking for a GPU for GPU faults, else the first)")
    once: bool | None = Field(None, description="only the next instance fails (default: "
                              "every instance, so a crash loop keeps crashing)")


def _after(seconds: float, more: str = "") -> Any:
    return Field(None, ge=0, le=86_400 * 365, description="seconds an instance runs before "
                 f"the fault strikes (default {seconds:g}{more})")


class CrashloopParams(ContainerFault):
    exit_code: int = Field(1, ge=0, le=EXIT_CODE_MAX, description="the exit code")
    error: str | None = Field(None, min_length=1, description="the last line of the "
                              "traceback in the log")
    after_seconds: float | None = _after(3)


class OomParams(ContainerFault):
    after_seconds: float | None = _after(5)


class CudaOomParams(ContainerFault):
    tried_gib: float = Field(2.0, gt=0, le=1e6, description="GiB the failed allocation asked")
    free_gib: float = Field(1.02, ge=0, le=1e6, description="GiB the GPU had free")
    gpu: int | None = Field(None, ge=0, le=GPU_INDEX_MAX, description="GPU index in the "
                            "message (default 0)")
    after_seconds: float | None = _after(15)


class NcclTimeoutParams(ContainerFault):
    rank: int | None = Field(None, ge=0, le=1_000_000, description="the rank that times out "
                             "(default: the pod's job index)")
    seq: int = Field(4211, ge=0, le=2**63 - 1, description="the collective's sequence number")
    op: NCCL_OPS = Field("ALLREDUCE", description="the collective")
    timeout_ms: int = Field(600_000, gt=0, le=2**31 - 1, description="the watchdog timeout")
    after_seconds: float | None = _after(30)


class GpuXidParams(ContainerFault):
    xid: int = Field(79, ge=1, le=999, description="the Xid code; application ones "
                     f"({', '.join(str(x) for x in sorted(APPLICATION_XIDS))}) strike once")
    gpu: int | None = Field(None, ge=0, le=GPU_INDEX_MAX, description="the GPU (default: "
                            "the pod's first GPU, else 0)")
    after_seconds: float | None = _after(1, "; 5 for the instances after a hardware Xid")


class LivenessParams(ContainerFault):
    pass


class ImagePullParams(ContainerFault):
    image: str | None = Field(None, min_length=1, description="with no target: every pull "
                              "of this image fails, cluster-wide")
    reason: PULL_REASONS = Field("NotFound", description="what the registry answers")


class ConfigErrorParams(ContainerFault):
    key: str = Field("MODEL_NAME", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="the "
                     "environment variable the app misses")
    after_seconds: float | None = _after(1)


class EvictParams(PodSelection):
    resource: Literal["memory", "ephemeral-storage", "pid"] = Field(
        "memory", description="the resource the node is low on")
    message: str | None = Field(None, min_length=1, description="the pod's status.message "
                                "(default: kubelet's wording)")


class RecoverParams(PodSelection):
    kind: Literal["crashloop", "oom", "cuda-oom", "nccl-timeout", "gpu-xid", "liveness",
                  "config-error", "image-pull"] | None = Field(
        None, description="clear only this kind (default: every kind)")
    container: str | None = Field(None, min_length=1, description="clear only this "
                                  "container's faults")
    image: str | None = Field(None, min_length=1, description="let this image be pulled "
                              "again")


class KubeletHooks(Protocol):
    def faults_changed(self, key: PodKey) -> None: ...
    def evict(self, key: PodKey, resource: str, message: str | None) -> bool: ...
    def node_xid(self, node: str, xid: int, gpu: int) -> list[PodKey]: ...
    def assigned_gpu(self, key: PodKey) -> int | None: ...


@dataclass
class Rule:
    namespace: str | None
    selector: str
    requirements: list[Requirement]
    kind: str
    params: dict[str, Any]
    since: float


def pull_error_text(image: str, reason: str) -> str:
    repo = normalized_image(image)
    tail = image.split("@", 1)[0].rsplit("/", 1)[-1]
    tag = tail.split(":", 1)[1] if ":" in tail else "latest"
    ref = f"{repo}:{tag}"
    registry, _, path = repo.partition("/")
    template = PULL_ERRORS.get(reason, PULL_ERRORS["NotFound"])
    return template.format(ref=ref, registry="registry-1.docker.io" if registry == "docker.io"
                           else registry, repo=path, tag=tag)


class FaultBook:
    """Active faults per (pod, container), selector rules, and images that fail to pull."""

    def __init__(self) -> None:
        self.by_pod: dict[PodKey, dict[str, dict[str, Fault]]] = {}
        self.rules: list[Rule] = []
        self.missing_images: dict[str, str] = {}  # image -> reason

    def add(self, key: PodKey, container: str, fault: Fault) -> None:
        self.by_pod.setdefault(key, {}).setdefault(container, {})[fault.kind] = fault

    def for_container(self, key: PodKey, container: str) -> list[Fault]:
        return list(self.by_pod.get(key, {}).get(container, {}).values())

    def fired(self, key: PodKey, container: str, fault: Fault) -> None:
        fault.fired += 1
        if fault.once:
            self.by_pod.get(key, {}).get(container, {}).pop(fault.kind, None)

    def clear(self, key: PodKey, kind: str | None = None, container: str | None = None) -> bool:
        containers = self.by_pod.get(key)
        if not containers:
            return False
        for name, faults in list(containers.items()):
            if container is None or name == container:
                if kind is None:
                    faults.clear()
                else:
                    faults.pop(kind, None)
        return True

    def forget(self, key: PodKey) -> None:
        self.by_pod.pop(key, None)

    def pull_error(self, key: PodKey, container: str, image: str) -> str | None:
        fault = self.by_pod.get(key, {}).get(container, {}).get("image-pull")
        if fault is not None:
            return pull_error_text(image, str(fault.params.get("reason", "NotFound")))
        reason = self.missing_images.get(image)
        return None if reason is None else pull_error_text(image, reason)

    def apply_rules(self, key: PodKey, pod: dict[str, Any], now: float) -> None:
        meta = pod["metadata"]
        for rule in self.rules:
            if rule.namespace and meta.get("namespace") != rule.namespace:
                continue
            if labels_match(rule.requirements, meta.get("labels")):
                container = choose_container(pod, rule.kind, rule.params)
                if container is not None:
                    self.add(key, container, _fault(rule.kind, rule.params, now))


def _running(pod: dict[str, Any], container: str | None) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s.get("name") == container and (s.get("state") or {}).get("running")
               for s in statuses)


def _running_pull_refusal(pod: dict[str, Any], target: str) -> str:
    meta = pod["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    return (f"pod {where} is running: its containers pull their image only when they start, "
            "so an image-pull fault would change nothing now. To see image pulls fail, make "
            "the next start pull: fail every pull of the image (`--param image=IMAGE` and no "
            "--target) and delete the pod so its replacement pulls, or target its workload "
            "(`deployment/NAMESPACE/NAME`) so the pods it creates next cannot pull")


def choose_container(pod: dict[str, Any], kind: str, params: dict[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or [])
    every = list(spec.get("initContainers") or []) + containers
    wanted = params.get("container")
    if wanted:
        return wanted if any(c.get("name") == wanted for c in every) else None
    if kind in GPU_KINDS:
        for c in containers:
            if container_gpu_request(c):  # whole GPUs or a share of one
                return c["name"]
    if kind == "liveness":
        for c in containers:
            if c.get("livenessProbe"):
                return c["name"]
        return None
    return containers[0]["name"] if containers else None


def _fault(kind: str, params: dict[str, Any], now: float) -> Fault:
    once = params.get("once")
    if once is None:
        once = kind == "gpu-xid" and int(params.get("xid", 79)) in APPLICATION_XIDS
    return Fault(kind, dict(params), now, bool(once))


def register_kubelet_faults(faults: FaultRegistry, store: Store, clock: VirtualClock,
                            book: FaultBook, hooks: KubeletHooks) -> None:

    def resolve(target: str | None, params: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                                       Rule | None]:
        found = select_pods(store, target, params.get("selector"), params.get("namespace"))
        if not found.standing:
            return found.pods, None
        return found.pods, Rule(found.namespace, found.selector, list(found.requirements), "",
                                {}, clock.time())

    def container_fault(kind: str):
        def inject(target: str | None, params: dict[str, Any]) -> dict[str, Any]:
            if kind == "image-pull" and params.get("image") and not target \
                    and not params.get("selector"):
                book.missing_images[str(params["image"])] = str(params.get("reason", "NotFound"))
                return {"image": params["image"], "reason": params.get("reason", "NotFound")}
            if kind == "gpu-xid" and target and "/" not in target and not params.get("selector"):
                struck = hooks.node_xid(target, int(params.get("xid", 79)),
                                        int(params.get("gpu", 0)))
                return {"node": target, "pods": [f"{ns}/{n}" for ns, n in struck]}
            pods, rule = resolve(target, params)
            if kind == "image-pull" and rule is None and pods and all(
                    _running(pod, choose_container(pod, kind, params)) for pod in pods):
                raise errors.bad_request(_running_pull_refusal(pods[0], target or ""))
            hit, skipped, running = [], [], []
            for pod in pods:
                meta = pod["metadata"]
                key = (meta["namespace"], meta["name"])
                container = choose_container(pod, kind, params)
                if container is None:
                    skipped.append(f"{key[0]}/{key[1]}")
                    continue
                if kind == "image-pull" and _running(pod, container):
                    running.append(f"{key[0]}/{key[1]}")  # pulls when it next starts
                fault = _fault(kind, params, clock.time())
                if kind == "gpu-xid" and "gpu" not in params:
                    fault.params["gpu"] = hooks.assigned_gpu(key) or 0
                book.add(key, container, fault)
                hooks.faults_changed(key)
                hit.append({"pod": f"{key[0]}/{key[1]}", "container": container})
            if rule is None and skipped:
                wanted = params.get("container")
                what = "a livenessProbe" if kind == "liveness" else f"container {wanted!r}"
                raise errors.bad_request(f"pod {skipped[0]!r} has no {what}: nothing to fail")
            if rule is not None:
                rule.kind, rule.params = kind, dict(params)
                book.rules.append(rule)
            answer = {"pods": hit, "skipped": skipped, "rule": rule is not None}
            if running:
                answer["running"] = running  # what the fault changes only when they restart
            return answer
        return inject

    def evict(target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        pods, _ = resolve(target, params)
        resource = params["resource"]
        evicted = []
        for pod in pods:
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            if hooks.evict(key, resource, params.get("message")):
                evicted.append(f"{key[0]}/{key[1]}")
        return {"evicted": evicted}

    def recover(target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        kind, container = params.get("kind"), params.get("container")
        if params.get("image"):
            book.missing_images.pop(str(params["image"]), None)
        if not target and not params.get("selector"):
            if params.get("image"):
                return {"recovered": [], "image": params["image"]}
            keys = list(book.by_pod)
            book.rules.clear()
            book.missing_images.clear()
        else:
            pods, rule = resolve(target, params)
            keys = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
            if rule is not None:
                book.rules = [r for r in book.rules if not (
                    r.namespace == rule.namespace and r.selector == rule.selector
                    and (kind is None or r.kind == kind))]
        recovered = []
        for key in keys:
            if book.clear(key, kind, container):
                hooks.faults_changed(key)
                recovered.append(f"{key[0]}/{key[1]}")
        return {"recovered": recovered}

    pods = "`namespace/name` of a pod or workload, `kind/namespace/name`, or a namespace " \
           "(none: every namespace) with params.selector"
    kinds: dict[str, tuple[str, type[FaultParams]]] = {
        "crashloop": (("the container exits with a Python traceback in its log (exit_code), "
                      "again after every restart: CrashLoopBackOff"), CrashloopParams),
        "oom": ("the container is OOMKilled (exit 137)", OomParams),
        "cuda-oom": (("the container dies with torch.OutOfMemoryError: CUDA out of memory "
                     "(exit 1)"), CudaOomParams),
        "nccl-timeout": ("the container aborts (exit 134) on an NCCL watchdog timeout",
                         NcclTimeoutParams),
        "gpu-xid": (("a GPU Xid: Warning event GPUXid on the node, annotation "
                    "sim.gpuops.io/xid-events, the GPU container crashes; a node name as "
                    "target records it on the node and crashes its GPU pods once"),
                    GpuXidParams),
        "liveness": ("the container's liveness probe starts failing: killed and restarted",
                     LivenessParams),
        "image-pull": (("image pulls fail: ErrImagePull then ImagePullBackOff (params.image "
                       "with no target: that image, cluster-wide; a running container pulls "
                       "only when it starts again)"), ImagePullParams),
        "config-error": ("the container exits 1 at start with KeyError: '<key>'",
                         ConfigErrorParams),
    }
    for kind, (text, model) in kinds.items():
        target = pods + (" or a node name" if kind == "gpu-xid" else "") + (
            "; none with params.image" if kind == "image-pull" else "")
        faults.register(kind, container_fault(kind), text, params=model, target=target)
    faults.register("evict", evict, "the kubelet evicts the pod under node pressure: "
                    "Failed, reason Evicted", params=EvictParams, target=pods)
    faults.register("recover", recover, "clear kubelet faults: the target's (all "
                    "kinds, or params.kind), or with no target every one",
                    params=RecoverParams, target=pods + "; none: every fault")
