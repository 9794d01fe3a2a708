"""Is the cluster in a stranded-GPU episode right now, and what do its GPUs measure?

What the cluster watcher asks after every batch of pod and node changes, and what the GPU
scan reports: pure, a `model.Cluster` (built by `from_kube`) in, a frozen answer out.

A pending GPU pod is **stranded** when three things hold at once:
- the scheduler tried and failed for want of GPUs (its `PodScheduled=False/Unschedulable`
  condition says `Insufficient nvidia.com/gpu` or `Insufficient gpuops.io/gpu-milli` — the
  `FailedScheduling` event's message; `failed_for_gpus`);
- it fits no node as the cluster is now (a pod that fits is only waiting for its next
  scheduling cycle, not stranded);
- the free GPUs of the nodes it may run on (selector, affinity, taints, GPU model, cordons)
  would hold it: its milli-GPU is at most theirs in total.
The cluster is in an episode when some pod is stranded and the free GPUs those pods may use,
in total, would hold all of them: moving running pods could make room. When they would not,
more pods wait than free GPUs exist — a capacity shortage, the capacity flow's concern, not a
rebalance's. CPU-only pending pods never count.

The measures (`fragmentation.py`): stranded GPUs (free GPUs on nodes where no pending GPU
shape fits) and FGD fragmentation (Weng et al., ATC'23), both in GPUs. The workload's typical
shapes are those of its running and pending pods, DaemonSet pods left out (node agents are
no demand the cluster packs).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuops.tasks.rebalance.fragmentation import state_fragmentation, stranded_gpus, typical_shapes
from gpuops.tasks.rebalance.model import MILLI, Cluster, Pod
from gpuops.tasks.rebalance.state import PackState

GPU_RESOURCES = ("nvidia.com/gpu", "gpuops.io/gpu-milli")


def failed_for_gpus(pod: Mapping[str, Any]) -> bool:
    """The pod's last scheduling attempt failed, and for want of GPUs on some node."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"):
            message = condition.get("message") or ""
            return any(f"Insufficient {r}" in message for r in GPU_RESOURCES)
    return False


def shape_label(pod: Pod) -> str:
    """A pod's GPU shape as people say it: `8-gpu`, `500m-gpu` (a share of one GPU), with
    the GPU models it allows when it is picky (`1-gpu@NVIDIA-L4`)."""
    size = f"{pod.gpu_count}-gpu" if pod.gpu_milli >= MILLI else f"{pod.gpu_milli}m-gpu"
    return size + ("@" + "|".join(sorted(pod.gpu_models)) if pod.gpu_models else "")


@dataclass(frozen=True)
class GpuAssessment:
    """What the watcher emits and exports, and the scan tabulates. GPUs are whole-GPU
    units (a 500m share is 0.5)."""

    stranded: bool  # an episode: some pod stranded, and the free GPUs would hold them all
    stranded_pods: tuple[str, ...]  # namespace/name, whatever `stranded` says
    stranded_by_shape: dict[str, list[str]]
    pending_by_shape: dict[str, list[str]]  # every pending GPU pod
    free_gpus_by_node: dict[str, float]  # schedulable GPU nodes with a GPU (or part) free
    free_gpus_usable: float  # free on the nodes the stranded pods may use
    stranded_demand_gpus: float
    stranded_gpus: float  # the measure (fragmentation.stranded_gpus)
    fragmentation_gpus: float  # FGD, summed over nodes
    fragmentation_by_node: dict[str, float] = field(default_factory=dict)
    why: str = ""

    def payload(self, cluster: str) -> dict[str, Any]:
        """The `gpuops.gpu.stranded` event's payload."""
        return {"cluster": cluster,
                "pending_gpu_pods_by_shape": self.stranded_by_shape,
                "free_gpus_by_node": self.free_gpus_by_node,
                "free_gpus_usable": self.free_gpus_usable,
                "stranded_demand_gpus": self.stranded_demand_gpus,
                "stranded_gpus": self.stranded_gpus,
                "gpu_fragmentation": self.fragmentation_gpus,
                "why": self.why}


def _gpus(milli: float) -> float:
    return round(float(milli) / MILLI, 3)


def assess_gpus(cluster: Cluster, failed: Collection[str]) -> GpuAssessment:
    """`failed`: keys (`namespace/name`) of the pending pods whose last scheduling attempt
    failed for GPUs (`failed_for_gpus`)."""
    state, pods = PackState.from_cluster(cluster)
    first_pending = len(cluster.running)
    pending_rows = [i for i in range(first_pending, len(pods)) if pods[i].gpu_count]
    pending_by_shape: dict[str, list[str]] = {}
    for i in pending_rows:
        pending_by_shape.setdefault(shape_label(pods[i]), []).append(pods[i].key)
    free = state.gpu_free.sum(axis=1)
    schedulable = np.array([not n.cordoned for n in cluster.nodes], dtype=bool)
    free_by_node = {name: _gpus(free[n]) for n, name in enumerate(state.node_names)
                    if state.gpu_count[n] and schedulable[n] and free[n] > 0}
    stranded_rows, usable = [], np.zeros(state.n, dtype=bool)
    for i in pending_rows:
        if pods[i].key not in failed or state.feasible(i).any():
            continue
        admitted = state.admit[state.pod_sig[i]]
        if state.gpu_free[admitted].sum() >= pods[i].gpu_total_milli:
            stranded_rows.append(i)
            usable |= admitted
    demand = sum(pods[i].gpu_total_milli for i in stranded_rows)
    usable_free = int(state.gpu_free[usable].sum())
    stranded = bool(stranded_rows) and demand <= usable_free
    stranded_by_shape: dict[str, list[str]] = {}
    for i in stranded_rows:
        stranded_by_shape.setdefault(shape_label(pods[i]), []).append(pods[i].key)
    if not stranded_rows:
        why = "no GPU pod is pending for want of GPUs that the free GPUs could hold"
    elif stranded:
        why = (f"{len(stranded_rows)} GPU pod(s) asking {_gpus(demand)} GPU(s) fit no node, "
               f"while the nodes they may use have {_gpus(usable_free)} GPU(s) free")
    else:
        why = (f"{len(stranded_rows)} GPU pod(s) ask {_gpus(demand)} GPU(s) but only "
               f"{_gpus(usable_free)} are free where they may run: a capacity shortage")
    workload = [p for p in pods if p.owner_kind != "DaemonSet"]
    frag = np.zeros(state.n)
    if workload:
        shapes = typical_shapes((p.cpu_milli, p.gpu_count, p.gpu_milli, p.gpu_models)
                                for p in workload)
        frag = state_fragmentation(state, shapes)
    return GpuAssessment(
        stranded=stranded, stranded_pods=tuple(pods[i].key for i in stranded_rows),
        stranded_by_shape=stranded_by_shape, pending_by_shape=pending_by_shape,
        free_gpus_by_node=free_by_node, free_gpus_usable=_gpus(usable_free),
        stranded_demand_gpus=_gpus(demand),
        stranded_gpus=round(stranded_gpus(state, pending_rows), 3),
        fragmentation_gpus=_gpus(frag.sum()),
        fragmentation_by_node={name: _gpus(frag[n]) for n, name in enumerate(state.node_names)
                               if state.gpu_count[n]},
        why=why)


def node_rows(cluster: Cluster, assessment: GpuAssessment) -> list[dict[str, Any]]:
    """One row per GPU node for the scan's table: what it has, what is free, its FGD
    fragmentation (GPUs), and whether it is cordoned."""
    used: dict[str, int] = {}
    pods: dict[str, int] = {}
    for pod in cluster.running:
        if pod.gpu_count and pod.node is not None:
            used[pod.node] = used.get(pod.node, 0) + pod.gpu_total_milli
            pods[pod.node] = pods.get(pod.node, 0) + 1
    return [{"node": n.name, "gpu_model": n.gpu_model, "gpus": n.gpus,
             "free_gpus": _gpus(n.gpus * MILLI - used.get(n.name, 0)),
             "gpu_pods": pods.get(n.name, 0),
             "fgd_fragmentation_gpus": assessment.fragmentation_by_node.get(n.name, 0.0),
             "cordoned": n.cordoned}
            for n in sorted(cluster.nodes, key=lambda n: n.name) if n.gpus]
