"""The FGD simulator's `fragMultiPod` descheduler, the baseline `gpuops bench packing` beats.

As hkust-adsl/kubernetes-scheduler-simulator defines it (`pkg/simulator/deschedule.go`,
`descheduleClusterOnFragMultiPod`; re-implemented here, not copied): keep the nodes in a
max-queue by FGD fragmentation; pop the most fragmented node, evict from it the one pod whose
removal lowers that node's fragmentation most (none if no removal lowers it: the node leaves
the queue), push the node back with its new fragmentation; repeat until `budget` pods are
evicted. Then the evicted pods are scheduled again, in eviction order, by the same placement
policy. The paper never evaluated it; issue 17 uses it as the baseline at equal budgets.

`may_evict` lets the stress run keep do-not-disrupt and PDB-protected pods in place (the
descheduler evicts through the Eviction API, which honours PDBs).
"""

from __future__ import annotations

import heapq

import numpy as np

from gpuops.tasks.rebalance.fragmentation import Shapes, node_fragmentation
from gpuops.tasks.rebalance.placement import Placer
from gpuops.tasks.rebalance.state import PackState


def frag_multi_pod(state: PackState, placer: Placer, shapes: Shapes, budget: int,
                   may_evict: np.ndarray | None = None) -> tuple[list[int], list[int]]:
    """Evict up to `budget` pods and re-place them; returns (evicted, not re-placed)."""
    if budget <= 0:
        return [], []
    access = shapes.access(state.models)
    frag = node_fragmentation(state.cpu_free, state.gpu_free, state.model, shapes, access)
    queue = [(-float(f), int(v)) for v, f in enumerate(frag) if f > 0]
    heapq.heapify(queue)
    evicted: list[int] = []
    while queue and len(evicted) < budget:
        neg, v = heapq.heappop(queue)
        pods = [q for q in sorted(state.pods_on[v]) if may_evict is None or may_evict[q]]
        if not pods:
            continue
        cpu = np.array([state.cpu_free[v] + state.pod_cpu[q] for q in pods])
        gpu = np.repeat(state.gpu_free[v][None, :], len(pods), axis=0)
        for i, q in enumerate(pods):
            for g in state.pod_gpus[q]:
                gpu[i, g] += state.pod_milli[q]
        after = node_fragmentation(cpu, gpu, np.full(len(pods), state.model[v]), shapes, access)
        gain = np.floor(-neg - after)  # the simulator compares whole milli-GPU
        best = int(np.argmax(gain))
        if gain[best] <= 0:
            continue
        q = pods[best]
        state.unbind(q)
        evicted.append(q)
        heapq.heappush(queue, (-float(after[best]), v))
    failed = [q for q in evicted if not placer.place(q)]
    return evicted, failed
