"""GPU device facts: what a pod asks of a node's GPUs, which GPUs it holds, and how to choose.

Whole and shared GPUs (the design every simcluster component follows):
- A whole GPU is `nvidia.com/gpu: N` (the device plugin's resource): N GPUs nobody else uses.
- A share of one GPU is the extended resource `gpuops.io/gpu-milli: M`, M an integer from 1
  to 999 thousandths of a GPU (extended resources are integers; 1000 or more is whole GPUs:
  ask `nvidia.com/gpu`). A pod asks one or the other, not both. GPU nodes advertise
  `gpuops.io/gpu-milli` too (1000 per GPU), so a plain sum check of requests against
  allocatable holds for both resources, as kube-scheduler's NodeResourcesFit makes it.
- The sum is not enough: shares live on one device each. simcluster's scheduler is
  device-aware, as GPU-sharing schedulers are (Alibaba's gpushare, the FGD simulator's
  open-gpu-share): a share of M needs one GPU with at least M thousandths free, N whole GPUs
  need N GPUs with nothing on them. `choose_gpus` is that rule: whole GPUs first-fit by index,
  a share best-fit (the GPU with the least room that still fits, so shares pack instead of
  spreading over idle GPUs), lowest index on ties.
- The scheduler records its choice on the pod when it binds, as the annotation
  `gpuops.io/gpu-index` ("3", "0,1"; `gpuops.common.annotations.GPU_INDEX`), the way
  gpushare's scheduler extender annotates pods for its device plugin. Everyone else reads
  it: `GpuAllocations` below (the DCGM exporter's and the kubelet's view), gpuops' packing.
  A pod bound without the scheduler (spec.nodeName set by its creator) gets GPUs by the same
  rule here, in creation order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuops.common.annotations import GPU_INDEX
from gpuops.common.quantity import parse_quantity

if TYPE_CHECKING:  # the registry's pod strategy imports this module: no cycle at run time
    from .resources import ResourceType
    from .store import Store

Obj = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MILLI_RESOURCE = "gpuops.io/gpu-milli"
MILLI_PER_GPU = 1000
PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's node label
XID_ANNOTATION = "sim.gpuops.io/xid-events"  # node: its Xid history, a JSON list
# PCI bus ids of the eight GPUs of an HGX board, in nvidia-smi order.
PCI_BUS_IDS = ("0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0", "0000:5D:00.0",
               "0000:9A:00.0", "0000:AB:00.0", "0000:BA:00.0", "0000:DB:00.0")


class GpuRequest(NamedTuple):
    """What a pod asks of one node's GPUs: `whole` GPUs, or a `milli` share of one."""

    whole: int = 0
    milli: int = 0

    def __bool__(self) -> bool:
        return bool(self.whole or self.milli)

    @property
    def milli_total(self) -> int:
        return self.whole * MILLI_PER_GPU + self.milli


def _amount(raw: Any) -> int | None:
    if raw is None:
        return None
    try:
        value = parse_quantity(raw)
    except (ValueError, TypeError):
        return None
    return int(value) if value == int(value) else None


def container_gpu_request(container: Obj) -> GpuRequest:
    """One container's GPU request (requests default to limits; a malformed or fractional
    quantity counts as none: admission refuses it)."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    whole, milli = _amount(merged.get(GPU_RESOURCE)), _amount(merged.get(GPU_MILLI_RESOURCE))
    return GpuRequest(max(whole or 0, 0), max(milli or 0, 0))


def pod_gpu_request(spec: Obj) -> GpuRequest:
    """A pod's GPU request: its app containers' sum, or its largest init container if more
    (kube's effective request)."""
    regular = [container_gpu_request(c) for c in spec.get("containers") or ()]
    init = [container_gpu_request(c) for c in spec.get("initContainers") or ()]
    whole = max(sum(r.whole for r in regular), max((r.whole for r in init), default=0))
    milli = max(sum(r.milli for r in regular), max((r.milli for r in init), default=0))
    return GpuRequest(whole, milli)


def gpu_requests(spec: Obj) -> tuple[tuple[str, int], ...]:
    """(container, whole GPUs) for the containers that ask for `nvidia.com/gpu`, in order."""
    out = []
    for container in spec.get("containers") or ():
        count = container_gpu_request(container).whole
        if count > 0:
            out.append((container.get("name", ""), count))
    return tuple(out)


def gpu_request_problem(spec: Obj, path: str = "spec") -> tuple[str, str] | None:
    """(field, message) when a pod spec's GPU request breaks the rules above, else None."""
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or ()):
            resources = container.get("resources") or {}
            for kind in ("requests", "limits"):
                for name in (GPU_RESOURCE, GPU_MILLI_RESOURCE):
                    raw = (resources.get(kind) or {}).get(name)
                    if raw is None:
                        continue
                    where = f"{path}.{group}[{i}].resources.{kind}[{name}]"
                    value = _amount(raw)
                    if value is None or value < 0:
                        return where, f'Invalid value: "{raw}": must be an integer'
                    if name == GPU_MILLI_RESOURCE and not 0 < value < MILLI_PER_GPU:
                        return where, (f'Invalid value: "{raw}": a share of one GPU is 1 to '
                                       f"{MILLI_PER_GPU - 1} thousandths; ask for whole GPUs "
                                       f"with {GPU_RESOURCE}")
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for name in (GPU_RESOURCE, GPU_MILLI_RESOURCE):
                if name in requests and name in limits and \
                        _amount(requests[name]) != _amount(limits[name]):
                    return (f"{path}.{group}[{i}].resources.requests[{name}]",
                            f'Invalid value: "{requests[name]}": must be equal to {name} limit')
    request = pod_gpu_request(spec)
    if request.whole and request.milli:
        return (f"{path}.containers",
                (f"Invalid value: a pod asks for whole GPUs ({GPU_RESOURCE}) or a share of one "
                f"({GPU_MILLI_RESOURCE}), not both"))
    if request.milli >= MILLI_PER_GPU:
        return (f"{path}.containers",
                (f"Invalid value: the containers' {GPU_MILLI_RESOURCE} add up to "
                f"{request.milli}: a share of one GPU is at most {MILLI_PER_GPU - 1}"))
    return None


def gpu_capacity(node: Obj) -> int:
    """The node's `nvidia.com/gpu` capacity (allocatable when capacity is not set)."""
    status = node.get("status") or {}
    raw = (status.get("capacity") or {}).get(GPU_RESOURCE) or \
        (status.get("allocatable") or {}).get(GPU_RESOURCE)
    if not raw:
        return 0
    try:
        return int(raw) if str(raw).isdigit() else int(parse_quantity(raw))
    except ValueError:
        return 0  # not a quantity: the device plugin advertises nothing usable


def choose_gpus(used: Sequence[int], request: GpuRequest) -> tuple[int, ...] | None:
    """The GPU indices a request gets on a node whose GPUs have `used` thousandths taken
    (index -> milli), or None if it does not fit there."""
    if request.whole:
        free = [i for i, u in enumerate(used) if u == 0][:request.whole]
        return tuple(free) if len(free) == request.whole else None
    if request.milli:
        fits = [(MILLI_PER_GPU - u, i) for i, u in enumerate(used)
                if MILLI_PER_GPU - u >= request.milli]
        return (min(fits)[1],) if fits else None
    return ()


def parse_gpu_index(text: str | None, capacity: int) -> tuple[int, ...] | None:
    """The indices of a `gpuops.io/gpu-index` annotation, None if absent or not valid for a
    node with `capacity` GPUs."""
    if not text:
        return None
    try:
        indices = tuple(int(part) for part in text.split(","))
    except ValueError:
        return None
    if len(set(indices)) != len(indices) or any(not 0 <= i < capacity for i in indices):
        return None
    return indices


def format_gpu_index(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices)


class GpuPod(NamedTuple):
    """What the assignment needs of a GPU pod bound to a node."""

    uid: str
    namespace: str
    name: str
    created: str  # creationTimestamp: older pods get their GPUs first
    request: GpuRequest
    containers: tuple[str, ...]  # the container holding each GPU (one for a share)
    pinned: str | None  # the scheduler's `gpuops.io/gpu-index`, if any

    @classmethod
    def from_pod(cls, pod: Obj) -> GpuPod | None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        request = pod_gpu_request(spec)
        if not request:
            return None
        if request.whole:
            containers = tuple(name for name, count in gpu_requests(spec) for _ in range(count))
            containers = (containers + (containers[-1:] or ("",)) * request.whole)[
                :request.whole]  # an init container's GPUs: the first app container's
        else:
            containers = (next((c.get("name", "") for c in spec.get("containers") or ()
                                if container_gpu_request(c).milli), ""),)
        return cls(meta["uid"], meta.get("namespace", ""), meta["name"],
                   meta.get("creationTimestamp", ""), request, containers,
                   (meta.get("annotations") or {}).get(GPU_INDEX))


class Holder(NamedTuple):
    """A GPU's holder: the pod, its container, and the thousandths of the GPU it holds."""

    uid: str
    namespace: str
    name: str
    container: str
    milli: int = MILLI_PER_GPU


class GpuAllocations:
    """Which GPUs each GPU pod bound to a node holds, kept from store changes: the
    scheduler's `gpuops.io/gpu-index` when it is valid and free, else `choose_gpus` in the
    pods' creation order, sticky once given; computed when asked, for the nodes that changed."""

    def __init__(self, store: Store, pods: ResourceType, nodes: ResourceType) -> None:
        self._pods: dict[str, dict[str, GpuPod]] = {}  # node -> uid -> pod
        self._assigned: dict[str, dict[str, tuple[tuple[int, Holder], ...]]] = {}
        self._node_of: dict[str, str] = {}  # uid -> the node holding its GPUs
        self._dirty: set[str] = set()
        for pod in store.list(pods):
            self._on_pod(pods, "ADDED", pod, None)
        store.add_listener(self._on_pod, pods)
        store.add_listener(self._on_node, nodes)

    def _on_pod(self, _rt: ResourceType, event: str, pod: Obj, _old: Obj | None) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]
        if event == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded",
                                                                           "Failed"):
            node = self._node_of.pop(uid, None)
            if node is not None:
                self._pods.get(node, {}).pop(uid, None)
                if self._assigned.get(node, {}).pop(uid, None) is not None:
                    self._dirty.add(node)  # a waiting pod may fit now
            return
        node = spec.get("nodeName")
        if not node or uid in self._node_of:
            return  # unbound, or known: a pod's node and GPU requests never change
        gpu_pod = GpuPod.from_pod(pod)
        if gpu_pod is not None:
            self._node_of[uid] = node
            self._pods.setdefault(node, {})[uid] = gpu_pod
            self._dirty.add(node)

    def _on_node(self, _rt: ResourceType, _event: str, node: Obj, _old: Obj | None) -> None:
        self._dirty.add(node["metadata"]["name"])

    # --- reading -------------------------------------------------------------------------------

    def node_of(self, uid: str) -> str | None:
        """The node whose GPUs the pod holds (or waits for); None for a pod without GPUs."""
        return self._node_of.get(uid)

    def holders(self, node: str, capacity: int) -> dict[int, tuple[Holder, ...]]:
        """GPU index -> its holders (one for a whole GPU, several sharing one), on a node
        with `capacity` GPUs."""
        if node in self._dirty:
            self._assign(node, capacity)
        out: dict[int, list[Holder]] = {}
        for slots in self._assigned.get(node, {}).values():
            for index, holder in slots:
                out.setdefault(index, []).append(holder)
        return {i: tuple(h) for i, h in sorted(out.items())}

    def first_held(self, node: Obj, uid: str) -> int | None:
        """The lowest GPU index the pod holds on `node` (dcgm-exporter's view), if any."""
        held = self.holders(node["metadata"]["name"], gpu_capacity(node))
        return min((i for i, hs in held.items() if any(h.uid == uid for h in hs)),
                   default=None)

    def _assign(self, node: str, capacity: int) -> None:
        self._dirty.discard(node)
        assigned = self._assigned.setdefault(node, {})
        used = [0] * capacity
        for slots in assigned.values():
            for index, holder in slots:
                if index < capacity:
                    used[index] += holder.milli
        waiting = sorted((p for uid, p in self._pods.get(node, {}).items()
                          if uid not in assigned), key=lambda p: (p.created, p.name))
        for pod in waiting:
            indices = _pinned_fits(pod, used, capacity)
            if indices is None:
                indices = choose_gpus(used, pod.request)
            if indices is None:
                self._dirty.add(node)  # over-committed: try again when something changes
                continue
            milli = pod.request.milli or MILLI_PER_GPU
            assigned[pod.uid] = tuple(
                (index, Holder(pod.uid, pod.namespace, pod.name, container, milli))
                for index, container in zip(indices, pod.containers))
            for index in indices:
                used[index] += milli


def _pinned_fits(pod: GpuPod, used: list[int], capacity: int) -> tuple[int, ...] | None:
    """The scheduler's choice for the pod, if it is valid and still free."""
    indices = parse_gpu_index(pod.pinned, capacity)
    if indices is None:
        return None
    if pod.request.whole:
        ok = len(indices) == pod.request.whole and all(used[i] == 0 for i in indices)
    else:
        ok = len(indices) == 1 and used[indices[0]] + pod.request.milli <= MILLI_PER_GPU
    return indices if ok else None
