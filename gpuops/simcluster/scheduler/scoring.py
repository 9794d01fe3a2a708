"""How kube-scheduler ranks the nodes a pod fits on, on plain data.

The default profile's scores that tell nodes apart here: NodeResourcesFit (LeastAllocated,
favouring free cpu and memory, which spreads pods and is why GPUs fragment in real clusters;
or MostAllocated, which packs), NodeResourcesBalancedAllocation, TaintToleration
(PreferNoSchedule taints) and preferred node affinity, each 0-100, with the default weights
1, 1, 3 and 2. The highest total wins; ties are broken by a hash of pod and node names where
kube-scheduler picks at random, so equal pods still spread and a run is reproducible.
"""

from __future__ import annotations

import zlib

from .filters import NodeInfo, PodInfo, tolerated

MAX_NODE_SCORE = 100


def _allocation_scores(pod: PodInfo, nodes: list[NodeInfo], most: bool) -> list[int]:
    """NodeResourcesFit (Least- or MostAllocated over cpu and memory, pods without requests
    counted as 100m / 200Mi) plus BalancedAllocation, per node. One tight loop: it runs for
    hundreds of nodes per pod."""
    pod_cpu, pod_mem = pod.nonzero_cpu, pod.nonzero_memory
    req_cpu, req_mem = pod.requests.get("cpu", 0), pod.requests.get("memory", 0)
    scores = []
    for node in nodes:
        alloc = node.allocatable
        cpu_cap, mem_cap = alloc.get("cpu", 0), alloc.get("memory", 0)
        cpu_used, mem_used = node.nonzero_cpu + pod_cpu, node.nonzero_memory + pod_mem
        if most:
            cpu = min(cpu_used, cpu_cap) * MAX_NODE_SCORE // cpu_cap if cpu_cap else 0
            mem = min(mem_used, mem_cap) * MAX_NODE_SCORE // mem_cap if mem_cap else 0
        else:
            cpu = (cpu_cap - cpu_used) * MAX_NODE_SCORE // cpu_cap \
                if cpu_cap and cpu_used <= cpu_cap else 0
            mem = (mem_cap - mem_used) * MAX_NODE_SCORE // mem_cap \
                if mem_cap and mem_used <= mem_cap else 0
        balanced = MAX_NODE_SCORE
        if cpu_cap and mem_cap:
            requested = node.requested
            cpu_frac = min((requested.get("cpu", 0) + req_cpu) / cpu_cap, 1.0)
            mem_frac = min((requested.get("memory", 0) + req_mem) / mem_cap, 1.0)
            balanced = int((1 - abs(cpu_frac - mem_frac) / 2) * MAX_NODE_SCORE)
        scores.append((cpu + mem) // 2 + balanced)
    return scores


def _normalize(raw: list[int], reverse: bool) -> list[int]:
    top = max(raw, default=0)
    if top == 0:
        return [MAX_NODE_SCORE if reverse else 0 for _ in raw]
    scaled = [MAX_NODE_SCORE * r // top for r in raw]
    return [MAX_NODE_SCORE - s for s in scaled] if reverse else scaled


def select_host(pod: PodInfo, feasible: list[NodeInfo], strategy: str = "LeastAllocated"
                ) -> NodeInfo:
    """The feasible node with the highest weighted score. kube-scheduler breaks ties at
    random; here a hash of pod and node names does, so that equal pods still spread as they
    do in a real cluster and a run is reproducible."""
    if len(feasible) == 1:
        return feasible[0]
    totals = _allocation_scores(pod, feasible, strategy == "MostAllocated")
    if any(n.prefer_taints for n in feasible):
        raw = [sum(1 for t in n.prefer_taints if not tolerated(pod.tolerations, t))
               for n in feasible]
        totals = [t + 3 * s for t, s in zip(totals, _normalize(raw, reverse=True))]
    if pod.preferred_terms:
        raw = [sum(w for w, term in pod.preferred_terms if term.matches(n)) for n in feasible]
        totals = [t + 2 * s for t, s in zip(totals, _normalize(raw, reverse=False))]
    top = max(totals)
    tied = [n for n, total in zip(feasible, totals) if total == top]
    if len(tied) == 1:
        return tied[0]
    pod_id = f"{pod.namespace}/{pod.name}/".encode()
    return min(tied, key=lambda n: (zlib.crc32(pod_id + n.name.encode()), n.name))
