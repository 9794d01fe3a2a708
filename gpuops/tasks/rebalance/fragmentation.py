"""Two measures of GPUs that sit free but cannot be used: stranded GPUs and FGD fragmentation.

**Stranded GPUs** (issue 17): while GPU pods are Pending, the free GPUs (milli-GPU / 1000) of
the nodes where none of the pending GPU pods fits (CPU, memory, GPU model, placement rules
all counted). CPU-only pending pods are left out. Zero when no GPU pod is pending.

**FGD fragmentation** — Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent", USENIX ATC 2023, §3; as their simulator
computes it (hkust-adsl/kubernetes-scheduler-simulator, `pkg/utils/frag.go`,
`NodeGpuShareFragAmount` and `FragAmountSumExceptQ3`). For a node and a task shape m
(CPU, number of GPUs, milli-GPU per GPU, allowed GPU models):
- the shape fits (enough CPU, the model is allowed, at least `num` devices each with
  `milli` free): its fragment is the free milli-GPU of the devices too small for it
  (free < milli) — what that shape could never use on this node;
- it does not fit (GPU short, CPU short, model not allowed), or it asks for no GPU at all: the
  node's whole free milli-GPU is fragment from its point of view.
The node's fragmentation is the popularity-weighted sum over the typical shapes; the
cluster's is the sum over nodes. Memory does not enter, as in the simulator.

Typical shapes (`typical_shapes`): the workload's shapes by how many pods have them, the most
popular first until 95 % of pods are covered, weights renormalised to sum to 1; CPU-only pods
included (the simulator's defaults: `podPopularityThreshold: 95`, `isInvolvedCpuPods: true`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from gpuops.common.errors import ConfigError
from gpuops.tasks.rebalance.model import MILLI, Cluster
from gpuops.tasks.rebalance.state import PackState

ShapeKey = tuple[int, int, int, frozenset[str]]  # cpu_milli, gpu_count, gpu_milli, allowed models


@dataclass(frozen=True)
class Shapes:
    """Typical task shapes and their popularity weights (summing to 1)."""

    cpu: np.ndarray
    num: np.ndarray
    milli: np.ndarray
    weight: np.ndarray
    models: tuple[frozenset[str], ...]  # allowed GPU models per shape; empty = any

    def access(self, models: Sequence[str]) -> np.ndarray:
        """(len(models), shapes) bool: may shape k use a GPU of model i."""
        return np.array([[not allowed or model in allowed for allowed in self.models]
                         for model in models], dtype=bool).reshape(len(models), len(self.models))


def typical_shapes(shapes: Iterable[ShapeKey], *, threshold: float = 0.95,
                   include_cpu_only: bool = True) -> Shapes:
    """The popular shapes of a workload, one `ShapeKey` per pod (see the module docstring)."""
    if not 0 < threshold <= 1:
        raise ConfigError("threshold", f"must be in (0, 1], got {threshold!r}")
    counts = Counter(s for s in shapes if include_cpu_only or s[1] > 0)
    if not counts:
        raise ConfigError("shapes", "no pods to take typical shapes from")
    total = sum(counts.values())
    # most popular first; ties in a fixed order so every run weighs the same shapes
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][:3], sorted(kv[0][3])))
    kept, covered = [], 0
    for key, count in ranked:
        if covered >= threshold * total:
            break
        kept.append((key, count))
        covered += count
    weight = np.array([c for _, c in kept], dtype=float)
    return Shapes(cpu=np.array([k[0] for k, _ in kept], dtype=np.int64),
                  num=np.array([k[1] for k, _ in kept], dtype=np.int64),
                  milli=np.array([k[2] for k, _ in kept], dtype=np.int64),
                  weight=weight / weight.sum(), models=tuple(k[3] for k, _ in kept))


def node_fragmentation(cpu_free: np.ndarray, gpu_free: np.ndarray, model: np.ndarray,
                       shapes: Shapes, access: np.ndarray) -> np.ndarray:
    """FGD fragmentation (milli-GPU) of each of m node states: `cpu_free` (m,),
    `gpu_free` (m, devices), `model` (m,) indexes `access` (models, shapes)."""
    gpu_free = np.asarray(gpu_free)
    ge = gpu_free[:, :, None] >= shapes.milli[None, None, :]  # (m, G, k)
    count = ge.sum(axis=1)
    small = np.where(ge, 0, gpu_free[:, :, None]).sum(axis=1)
    total = gpu_free.sum(axis=1)
    fit = ((count >= shapes.num[None, :]) & (np.asarray(cpu_free)[:, None] >= shapes.cpu[None, :])
           & access[np.asarray(model)] & (shapes.milli[None, :] > 0))
    return cast(np.ndarray, np.where(fit, small, total[:, None]) @ shapes.weight)


def state_fragmentation(state: PackState, shapes: Shapes,
                        access: np.ndarray | None = None) -> np.ndarray:
    """FGD fragmentation (milli-GPU) of every node of `state`."""
    if access is None:
        access = shapes.access(state.models)
    return node_fragmentation(state.cpu_free, state.gpu_free, state.model, shapes, access)


def stranded_gpus(state: PackState, pending: Iterable[int]) -> float:
    """Free GPUs on nodes where none of the pending GPU pods (`pending` rows) fits."""
    gpu_pending = [p for p in pending if state.pod_num[p] > 0]
    if not gpu_pending:
        return 0.0
    seen: set[tuple[Any, ...]] = set()
    any_fits = np.zeros(state.n, dtype=bool)
    for p in gpu_pending:
        key = (state.pod_sig[p], state.pod_cpu[p], state.pod_mem[p], state.pod_num[p],
               state.pod_milli[p])
        if key in seen:
            continue
        seen.add(key)
        any_fits |= state.feasible(p)
    return float(state.gpu_free[~any_fits].sum()) / MILLI


@dataclass(frozen=True)
class ClusterMeasures:
    """What the sensor exports and the scan's table shows, for one cluster picture."""

    stranded_gpus: float
    fragmentation_gpus: float  # FGD, cluster sum, in GPUs
    fragmentation_by_node: dict[str, float]  # in GPUs
    free_gpus_by_node: dict[str, float]
    pending_gpu_pods_by_shape: dict[str, int]  # "2x1000m cpu=8000m" -> count


def shape_label(gpu_count: int, gpu_milli: int, cpu_milli: int) -> str:
    """A pending shape as a metric label: `1x500m cpu=4000m`."""
    return f"{gpu_count}x{gpu_milli}m cpu={cpu_milli}m"


def cluster_measures(cluster: Cluster, shapes: Shapes | None = None) -> ClusterMeasures:
    """Stranded GPUs, FGD fragmentation (weighted by `shapes`, default the typical shapes of
    the cluster's own pods) and pending GPU pods by shape of a `model.Cluster`."""
    state, pods = PackState.from_cluster(cluster)
    pending = list(range(len(cluster.running), len(pods)))
    if shapes is None and pods:
        shapes = typical_shapes((p.cpu_milli, p.gpu_count, p.gpu_milli, p.gpu_models)
                                for p in pods)
    frag = state_fragmentation(state, shapes) if shapes is not None else np.zeros(state.n)
    by_shape: Counter[str] = Counter(shape_label(p.gpu_count, p.gpu_milli, p.cpu_milli)
                                     for p in cluster.pending if p.gpu_count)
    return ClusterMeasures(
        stranded_gpus=stranded_gpus(state, pending),
        fragmentation_gpus=float(frag.sum()) / MILLI,
        fragmentation_by_node={n: float(f) / MILLI for n, f in zip(state.node_names, frag)},
        free_gpus_by_node={n: float(g) / MILLI
                           for n, g in zip(state.node_names, state.gpu_free.sum(axis=1))},
        pending_gpu_pods_by_shape=dict(by_shape))
