"""Which nodes of a pool can be removed, and which instance each is (pure).

Why a node is chosen and not left to the group: a bare desired-capacity decrease lets the
Auto Scaling group's termination policy pick the instance (zone balance, oldest launch
template, next billing hour), not the emptiest node, and it can kill a busy GPU node. gpuops
picks the node itself from what runs on it, then removes exactly that node's instance
(`scale_in.py`).

A node's *load* is what a drain would have to move: the pods `plan_drain` evicts, minus the
capacity placeholders (pause pods that exist only to hold capacity). DaemonSet and mirror
pods stay with the node and do not count. A node is *empty* with no load at all; GPU pods
and other pods are counted apart, since moving a GPU pod costs far more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuops.common.annotations import PLACEHOLDER_LABEL
from gpuops.common.podfacts import pod_gpus
from gpuops.tasks.actions.drain import plan_drain

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class NodeLoad:
    node: str
    gpu_pods: tuple[str, ...]  # ns/name of pods a drain evicts that request GPUs
    other_pods: tuple[str, ...]  # ns/name of the other pods a drain evicts
    cordoned: bool
    created: str  # creationTimestamp: the newest of equally empty nodes goes first

    @property
    def empty(self) -> bool:
        return not self.gpu_pods and not self.other_pods


def instance_id(node: Obj) -> str:
    """The EC2 instance of a node, from its providerID `aws:///<zone>/<instance-id>`.

    Raises ValueError naming the field when the node has no AWS instance in it."""
    provider = str((node.get("spec") or {}).get("providerID") or "")
    name = (node.get("metadata") or {}).get("name")
    last = provider.rsplit("/", 1)[-1]
    if not provider.startswith("aws://") or not last.startswith("i-"):
        raise ValueError(f"node {name!r}: spec.providerID {provider!r} names no EC2 instance "
                         "(expected aws:///<zone>/i-...)")
    return last


def _is_placeholder(pod: Obj) -> bool:
    return PLACEHOLDER_LABEL in ((pod.get("metadata") or {}).get("labels") or {})


def node_loads(nodes: Sequence[Obj], pods: Iterable[Obj]) -> list[NodeLoad]:
    """Each node's load, emptiest first: no GPU pod before any, then fewest pods, then the
    newest node (the one least likely to hold warm caches)."""
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        name = (pod.get("spec") or {}).get("nodeName")
        if name and not _is_placeholder(pod):
            by_node.setdefault(name, []).append(pod)
    loads = []
    for node in nodes:
        name = node["metadata"]["name"]
        on_node = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
                   for p in by_node.get(name, [])}
        drained = plan_drain(name, [dict(p) for p in on_node.values()])
        evicted = [f"{ns}/{pod}" for ns, pod, _ in drained.evict]
        gpu = tuple(k for k in evicted if pod_gpus(on_node[k]))
        other = tuple(k for k in evicted if k not in gpu)
        loads.append(NodeLoad(name, gpu, other,
                              bool((node.get("spec") or {}).get("unschedulable")),
                              str(node["metadata"].get("creationTimestamp") or "")))
    newest_first = sorted(loads, key=lambda x: x.created, reverse=True)
    return sorted(newest_first, key=lambda x: (len(x.gpu_pods), len(x.other_pods)))


def empty_nodes(nodes: Sequence[Obj], pods: Iterable[Obj], count: int) -> list[str]:
    """Up to `count` empty nodes to remove, newest first. Fewer (or none) when fewer are empty:
    a scale-in never takes a node that runs something."""
    return [load.node for load in node_loads(nodes, pods) if load.empty][:max(0, count)]
