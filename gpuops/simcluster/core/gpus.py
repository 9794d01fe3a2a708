"""GPU device facts, and which GPU of its node each GPU pod holds.

Kubernetes does not say which device a pod got; the NVIDIA device plugin picks. simcluster
picks deterministically and sticks to it: the first free indices of the node, in the order of
the pods' creation, released when a pod finishes or goes. Two components need that one answer,
so it is an informer-style index here rather than either's: the DCGM exporter labels a GPU's
series with the pod holding it, and the kubelet's `gpu-xid` fault strikes the GPU the pod
really holds.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gpuops.common.quantity import parse_quantity

from .resources import ResourceType
from .store import Store

Obj = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's node label
XID_ANNOTATION = "sim.gpuops.io/xid-events"  # node: its Xid history, a JSON list
# PCI bus ids of the eight GPUs of an HGX board, in nvidia-smi order.
PCI_BUS_IDS = ("0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0", "0000:5D:00.0",
               "0000:9A:00.0", "0000:AB:00.0", "0000:BA:00.0", "0000:DB:00.0")


def gpu_requests(spec: Obj) -> tuple[tuple[str, int], ...]:
    """(container, GPUs) for the containers that ask for `nvidia.com/gpu`, in order."""
    out = []
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        raw = (resources.get("limits") or {}).get(GPU_RESOURCE) or \
            (resources.get("requests") or {}).get(GPU_RESOURCE)
        if raw is None:
            continue
        try:
            count = int(raw) if isinstance(raw, int) or raw.isdigit() else int(parse_quantity(raw))
        except (ValueError, AttributeError):
            continue  # admission would have refused it; such a pod holds no GPU here
        if count > 0:
            out.append((container.get("name", ""), count))
    return tuple(out)


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


class GpuPod(NamedTuple):
    """What the assignment needs of a GPU pod bound to a node."""

    uid: str
    namespace: str
    name: str
    created: str  # creationTimestamp: older pods get their GPUs first
    gpus: tuple[tuple[str, int], ...]  # (container, GPUs) in container order


class Holder(NamedTuple):
    """A GPU's holder: the pod's uid and its container."""

    uid: str
    namespace: str
    name: str
    container: str


class GpuAllocations:
    """Sticky first-fit assignment of GPU indices to the GPU pods bound to each node, kept
    from store changes; assignment happens when asked, for the nodes that changed."""

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
        gpus = gpu_requests(spec)
        if gpus:
            self._node_of[uid] = node
            self._pods.setdefault(node, {})[uid] = GpuPod(
                uid, meta.get("namespace", ""), meta["name"], meta.get("creationTimestamp", ""),
                gpus)
            self._dirty.add(node)

    def _on_node(self, _rt: ResourceType, _event: str, node: Obj, _old: Obj | None) -> None:
        self._dirty.add(node["metadata"]["name"])

    # --- reading -------------------------------------------------------------------------------

    def node_of(self, uid: str) -> str | None:
        """The node whose GPUs the pod holds (or waits for); None for a pod without GPUs."""
        return self._node_of.get(uid)

    def holders(self, node: str, capacity: int) -> dict[int, Holder]:
        """GPU index -> its holder, on a node with `capacity` GPUs."""
        if node in self._dirty:
            self._assign(node, capacity)
        return {index: holder for slots in self._assigned.get(node, {}).values()
                for index, holder in slots}

    def first_held(self, node: Obj, uid: str) -> int | None:
        """The lowest GPU index the pod holds on `node` (dcgm-exporter's view), if any."""
        held = self.holders(node["metadata"]["name"], gpu_capacity(node))
        return min((i for i, h in held.items() if h.uid == uid), default=None)

    def _assign(self, node: str, capacity: int) -> None:
        self._dirty.discard(node)
        assigned = self._assigned.setdefault(node, {})
        used = {i for slots in assigned.values() for i, _ in slots}
        waiting = sorted((p for uid, p in self._pods.get(node, {}).items()
                          if uid not in assigned), key=lambda p: (p.created, p.name))
        for pod in waiting:
            containers = [name for name, count in pod.gpus for _ in range(count)]
            free = [i for i in range(capacity) if i not in used][:len(containers)]
            if len(free) < len(containers):
                self._dirty.add(node)  # over-committed: try again when something changes
                continue
            assigned[pod.uid] = tuple(
                (index, Holder(pod.uid, pod.namespace, pod.name, container))
                for index, container in zip(free, containers))
            used.update(free)
