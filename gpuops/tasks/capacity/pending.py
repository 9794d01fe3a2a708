"""Which node pool to raise, and by how many nodes, for Pending GPU pods that fit no node (pure).

The GPU rebalance emits `gpuops.gpu.capacity-needed` when Pending GPU pods fit no node of
the cluster even empty — more GPUs than any node has, a GPU model or label no node has, a
taint they do not tolerate everywhere: no repack serves them, only new capacity does. This
decides which capacity:

- a pool can take a pod when a node it would add takes it: the pool's GPUs per node hold the
  pod's GPUs (a shared-GPU pod needs one), and the node's labels and taints pass
  `common.nodefit.node_admits` — those of the pool's existing nodes, else what the pool's
  configuration says of them (its selector's equality terms, the GPU product and instance
  type labels, no taint; the node lifecycle's taints such as `not-ready` are not the pool's);
  its allocatable CPU and memory, known from a Ready node, hold the pod's requests;
- each pod goes to the cheapest pool per GPU that can take it (ties: the name);
- per pool the pods are packed onto new nodes first-fit decreasing by GPUs (a shared-GPU
  pod counted as a whole GPU: conservative), and by CPU and memory where known;
- nodes the pool has requested that are not Ready yet (its desired size above its Ready
  nodes) are coming and count first, so a run repeated while they boot raises nothing more;
- the pool's new target is its desired size plus what is still needed, clipped to its
  maximum (the configuration's and the group's) and to what its family's GPU quota leaves;
  pods a clipped pool cannot hold are reported, not sent to a dearer pool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuops.common.labels import parse_label_selector
from gpuops.common.nodefit import node_admits
from gpuops.common.podfacts import holds_resources, pod_gpu_milli, pod_gpus
from gpuops.common.quantity import parse_quantity
from gpuops.tasks.capacity.resize import PoolResize

Obj = Mapping[str, Any]
PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's node label
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Taints the node lifecycle puts on any node for a while (not-ready, unreachable, a cloud
# node not initialised yet): not what the pool's nodes are, so not read from them.
LIFECYCLE_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")


@dataclass(frozen=True)
class PendingPod:
    key: str  # namespace/name
    gpus: int  # whole GPUs; a shared-GPU pod counts 1
    cpu_milli: int
    memory_mib: int
    spec: Mapping[str, Any]  # nodeSelector, affinity, tolerations: what placement reads


@dataclass(frozen=True)
class PoolOffer:
    """What one node more of a pool would be, and what the pool has now."""

    name: str
    gpus_per_node: int
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    cpu_milli: int | None  # allocatable per node, None: unknown (no node to read it from)
    memory_mib: int | None
    price_per_hour: float
    desired: int
    ready: int  # nodes of the pool that are Ready
    max_size: int  # the lower of the configuration's and the group's
    quota_gpus_left: int | None = None  # GPUs the family's quota allows this pool to add

    @property
    def coming(self) -> int:
        return max(0, self.desired - self.ready)


@dataclass(frozen=True)
class PoolRaise(PoolResize):
    """One pool's new size for the pods sent to it, and why."""

    pool: str
    pods: tuple[str, ...]
    nodes_for_pods: int  # new nodes the pods need, packed
    coming: int  # nodes already requested, not Ready yet
    current: int  # desired size now
    target: int
    price_per_hour: float
    gpus_per_node: int
    notes: tuple[str, ...] = field(default=())


def pending_pod(pod: Obj) -> PendingPod | None:
    """The pod as a pending GPU pod, or None when it is not one (bound, finished,
    terminating, or asking for no GPU)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") or not holds_resources(pod):
        return None
    gpus = pod_gpus(pod) or (1 if pod_gpu_milli(pod) else 0)
    if not gpus:
        return None
    meta = pod["metadata"]
    return PendingPod(f"{meta.get('namespace') or 'default'}/{meta['name']}", gpus,
                      _requested(spec, "cpu", 1000), _requested(spec, "memory", 1 / 2**20),
                      spec)


def _requested(spec: Obj, resource: str, scale: float) -> int:
    def asked(container: Obj) -> float:
        value = ((container.get("resources") or {}).get("requests") or {}).get(resource)
        return float(parse_quantity(value)) if value is not None else 0.0

    main = sum(asked(c) for c in spec.get("containers") or [])
    init = max((asked(c) for c in spec.get("initContainers") or []), default=0.0)
    return math.ceil(max(main, init) * scale)


def pool_offer(*, name: str, gpus_per_node: int, gpu_product: str, instance_type: str,
               selector: str, price_per_hour: float, desired: int, max_size: int,
               nodes: Sequence[Obj], quota_gpus_left: int | None = None) -> PoolOffer:
    """A pool's offer from its configuration and its nodes (as the API lists them)."""
    ready = [n for n in nodes if _ready(n)]
    if nodes:
        sample = (ready or list(nodes))[0]
        labels = dict((sample.get("metadata") or {}).get("labels") or {})
        taints = tuple(t for t in (sample.get("spec") or {}).get("taints") or ()
                       if not str(t.get("key") or "").startswith(LIFECYCLE_TAINTS))
        # a node still joining advertises no (or partial) allocatable yet
        alloc = ((sample.get("status") or {}).get("allocatable") or {}) if ready else {}
        cpu = math.floor(float(parse_quantity(alloc["cpu"])) * 1000) if "cpu" in alloc else None
        memory = (math.floor(float(parse_quantity(alloc["memory"])) / 2**20)
                  if "memory" in alloc else None)
    else:
        labels = {r.key: next(iter(r.values)) for r in parse_label_selector(selector)
                  if r.op == "=" and r.values}
        if gpu_product:
            labels[PRODUCT_LABEL] = gpu_product
        labels.setdefault(INSTANCE_TYPE_LABEL, instance_type)
        taints, cpu, memory = (), None, None
    return PoolOffer(name, gpus_per_node, labels, taints, cpu, memory, price_per_hour, desired,
                     len(ready), max_size, quota_gpus_left)


def _ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def why_not(offer: PoolOffer, pod: PendingPod) -> str | None:
    """Why a new node of `offer` cannot take `pod`, or None if it can."""
    if pod.gpus > offer.gpus_per_node:
        return f"{offer.gpus_per_node} GPU(s) per node, the pod asks for {pod.gpus}"
    if offer.cpu_milli is not None and pod.cpu_milli > offer.cpu_milli:
        return f"{offer.cpu_milli}m CPU per node, the pod asks for {pod.cpu_milli}m"
    if offer.memory_mib is not None and pod.memory_mib > offer.memory_mib:
        return f"{offer.memory_mib}Mi memory per node, the pod asks for {pod.memory_mib}Mi"
    return node_admits(offer.labels, offer.taints, pod.spec)


def plan_raises(pods: Sequence[PendingPod], offers: Sequence[PoolOffer]
                ) -> tuple[list[PoolRaise], dict[str, str]]:
    """The pools to raise (pools without a change left out) and, per pod no raise holds,
    why (see the module docstring)."""
    unserved: dict[str, str] = {}
    sent: dict[str, list[PendingPod]] = {}
    for pod in pods:
        fits = [o for o in offers if why_not(o, pod) is None]
        if not fits:
            unserved[pod.key] = ("no pool's nodes would take it: " + "; ".join(
                f"{o.name}: {why_not(o, pod)}" for o in offers)) if offers else "no pool"
            continue
        best = min(fits, key=lambda o: (o.price_per_hour / o.gpus_per_node, o.name))
        sent.setdefault(best.name, []).append(pod)
    raises = []
    for offer in offers:
        if offer.name not in sent:
            continue
        placed = _pack(offer, sent[offer.name])
        nodes = max(placed.values()) + 1
        needed = max(0, nodes - offer.coming)
        room = offer.max_size - offer.desired
        notes = []
        if offer.coming:
            notes.append(f"{offer.coming} node(s) already requested, not Ready yet")
        if offer.quota_gpus_left is not None and \
                offer.quota_gpus_left // offer.gpus_per_node < room:
            room = offer.quota_gpus_left // offer.gpus_per_node
            notes.append(f"the GPU quota leaves room for {max(0, room)} more node(s)")
        add = max(0, min(needed, room))
        if add < needed:
            notes.append(f"{needed} more node(s) needed, {add} allowed (max "
                         f"{offer.max_size})")
            for key, index in placed.items():
                if index >= offer.coming + add:
                    unserved[key] = f"pool {offer.name} is at its limit"
        raises.append(PoolRaise(offer.name, tuple(p.key for p in sent[offer.name]), nodes,
                                offer.coming, offer.desired, offer.desired + add,
                                offer.price_per_hour, offer.gpus_per_node, tuple(notes)))
    return [r for r in raises if r.change > 0 or r.notes], unserved


def _pack(offer: PoolOffer, pods: Sequence[PendingPod]) -> dict[str, int]:
    """Pod -> index of the new node it goes on, first-fit decreasing."""
    free: list[list[float]] = []  # per node: GPUs, CPU, memory left
    cpu = offer.cpu_milli if offer.cpu_milli is not None else math.inf
    memory = offer.memory_mib if offer.memory_mib is not None else math.inf
    placed = {}
    for pod in sorted(pods, key=lambda p: (-p.gpus, -p.cpu_milli, -p.memory_mib, p.key)):
        want = (pod.gpus, pod.cpu_milli, pod.memory_mib)
        index = next((i for i, left in enumerate(free)
                      if all(w <= f for w, f in zip(want, left, strict=True))), None)
        if index is None:
            free.append([offer.gpus_per_node, cpu, memory])
            index = len(free) - 1
        free[index] = [f - w for f, w in zip(free[index], want, strict=True)]
        placed[pod.key] = index
    return placed
