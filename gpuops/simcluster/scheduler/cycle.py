"""One kube-scheduler scheduling cycle for one pod, on an in-memory view of the cluster.

`ClusterView` is the scheduler's cache: nodes in name order with the pods bound to them and
their summed requests, plus the pods nominated to each node by a past preemption. The caller
keeps it current incrementally (a change touches one node), so a cycle costs one pass over the
nodes and nothing per bound pod. `schedule_one` returns what to do: bind, preempt, or report
why the pod fits nowhere, with kube-scheduler's message.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .filters import (
    NO_NODES_AVAILABLE,
    UNRESOLVABLE,
    NodeInfo,
    PodInfo,
    PodKey,
    Status,
    filter_node,
    fit_error_message,
    num_feasible_nodes_to_find,
)
from .preemption import (
    PREEMPTION_PREFIX,
    Budget,
    find_candidates,
    not_eligible_reason,
    pick_one_node,
    preemption_failure_message,
)
from .scoring import select_host


@dataclass(frozen=True)
class Bind:
    node: str


@dataclass(frozen=True)
class Preempt:
    """Evict `victims` from `node`, nominate the pod there; `demoted`: lower-priority pods
    nominated to that node, whose nomination must be cleared."""

    node: str
    victims: tuple[PodInfo, ...]
    demoted: tuple[PodInfo, ...]
    message: str  # the FailedScheduling message for this cycle


@dataclass(frozen=True)
class Unschedulable:
    message: str
    nominated_node: str | None  # None: leave the nomination as it is; "": clear it


Outcome = Bind | Preempt | Unschedulable


class ClusterView:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.order: list[str] = []  # names of the nodes that exist, sorted
        self.nominated: dict[str, dict[PodKey, PodInfo]] = {}
        self._nominated_at: dict[PodKey, str] = {}
        self.next_start = 0

    def set_node(self, node: dict[str, Any]) -> NodeInfo:
        name = node["metadata"]["name"]
        info = self.nodes.get(name)
        if info is None:
            info = self.nodes[name] = NodeInfo(name)
        if not info.present:
            bisect.insort(self.order, name)
        info.set_node(node)
        return info

    def remove_node(self, name: str) -> None:
        info = self.nodes.get(name)
        if info is None or not info.present:
            return
        self.order.pop(bisect.bisect_left(self.order, name))
        info.present = False
        if not info.pods:
            del self.nodes[name]

    def bind(self, node_name: str, pod: PodInfo) -> None:
        info = self.nodes.get(node_name)
        if info is None:  # a pod may name a node that does not exist (yet)
            info = self.nodes[node_name] = NodeInfo(node_name)
        info.add_pod(pod)

    def unbind(self, node_name: str, key: PodKey) -> None:
        info = self.nodes.get(node_name)
        if info is not None:
            info.remove_pod(key)
            if not info.present and not info.pods:
                del self.nodes[node_name]

    def nominate(self, pod: PodInfo, node_name: str) -> None:
        """Record (or clear, with "") the node a pending pod is nominated to."""
        previous = self._nominated_at.pop(pod.key, "")
        if previous:
            pods = self.nominated[previous]
            pods.pop(pod.key, None)
            if not pods:
                del self.nominated[previous]
        if node_name:
            self.nominated.setdefault(node_name, {})[pod.key] = pod
            self._nominated_at[pod.key] = node_name


def find_feasible(view: ClusterView, pod: PodInfo) -> tuple[list[NodeInfo], dict[str, Status]]:
    """Filter nodes from where the last search stopped until enough feasible ones are found;
    when none is feasible every node has been tried and has a status."""
    order, nodes, nominated = view.order, view.nodes, view.nominated
    total = len(order)
    wanted = num_feasible_nodes_to_find(total)
    feasible: list[NodeInfo] = []
    statuses: dict[str, Status] = {}
    start = view.next_start % total
    fit_order = pod.fit_order
    # Most pods and nodes need only the resource check: do it inline (this loop is the
    # scheduler's hot spot), and run the full filters for the rest.
    plain_pod = not pod.node_selector and pod.required_terms is None and not pod.gpu
    processed = 0
    for i in range(total):
        name = order[(start + i) % total]
        node = nodes[name]
        processed += 1
        if (plain_pod and not node.unschedulable and not node.taints
                and len(node.pods) < node.max_pods and name not in nominated):
            free = node.free
            for resource, want, _ in fit_order:
                if want > free.get(resource, 0):
                    break
            else:
                feasible.append(node)
                if len(feasible) >= wanted:
                    break
                continue
        status = filter_node(pod, node, nominated.get(name))
        if status is None:
            feasible.append(node)
            if len(feasible) >= wanted:
                break
        else:
            statuses[name] = status
    view.next_start = (start + processed) % total
    return feasible, statuses


def schedule_one(view: ClusterView, pod: PodInfo, *, strategy: str = "LeastAllocated",
                 budgets: Callable[[], list[Budget]] = list) -> Outcome:
    """Decide for one pending pod. `budgets` is called only if preemption is tried.

    A pod's `status.nominatedNodeName` — set by an earlier preemption or, since KEP-5278
    (NominatedNodeNameForExpectation, beta in 1.35), by any component — is tried first and
    wins if the pod fits there; otherwise the pod goes through every node as usual. A failed
    cycle never clears it (the nominated node may not exist yet); only preemption elsewhere
    overwrites it, and binding clears it (ClearingNominatedNodeNameAfterBinding)."""
    if not view.order:
        return Unschedulable(NO_NODES_AVAILABLE, None)
    nominated_node = view.nodes.get(pod.nominated_node) if pod.nominated_node else None
    if nominated_node is not None and nominated_node.present and filter_node(
            pod, nominated_node, view.nominated.get(nominated_node.name)) is None:
        return Bind(nominated_node.name)
    feasible, statuses = find_feasible(view, pod)
    if feasible:
        return Bind(select_host(pod, feasible, strategy).name)
    num_nodes = len(view.order)
    reason = not_eligible_reason(pod, view.nodes, statuses)
    if reason is not None:
        return Unschedulable(fit_error_message(num_nodes, statuses.values(),
                                               PREEMPTION_PREFIX + reason), None)
    candidates, post = find_candidates(pod, view.order, view.nodes, statuses, view.nominated,
                                       None if all(s[0] == UNRESOLVABLE
                                                   for s in statuses.values()) else budgets())
    if not candidates:  # the nomination stays (KEP-5278): its setter may expect a node
        return Unschedulable(fit_error_message(num_nodes, statuses.values(),
                                               preemption_failure_message(post)), None)
    best = pick_one_node(candidates)
    demoted = tuple(p for p in view.nominated.get(best.node, {}).values()
                    if p.priority < pod.priority and p.key != pod.key)
    return Preempt(best.node, best.victims, demoted,
                   fit_error_message(num_nodes, statuses.values()))
