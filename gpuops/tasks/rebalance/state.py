"""The numeric picture of a cluster that placement, fragmentation and the planner work on.

Why arrays: the bench places ~10,000 pods on 1,213 nodes for many arms and seeds, and the
planner tries thousands of what-ifs; per-node Python loops would take minutes. Nodes are rows;
`gpu_free[n, g]` is device g's free milli-GPU (absent devices read 0, which never fits a
request and adds nothing to a sum). Pods are rows too: their request, the node and devices
they hold (-1 / () while unplaced), and a constraint signature whose admitted-nodes mask is
shared by all pods that have it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from gpuops.tasks.rebalance.constraints import admits, constraint_signature
from gpuops.tasks.rebalance.model import MILLI, Cluster, Pod


class PackState:
    """Mutable: `bind` and `unbind` keep free resources and `version` (per node) current."""

    def __init__(self, *, node_names: Sequence[str], cpu: np.ndarray, memory: np.ndarray,
                 gpus: np.ndarray, model: np.ndarray, models: Sequence[str],
                 admit: np.ndarray, pod_cpu: np.ndarray, pod_mem: np.ndarray,
                 pod_num: np.ndarray, pod_milli: np.ndarray, pod_sig: np.ndarray) -> None:
        self.node_names = list(node_names)
        self.n = len(self.node_names)
        self.cpu_cap = np.asarray(cpu, dtype=np.int64)
        self.mem_cap = np.asarray(memory, dtype=np.int64)
        self.gpu_count = np.asarray(gpus, dtype=np.int64)
        self.model = np.asarray(model, dtype=np.int64)
        self.models = list(models)
        width = max(1, int(self.gpu_count.max(initial=0)))
        self.gpu_cap = np.where(np.arange(width)[None, :] < self.gpu_count[:, None], MILLI, 0)
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.gpu_free = self.gpu_cap.astype(np.int64).copy()
        self.admit = np.asarray(admit, dtype=bool)  # (signatures, nodes)
        self.pod_cpu = np.asarray(pod_cpu, dtype=np.int64)
        self.pod_mem = np.asarray(pod_mem, dtype=np.int64)
        self.pod_num = np.asarray(pod_num, dtype=np.int64)
        self.pod_milli = np.asarray(pod_milli, dtype=np.int64)
        self.pod_sig = np.asarray(pod_sig, dtype=np.int64)
        self.pod_node = np.full(len(self.pod_cpu), -1, dtype=np.int64)
        self.pod_gpus: list[tuple[int, ...]] = [()] * len(self.pod_cpu)
        self.pod_dev0 = np.full(len(self.pod_cpu), -1, dtype=np.int64)  # first device held
        self.version = np.zeros(self.n, dtype=np.int64)
        self.pods_on: list[set[int]] = [set() for _ in range(self.n)]

    # --- building -------------------------------------------------------------------------

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> tuple[PackState, list[Pod]]:
        """The state of `cluster` with its running pods bound; pods are rows in the order
        running then pending (the returned list)."""
        nodes = cluster.nodes
        pods = list(cluster.running) + list(cluster.pending)
        models = sorted({n.gpu_model for n in nodes})
        signatures: dict[tuple[Any, ...], int] = {}
        sig = []
        first: list[Pod] = []
        for pod in pods:
            key = constraint_signature(pod)
            if key not in signatures:
                signatures[key] = len(signatures)
                first.append(pod)
            sig.append(signatures[key])
        admit = np.array([[admits(node, pod) is None for node in nodes] for pod in first],
                         dtype=bool).reshape(len(first), len(nodes))
        state = cls(node_names=[n.name for n in nodes],
                    cpu=np.array([n.cpu_milli for n in nodes]),
                    memory=np.array([n.memory_mib for n in nodes]),
                    gpus=np.array([n.gpus for n in nodes]),
                    model=np.array([models.index(n.gpu_model) for n in nodes]), models=models,
                    admit=admit, pod_cpu=np.array([p.cpu_milli for p in pods]),
                    pod_mem=np.array([p.memory_mib for p in pods]),
                    pod_num=np.array([p.gpu_count for p in pods]),
                    pod_milli=np.array([p.gpu_milli for p in pods]), pod_sig=np.array(sig))
        index = {n.name: i for i, n in enumerate(nodes)}
        for i, pod in enumerate(cluster.running):
            state.bind(i, index[pod.node], tuple(pod.gpu_ids))  # type: ignore[index]
        return state, pods

    def copy(self) -> PackState:
        other = object.__new__(PackState)
        other.__dict__.update(self.__dict__)
        for name in ("cpu_free", "mem_free", "gpu_free", "pod_node", "pod_dev0", "version"):
            setattr(other, name, getattr(self, name).copy())
        other.pod_gpus = list(self.pod_gpus)
        other.pods_on = [set(s) for s in self.pods_on]
        return other

    # --- changes --------------------------------------------------------------------------

    def bind(self, p: int, node: int, gpu_ids: tuple[int, ...]) -> None:
        if self.pod_node[p] >= 0:
            raise ValueError(f"pod row {p} is bound already (node {self.pod_node[p]})")
        self.cpu_free[node] -= self.pod_cpu[p]
        self.mem_free[node] -= self.pod_mem[p]
        milli = self.pod_milli[p]
        for g in gpu_ids:
            self.gpu_free[node, g] -= milli
        self.pod_node[p] = node
        self.pod_gpus[p] = gpu_ids
        self.pod_dev0[p] = gpu_ids[0] if gpu_ids else -1
        self.version[node] += 1
        self.pods_on[node].add(p)

    def unbind(self, p: int) -> tuple[int, tuple[int, ...]]:
        node = int(self.pod_node[p])
        if node < 0:
            raise ValueError(f"pod row {p} is not bound")
        gpu_ids = self.pod_gpus[p]
        self.cpu_free[node] += self.pod_cpu[p]
        self.mem_free[node] += self.pod_mem[p]
        milli = self.pod_milli[p]
        for g in gpu_ids:
            self.gpu_free[node, g] += milli
        self.pod_node[p] = -1
        self.pod_gpus[p] = ()
        self.pod_dev0[p] = -1
        self.version[node] += 1
        self.pods_on[node].discard(p)
        return node, gpu_ids

    # --- questions ------------------------------------------------------------------------

    def feasible(self, p: int, nodes: np.ndarray | None = None) -> np.ndarray:
        """Mask (over `nodes`, default all) of the nodes where pod `p` fits now."""
        sel = slice(None) if nodes is None else nodes
        ok = self.admit[self.pod_sig[p], sel] & (self.cpu_free[sel] >= self.pod_cpu[p]) \
            & (self.mem_free[sel] >= self.pod_mem[p])
        num = self.pod_num[p]
        if num:
            ok &= (self.gpu_free[sel] >= self.pod_milli[p]).sum(axis=1) >= num
        return cast(np.ndarray, ok)

    def gpu_used_milli(self) -> int:
        return int(self.gpu_cap.sum() - self.gpu_free.sum())

    def gpu_capacity_milli(self) -> int:
        return int(self.gpu_cap.sum())

    def unallocated_pct(self) -> float:
        """100 - allocated/capacity in milli-GPU: the FGD paper's KPI."""
        cap = self.gpu_capacity_milli()
        return 100.0 * (cap - self.gpu_used_milli()) / cap if cap else 0.0
