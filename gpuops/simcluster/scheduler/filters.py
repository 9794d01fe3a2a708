"""How kube-scheduler sees pods and nodes and filters them, on plain data, with its messages.

Kept apart from the store so that each decision, and the exact text kube-scheduler would write
about it, can be checked directly. `scoring.py` ranks the nodes that pass, `preemption.py`
picks evictions when none does, `cycle.py` puts them together for one pod, and
`scheduler.py` feeds them from the store and writes the outcome back.

What is modelled (default profile of kube-scheduler 1.30-1.33):
- filters, in plugin order, stopping at the first that rejects a node: NodeUnschedulable,
  TaintToleration (NoSchedule/NoExecute; a node whose Ready condition is not True carries the
  `node.kubernetes.io/not-ready` or `unreachable` NoSchedule taint the node lifecycle
  controller would add), NodeAffinity (nodeSelector + required node affinity) and
  NodeResourcesFit (effective requests: init, sidecar and overhead rules);
- GPUs device by device (core/gpus.py): a share (`gpuops.io/gpu-milli`) needs one GPU with
  that much room, whole GPUs need GPUs nobody uses; a node failing that is reported as
  `Insufficient nvidia.com/gpu` / `Insufficient gpuops.io/gpu-milli`, like a short sum;
- pods nominated to a node (by an earlier preemption, or by an external component through
  status.nominatedNodeName, KEP-5278), with a priority at least as high, count as if running
  there, GPUs included;
- big clusters: as kube-scheduler, stop filtering once enough feasible nodes are found
  (percentageOfNodesToScore, adaptive) and rotate where the next search starts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from gpuops.common.annotations import GPU_INDEX
from gpuops.common.quantity import parse_quantity

from ..core.clock import parse_rfc3339
from ..core.gpus import (
    GPU_MILLI_RESOURCE,
    GPU_RESOURCE,
    MILLI_PER_GPU,
    GpuRequest,
    choose_gpus,
    parse_gpu_index,
    pod_gpu_request,
)

NO_GPU = GpuRequest()
DEFAULT_MAX_PODS = 110  # the kubelet's --max-pods default, for nodes that do not say
NONZERO_CPU_MILLIS = 100  # what a container without a cpu request counts for in scoring
NONZERO_MEMORY = 200 * 1024 * 1024

# Filter outcomes: a node either fits (None) or carries a status code and its reasons.
UNSCHEDULABLE = 1  # might fit if lower-priority pods went away (preemption can help)
UNRESOLVABLE = 2  # preemption cannot help (taint, selector, node too small...)

REASON_NODE_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
NO_NODES_AVAILABLE = "no nodes available to schedule pods"

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"

PodKey = tuple[str, str]  # (namespace, name)
Status = tuple[int, tuple[str, ...]]  # (UNSCHEDULABLE | UNRESOLVABLE, reasons)


# --- resources ---------------------------------------------------------------------------------

@lru_cache(maxsize=8192)
def amount(resource: str, value: str | float) -> int:
    """A quantity as the integer kube-scheduler compares: millicores for cpu, else units
    (both rounded up). An unparseable quantity counts as 0: the real apiserver rejects it."""
    try:
        q = parse_quantity(value)
    except ValueError:
        return 0
    return math.ceil(q * 1000) if resource == "cpu" else math.ceil(q)


def _counted(resource: str) -> bool:
    """Resources NodeResourcesFit checks: cpu, memory, ephemeral-storage and scalar ones
    (extended resources such as nvidia.com/gpu, hugepages)."""
    if resource in ("cpu", "memory", "ephemeral-storage"):
        return True
    return ("/" in resource and "kubernetes.io/" not in resource) or resource.startswith(
        "hugepages-")


def _container_requests(container: dict[str, Any], nonzero: bool) -> dict[str, int]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    reqs = {name: amount(name, value) for name, value in merged.items() if _counted(name)}
    if nonzero:  # scoring counts a container without cpu/memory requests as a small one
        reqs = {"cpu": reqs.get("cpu") or NONZERO_CPU_MILLIS,
                "memory": reqs.get("memory") or NONZERO_MEMORY}
    return reqs


def _add(into: dict[str, int], other: dict[str, int]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, 0) + value


def pod_requests(spec: dict[str, Any], *, nonzero: bool = False) -> dict[str, int]:
    """Effective pod requests as kube-scheduler computes them: the sum of app containers
    and sidecars (restartable init containers), or the largest init container plus the
    sidecars started before it if that is more, plus the pod overhead. Requests default to
    limits. With `nonzero`, only cpu and memory, missing ones counted as 100m / 200Mi."""
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container, nonzero))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        reqs = _container_requests(container, nonzero)
        if container.get("restartPolicy") == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            reqs = dict(sidecars)
        else:
            _add(reqs, sidecars)
        for name, value in reqs.items():
            init_peak[name] = max(init_peak.get(name, 0), value)
    for name, value in init_peak.items():
        total[name] = max(total.get(name, 0), value)
    overhead = spec.get("overhead") or {}
    _add(total, {n: amount(n, v) for n, v in overhead.items()
                 if _counted(n) and (not nonzero or n in ("cpu", "memory"))})
    return {name: value for name, value in total.items() if value}


def _fit_order(requests: dict[str, int]) -> tuple[tuple[str, int, str], ...]:
    """The pod's requests in the order NodeResourcesFit reports them, reasons preformatted."""
    head = [n for n in ("cpu", "memory", "ephemeral-storage") if n in requests]
    rest = sorted(n for n in requests if n not in ("cpu", "memory", "ephemeral-storage"))
    return tuple((n, requests[n], f"Insufficient {n}") for n in head + rest)


# --- taints, tolerations, node affinity ---------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    @property
    def reason(self) -> str:
        return f"node(s) had untolerated taint {{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == taint.value


def tolerated(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """One matchExpressions / matchFields entry of a NodeSelectorTerm."""

    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        op, present = self.operator, self.key in labels
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt") and present and len(self.values) == 1:
            try:
                have, bound = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > bound if op == "Gt" else have < bound
        return False


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[NodeRequirement, ...]
    fields: tuple[NodeRequirement, ...]  # only metadata.name exists for nodes

    @classmethod
    def parse(cls, term: dict[str, Any]) -> NodeSelectorTerm:
        def reqs(items: Any) -> tuple[NodeRequirement, ...]:
            return tuple(NodeRequirement(e.get("key", ""), e.get("operator", ""),
                                         tuple(str(v) for v in e.get("values") or ()))
                         for e in items or ())
        return cls(reqs(term.get("matchExpressions")), reqs(term.get("matchFields")))

    def matches(self, node: NodeInfo) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term selects no node
        if not all(r.matches(node.labels) for r in self.expressions):
            return False
        name = {"metadata.name": node.name}
        return all(r.key == "metadata.name" and r.matches(name) for r in self.fields)


# --- pods and nodes as the scheduler sees them ---------------------------------------------------

def _timestamp(text: str | None, default: float) -> float:
    if not text:
        return default
    try:
        return parse_rfc3339(text)
    except ValueError:
        return default


@dataclass(slots=True, eq=False)
class PodInfo:
    """What scheduling needs of one pod, computed once from its (immutable) spec."""

    namespace: str
    name: str
    uid: str
    priority: int
    requests: dict[str, int]
    fit_order: tuple[tuple[str, int, str], ...]
    nonzero_cpu: int
    nonzero_memory: int
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    required_terms: tuple[NodeSelectorTerm, ...] | None = None
    preferred_terms: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    preempt_never: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    created: float = 0.0
    start_time: float = 0.0
    gpu: GpuRequest = NO_GPU
    # Changing state, kept up to date by the caller:
    nominated_node: str = ""
    terminating_by_preemption: bool = False
    gpu_index: str | None = None  # the GPUs the scheduler gave it at bind (annotation)

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @classmethod
    def from_pod(cls, pod: dict[str, Any]) -> PodInfo:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        status = pod.get("status") or {}
        requests = pod_requests(spec)
        nonzero = pod_requests(spec, nonzero=True)
        affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        created = _timestamp(meta.get("creationTimestamp"), 0.0)
        info = cls(
            namespace=meta.get("namespace") or "default", name=meta.get("name", ""),
            uid=meta.get("uid", ""), priority=int(spec.get("priority") or 0),
            requests=requests, fit_order=_fit_order(requests),
            nonzero_cpu=nonzero.get("cpu", 0), nonzero_memory=nonzero.get("memory", 0),
            tolerations=tuple(Toleration(t.get("key") or "", t.get("operator") or "",
                                         str(t.get("value") or ""), t.get("effect") or "")
                              for t in spec.get("tolerations") or ()),
            node_selector=tuple(sorted((k, str(v)) for k, v in
                                       (spec.get("nodeSelector") or {}).items())),
            required_terms=None if required is None else tuple(
                NodeSelectorTerm.parse(t) for t in required.get("nodeSelectorTerms") or ()),
            preferred_terms=tuple((int(p.get("weight", 0)),
                                   NodeSelectorTerm.parse(p.get("preference") or {}))
                                  for p in preferred),
            preempt_never=spec.get("preemptionPolicy") == "Never",
            labels=dict(meta.get("labels") or {}), created=created,
            start_time=_timestamp(status.get("startTime"), created),
            gpu=pod_gpu_request(spec))
        info.update_state(pod)
        return info

    def update_state(self, pod: dict[str, Any]) -> None:
        """Refresh what changes over a pod's life: nomination, start, preemption."""
        status = pod.get("status") or {}
        self.nominated_node = status.get("nominatedNodeName") or ""
        self.gpu_index = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDEX)
        if status.get("startTime"):
            self.start_time = _timestamp(status["startTime"], self.start_time)
        self.terminating_by_preemption = bool(
            (pod.get("metadata") or {}).get("deletionTimestamp")) and any(
            c.get("type") == "DisruptionTarget" and c.get("status") == "True"
            and c.get("reason") == "PreemptionByScheduler"
            for c in status.get("conditions") or ())


def node_static_fields(node: dict[str, Any]) -> tuple[Any, ...]:
    """The parts of a Node that scheduling reads: a change elsewhere (heartbeats) is noise."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    return ((node.get("metadata") or {}).get("labels"), spec.get("unschedulable"),
            spec.get("taints"), status.get("allocatable"), _ready_status(node))


def _ready_status(node: dict[str, Any]) -> str:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return str(cond.get("status") or "Unknown")
    return "Unknown"


@dataclass(slots=True, eq=False)
class NodeInfo:
    """A node and the pods bound to it, with their requests summed."""

    name: str
    present: bool = False  # False: pods name this node but the Node object is missing
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()  # NoSchedule and NoExecute, implied ones included
    prefer_taints: tuple[Taint, ...] = ()
    allocatable: dict[str, int] = field(default_factory=dict)
    max_pods: int = DEFAULT_MAX_PODS
    requested: dict[str, int] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)  # allocatable - requested, kept current
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    pods: dict[PodKey, PodInfo] = field(default_factory=dict)
    gpu_used: list[int] = field(default_factory=list)  # thousandths taken, per GPU index
    gpu_held: dict[PodKey, tuple[int, ...]] = field(default_factory=dict)

    def set_node(self, node: dict[str, Any]) -> None:
        spec, status = node.get("spec") or {}, node.get("status") or {}
        self.present = True
        self.labels = dict((node.get("metadata") or {}).get("labels") or {})
        self.unschedulable = bool(spec.get("unschedulable"))
        taints = [Taint(t.get("key", ""), str(t.get("value") or ""), t.get("effect", ""))
                  for t in spec.get("taints") or ()]
        ready = _ready_status(node)
        if ready != "True":
            implied = TAINT_NOT_READY if ready == "False" else TAINT_UNREACHABLE
            if not any(t.key in (TAINT_NOT_READY, TAINT_UNREACHABLE)
                       and t.effect == "NoSchedule" for t in taints):
                taints.append(Taint(implied, "", "NoSchedule"))
        self.taints = tuple(t for t in taints if t.effect in ("NoSchedule", "NoExecute"))
        self.prefer_taints = tuple(t for t in taints if t.effect == "PreferNoSchedule")
        allocatable = status.get("allocatable") or status.get("capacity") or {}
        self.allocatable = {n: amount(n, v) for n, v in allocatable.items() if _counted(n)}
        self.max_pods = amount("pods", allocatable["pods"]) if "pods" in allocatable \
            else DEFAULT_MAX_PODS
        self.free = dict(self.allocatable)
        for name, value in self.requested.items():
            self.free[name] = self.free.get(name, 0) - value
        if len(self.gpu_used) != self.allocatable.get(GPU_RESOURCE, 0):
            self.gpu_used = [0] * self.allocatable.get(GPU_RESOURCE, 0)
            self.gpu_held = {}
            for pod in self.pods.values():
                self._hold_gpus(pod)

    def _hold_gpus(self, pod: PodInfo) -> None:
        """Give a bound pod its GPUs: the scheduler's recorded choice if it is valid and
        free, else the same rule the scheduler follows (an over-committed pod holds none)."""
        if not pod.gpu:
            return
        used = self.gpu_used
        indices = parse_gpu_index(pod.gpu_index, len(used))
        if indices is not None and not _fits_on(used, pod.gpu, indices):
            indices = None
        if indices is None:
            indices = choose_gpus(used, pod.gpu)
        if indices:
            milli = pod.gpu.milli or MILLI_PER_GPU
            for i in indices:
                used[i] += milli
            self.gpu_held[pod.key] = indices

    def add_pod(self, pod: PodInfo) -> None:
        if pod.key in self.pods:
            return
        self.pods[pod.key] = pod
        self._hold_gpus(pod)
        requested, free = self.requested, self.free
        for name, value in pod.requests.items():
            requested[name] = requested.get(name, 0) + value
            free[name] = free.get(name, 0) - value
        self.nonzero_cpu += pod.nonzero_cpu
        self.nonzero_memory += pod.nonzero_memory

    def remove_pod(self, key: PodKey) -> PodInfo | None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            for name, value in pod.requests.items():
                self.requested[name] -= value
                self.free[name] += value
            self.nonzero_cpu -= pod.nonzero_cpu
            self.nonzero_memory -= pod.nonzero_memory
            release_gpus(self.gpu_used, pod, self.gpu_held.pop(key, ()))
        return pod


def _fits_on(used: list[int], request: GpuRequest, indices: tuple[int, ...]) -> bool:
    if request.whole:
        return len(indices) == request.whole and all(used[i] == 0 for i in indices)
    return len(indices) == 1 and used[indices[0]] + request.milli <= MILLI_PER_GPU


def release_gpus(used: list[int], pod: PodInfo, indices: tuple[int, ...]) -> None:
    milli = pod.gpu.milli or MILLI_PER_GPU
    for i in indices:
        used[i] -= milli


def take_gpus(used: list[int], pod: PodInfo) -> bool:
    """Simulate placing `pod` on GPUs with `used` (changed in place); False if it cannot."""
    indices = choose_gpus(used, pod.gpu)
    if indices is None:
        return False
    milli = pod.gpu.milli or MILLI_PER_GPU
    for i in indices:
        used[i] += milli
    return True


def gpu_shortage(pod: PodInfo, used: list[int]) -> str | None:
    """The reason a GPU pod finds no GPUs for it in `used`, None if it does."""
    if not pod.gpu or choose_gpus(used, pod.gpu) is not None:
        return None
    return f"Insufficient {GPU_RESOURCE if pod.gpu.whole else GPU_MILLI_RESOURCE}"


# --- filters -----------------------------------------------------------------------------------

_UNSCHEDULABLE_TAINT = Taint(TAINT_UNSCHEDULABLE, "", "NoSchedule")


def matches_node_affinity(pod: PodInfo, node: NodeInfo) -> bool:
    labels = node.labels
    for key, value in pod.node_selector:
        if labels.get(key) != value:
            return False
    if pod.required_terms is not None:
        return any(term.matches(node) for term in pod.required_terms)
    return True


def insufficient_resources(pod: PodInfo, node: NodeInfo, requested: dict[str, int],
                           pod_count: int, gpu_used: list[int] | None = None) -> Status | None:
    """NodeResourcesFit against given usage (the node's, or with pods removed or added),
    then the GPUs device by device (`gpu_used`: per-GPU usage to check, default the node's)."""
    reasons: list[str] = []
    code = UNSCHEDULABLE
    if pod_count + 1 > node.max_pods:
        reasons.append(REASON_TOO_MANY_PODS)
    allocatable = node.allocatable
    for name, want, reason in pod.fit_order:
        have = allocatable.get(name, 0)
        if want > have - requested.get(name, 0):
            reasons.append(reason)
            if want > have:
                code = UNRESOLVABLE  # not even the empty node would do
    if not reasons and pod.gpu:
        shortage = gpu_shortage(pod, node.gpu_used if gpu_used is None else gpu_used)
        if shortage is not None:
            reasons.append(shortage)
    return (code, tuple(reasons)) if reasons else None


def nominated_usage(pod: PodInfo, node: NodeInfo, nominated: dict[PodKey, PodInfo] | None
                    ) -> tuple[dict[str, int], int, list[int]]:
    """The node's usage (requests, pod count, per-GPU thousandths) plus the pods nominated
    to it that the pod must not take room from: those of priority at least as high."""
    requested, count, gpu_used = node.requested, len(node.pods), node.gpu_used
    if not nominated:
        return requested, count, gpu_used
    for other in nominated.values():
        if other.priority >= pod.priority and other.key != pod.key:
            if requested is node.requested:
                requested = dict(requested)
            _add(requested, other.requests)
            count += 1
            if other.gpu:
                if gpu_used is node.gpu_used:
                    gpu_used = list(gpu_used)
                take_gpus(gpu_used, other)
    return requested, count, gpu_used


def filter_node(pod: PodInfo, node: NodeInfo,
                nominated: dict[PodKey, PodInfo] | None = None) -> Status | None:
    """Run the filter plugins in order; None when the pod fits, else the first rejection.
    (This runs for every node on every attempt: the common case is kept cheap.)"""
    if node.unschedulable and not tolerated(pod.tolerations, _UNSCHEDULABLE_TAINT):
        return (UNRESOLVABLE, (REASON_NODE_UNSCHEDULABLE,))
    if node.taints:
        for taint in node.taints:
            if not tolerated(pod.tolerations, taint):
                return (UNRESOLVABLE, (taint.reason,))
    if (pod.node_selector or pod.required_terms is not None) and not matches_node_affinity(
            pod, node):
        return (UNRESOLVABLE, (REASON_NODE_AFFINITY,))
    if nominated:
        requested, count, gpu_used = nominated_usage(pod, node, nominated)
        return insufficient_resources(pod, node, requested, count, gpu_used)
    if len(node.pods) < node.max_pods:
        free = node.free
        for name, want, _ in pod.fit_order:
            if want > free.get(name, 0):
                break
        else:
            if not pod.gpu or gpu_shortage(pod, node.gpu_used) is None:
                return None
    return insufficient_resources(pod, node, node.requested, len(node.pods))


def num_feasible_nodes_to_find(num_nodes: int) -> int:
    """kube-scheduler's adaptive percentageOfNodesToScore (at least 100 nodes, at least 5 %)."""
    if num_nodes < 100:
        return num_nodes
    percentage = max(50 - num_nodes // 125, 5)
    return max(num_nodes * percentage // 100, 100)


# --- messages ----------------------------------------------------------------------------------

def fit_error_message(num_nodes: int, statuses: Iterable[Status], post_filter: str = "") -> str:
    """`0/N nodes are available: <count reason, ...>. <post-filter message>` with the reasons
    counted over nodes and sorted as strings, exactly as kube-scheduler's FitError does."""
    histogram = Counter(reason for _, reasons in statuses for reason in reasons)
    message = f"0/{num_nodes} nodes are available:"
    if histogram:
        message += " " + ", ".join(sorted(f"{n} {reason}" for reason, n in histogram.items()))
        message += "."
    if post_filter:
        message += " " + post_filter
    return message


def truncate_event_message(message: str, limit: int = 1024) -> str:
    """Events carry at most 1024 characters (kube-scheduler cuts with ` ...`)."""
    return message if len(message) <= limit else message[:limit - 4] + " ..."
