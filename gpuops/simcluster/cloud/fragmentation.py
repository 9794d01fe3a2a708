"""The `gpu-fragmentation` fault: a stranded-GPU episode in a node pool, built the way it
happens in real clusters, with a repack known to fix it.

kube-scheduler's default scoring spreads pods, so small GPU pods end up on many nodes, each
keeping 1-3 GPUs free, and a pod asking for a whole node's GPUs fits nowhere although the free
GPUs in total would hold it. The fault makes exactly that, from controller-owned workloads the
scheduler places itself:
- every GPU node of the pool but one keeps `keepFree` GPUs free (at most 3 and fewer than the
  pending pod asks): 1-GPU pods of a Deployment per node fill the rest;
- the emptiest node (the "victim") gets pods sized to the room left on the others, one per
  other node, largest first, until it too keeps 1-3 GPUs free;
- then (once those pods are bound) a Job asks for `gpus` GPUs (default: a whole node) on the
  pool and stays Pending with the scheduler's FailedScheduling (`Insufficient nvidia.com/gpu`).
Each Deployment prefers its node through preferred node affinity (weight 100), so the
scheduler puts its pods there without pinning them: a repack may move them. The pending pod
and the fillers have the same priority (`priorityClassName`, default none), so preemption
cannot fix it. The known repack: move the victim's pods, one to each other node's free room;
the victim is then empty and the pending pod fits. `plan_fragmentation` is the pure part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, Field

from gpuops.common.annotations import GPU_INDEX

from ..core import errors
from ..core.admission import admit_create
from ..core.faults import FaultParams
from ..core.gpus import (
    GPU_RESOURCE,
    PRODUCT_LABEL,
    gpu_capacity,
    parse_gpu_index,
    pod_gpu_request,
)
from ..core.nodeaffinity import selects_node, untolerated_taints
from ..core.nodeindex import NodeIndex
from ..core.nodes import holds_resources, is_ready
from ..core.store import Store
from .pools import NodePool

Obj = dict[str, Any]
MAX_KEPT_FREE = 3
FAULT_LABEL = "gpuops.io/fault"


@dataclass(frozen=True)
class Fill:
    """`count` pods of `gpus` GPUs each, meant for `node`."""

    node: str
    gpus: int
    count: int


@dataclass(frozen=True)
class FragmentationPlan:
    fills: tuple[Fill, ...]
    victim: str  # the node the known repack empties
    free_after: dict[str, int]  # node -> whole GPUs free once the fills are bound
    pending_gpus: int


def plan_fragmentation(free: dict[str, int], capacity: dict[str, int], pending_gpus: int,
                       keep_free: int = MAX_KEPT_FREE) -> FragmentationPlan:
    """Fills that strand GPUs: no node keeps `pending_gpus` free, all together keep at least
    that many, and emptying the victim (a node without GPU pods) is enough. ValueError says
    why the pool cannot have such an episode."""
    keep = min(keep_free, pending_gpus - 1)
    if keep < 1:
        raise ValueError(f"a pending pod of {pending_gpus} GPU(s) cannot be stranded: it needs "
                         "at least 2 GPUs")
    empty = sorted(n for n in free if free[n] == capacity[n] and capacity[n] >= pending_gpus)
    if not empty:
        raise ValueError(f"no node has all of its GPUs free and at least {pending_gpus}: "
                         "there is no node a repack could empty for the pending pod")
    victim = min(empty, key=lambda n: (-capacity[n], n))
    others = sorted(n for n in free if n != victim)
    if not others:
        raise ValueError("a single GPU node: its pods have nowhere else to go")
    fills: list[Fill] = []
    free_after = {}
    for node in others:
        kept = min(free[node], keep)
        if free[node] > kept:
            fills.append(Fill(node, 1, free[node] - kept))
        free_after[node] = kept
    room = sorted(((free_after[n], n) for n in others if free_after[n]), reverse=True)
    left = capacity[victim]
    for size, _ in room:
        if left <= keep:
            break
        take = min(size, left - 1)
        fills.append(Fill(victim, take, 1))
        left -= take
    if left > keep:
        raise ValueError(f"the other nodes keep {sum(free_after.values())} GPU(s) free: not "
                         f"enough room to fill node {victim!r} down to {keep} free")
    free_after[victim] = left
    if sum(free_after.values()) < pending_gpus:
        raise ValueError(f"only {sum(free_after.values())} GPU(s) would be free in total: "
                         f"fewer than the {pending_gpus} the pending pod asks for, so it "
                         "would be a capacity shortage, not fragmentation")
    merged: dict[tuple[str, int], int] = {}
    for fill in fills:
        merged[(fill.node, fill.gpus)] = merged.get((fill.node, fill.gpus), 0) + fill.count
    return FragmentationPlan(tuple(Fill(n, g, c) for (n, g), c in merged.items()), victim,
                             free_after, pending_gpus)


class FragmentParams(FaultParams):
    pool: str | None = Field(None, min_length=1, description="the GPU node pool (default: the "
                             "target, else the first pool by name where an episode can be "
                             "made)")
    gpus: int | None = Field(None, ge=2, le=64, description="GPUs the pending pod asks for "
                             "(default: a whole node of the pool)")
    keepFree: int = Field(MAX_KEPT_FREE, ge=1, le=MAX_KEPT_FREE, validation_alias=AliasChoices(
        "keepFree", "keep_free"), description="GPUs each node keeps free at most")
    namespace: str = Field("default", min_length=1, description="where the workloads go")
    priorityClassName: str | None = Field(None, min_length=1, validation_alias=AliasChoices(
        "priorityClassName", "priority_class_name"), description="the PriorityClass of the "
        "filler and pending pods (the same for both: preemption cannot help)")


class GpuFragmentation:
    """Plans and creates the episode; `step()` (the node pool controller's tick) creates the
    pending Job once the fillers are bound."""

    def __init__(self, store: Store, index: NodeIndex, pools: dict[str, NodePool]) -> None:
        self.store = store
        self.index = index
        self.pools = pools
        self.deployments = store.type("deployments", "apps")
        self.jobs = store.type("jobs", "batch")
        self._waiting: list[tuple[str, list[str], Obj]] = []  # (ns, deployments, job)

    # --- the fault -----------------------------------------------------------------------------

    def inject(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        wanted = params.get("pool") or target
        names: list[str] = [wanted] if wanted else sorted(self.pools)
        if names[0] not in self.pools:
            raise errors.bad_request(f"unknown pool {names[0]!r}; pools: "
                                     f"{', '.join(sorted(self.pools)) or 'none'}")
        problems = []
        for name in names:
            pool = self.pools[name]
            try:
                plan, nodes = self._plan(pool, params)
            except ValueError as e:
                problems.append(f"pool {name!r}: {e}")
                continue
            return self._create(pool, plan, nodes, params)
        raise errors.bad_request("gpu-fragmentation: " + "; ".join(problems))

    def _plan(self, pool: NodePool, params: dict[str, Any]) -> tuple[FragmentationPlan,
                                                                      list[Obj]]:
        if not pool.gpus_per_node:
            raise ValueError("it has no GPUs")
        nodes = [n for n in (self._node(name) for name in sorted(self.index.pool_nodes(
            pool.name))) if n is not None and is_ready(n) and gpu_capacity(n)
            and not (n.get("spec") or {}).get("unschedulable")]
        waiting = self._pending_gpu_pods(nodes)
        if waiting:
            shown = ", ".join(waiting[:3]) + (", ..." if len(waiting) > 3 else "")
            raise ValueError(f"GPU pods that could go there are still pending ({shown}): try "
                             "again once they are scheduled")
        capacity = {n["metadata"]["name"]: gpu_capacity(n) for n in nodes}
        free = {name: self._free_gpus(name, capacity[name]) for name in capacity}
        gpus = params.get("gpus") or pool.gpus_per_node
        return plan_fragmentation(free, capacity, gpus, params["keepFree"]), nodes

    def _create(self, pool: NodePool, plan: FragmentationPlan, nodes: list[Obj],
                params: dict[str, Any]) -> dict[str, Any]:
        namespace = params["namespace"]
        tolerations = [{"key": t.key, "operator": "Exists", "effect": t.effect}
                       for t in pool.taints]
        created: list[dict[str, Any]] = []
        moves = []
        for i, fill in enumerate(plan.fills):
            name = f"gpu-frag-{pool.name}-{i}"
            body = _deployment(name, fill, pool, tolerations, params)
            self.store.create(self.deployments,
                              admit_create(self.store, self.deployments, body), namespace)
            created.append({"deployment": f"{namespace}/{name}", "node": fill.node,
                            "replicas": fill.count, "gpusPerPod": fill.gpus})
            if fill.node == plan.victim:
                moves += [f"{namespace}/{name}"] * fill.count
        job = _pending_job(f"gpu-frag-{pool.name}-pending", pool, plan.pending_gpus,
                           tolerations, params)
        self._waiting.append((namespace, [c["deployment"].split("/", 1)[1] for c in created],
                              job))
        return {"pool": pool.name, "deployments": created,
                "job": f"{namespace}/{job['metadata']['name']}",
                "pendingGpus": plan.pending_gpus, "freeGpus": plan.free_after,
                "freeGpusTotal": sum(plan.free_after.values()),
                "repack": {"empties": plan.victim, "moves": len(moves),
                           "movePodsOf": sorted(set(moves))}}

    # --- the pending Job, once the fillers are placed -------------------------------------------

    def step(self) -> None:
        still = []
        for namespace, names, job in self._waiting:
            if all(self._bound(namespace, name) for name in names):
                body = admit_create(self.store, self.jobs, job)
                try:
                    self.store.create(self.jobs, body, namespace)
                except errors.ApiError as e:
                    if e.code != 409:
                        raise
            else:
                still.append((namespace, names, job))
        self._waiting = still

    def _bound(self, namespace: str, deployment: str) -> bool:
        d = self.store.find(self.deployments, namespace, deployment)
        if d is None:
            return True  # deleted meanwhile: nothing to wait for
        want = (d.get("spec") or {}).get("replicas", 1)
        selector = (d["spec"].get("selector") or {}).get("matchLabels") or {}
        bound = [p for p in self.store.list(self.index.pods_type, namespace)
                 if all((p["metadata"].get("labels") or {}).get(k) == v
                        for k, v in selector.items())
                 and (p.get("spec") or {}).get("nodeName") and holds_resources(p)]
        return len(bound) >= want

    # --- reading the pool ----------------------------------------------------------------------

    def _node(self, name: str) -> Obj | None:
        return self.store.find(self.index.nodes_type, None, name)

    def _free_gpus(self, node: str, capacity: int) -> int:
        """GPUs no pod holds any part of (the scheduler's record, else the request)."""
        used: set[int] = set()
        unrecorded = 0
        for pod in self.index.pods_on(node):
            request = pod_gpu_request(pod.get("spec") or {})
            if not request or not holds_resources(pod):
                continue
            indices = parse_gpu_index((pod["metadata"].get("annotations") or {}).get(
                GPU_INDEX), capacity)
            if indices is None:
                unrecorded += request.whole or 1
            else:
                used.update(indices)
        return max(capacity - len(used) - unrecorded, 0)

    def _pending_gpu_pods(self, nodes: list[Obj]) -> list[str]:
        out = []
        for pod in self.store.list(self.index.pods_type):
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or not holds_resources(pod) or not pod_gpu_request(spec):
                continue
            if any(selects_node(spec, n) and not untolerated_taints(
                    spec, n, ("NoSchedule", "NoExecute")) for n in nodes):
                out.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        return out


def _pod_spec(pool: NodePool, gpus: int, tolerations: list[Obj], params: dict[str, Any],
              container: str) -> Obj:
    spec: Obj = {"tolerations": tolerations,
                 "nodeSelector": {PRODUCT_LABEL: pool.gpu_product},
                 "containers": [{"name": container, "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                 "resources": {"requests": {"cpu": "1", "memory": "8Gi",
                                                            GPU_RESOURCE: str(gpus)},
                                               "limits": {"memory": "8Gi",
                                                          GPU_RESOURCE: str(gpus)}}}]}
    if params.get("priorityClassName"):
        spec["priorityClassName"] = params["priorityClassName"]
    return spec


def _deployment(name: str, fill: Fill, pool: NodePool, tolerations: list[Obj],
                params: dict[str, Any]) -> Obj:
    labels = {"app": name, FAULT_LABEL: "gpu-fragmentation"}
    spec = _pod_spec(pool, fill.gpus, tolerations, params, "worker")
    spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [fill.node]}]}}]}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": fill.count, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels, "annotations": {
                         "sim.gpuops.io/pull-seconds": "5"}}, "spec": spec}}}


def _pending_job(name: str, pool: NodePool, gpus: int, tolerations: list[Obj],
                 params: dict[str, Any]) -> Obj:
    labels = {"app": name, FAULT_LABEL: "gpu-fragmentation"}
    spec = _pod_spec(pool, gpus, tolerations, params, "trainer")
    spec["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": labels,
                             "annotations": {"sim.gpuops.io/workload": "training"}},
                "spec": spec}}}
