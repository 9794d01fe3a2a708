"""Preemption as kube-scheduler's DefaultPreemption plugin decides it, on plain data.

When a pod fits nowhere, find the node where evicting lower-priority pods makes it fit:
remove every lower-priority pod, check the pod fits, then give back ("reprieve") as many as
possible, most important first, PDB-violating ones before the others; among the nodes that
work, prefer the fewest PodDisruptionBudget violations, then the lowest highest victim
priority, the lowest priority sum, the fewest victims, the latest-started victims. Only
resources change when pods leave a node, so only nodes rejected by NodeResourcesFit
(resolvable) are tried; the others are "not helpful".
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.gpus import MILLI_PER_GPU
from ..core.selectors import Requirement, labels_match, selector_from_spec
from .filters import (
    UNRESOLVABLE,
    UNSCHEDULABLE,
    NodeInfo,
    PodInfo,
    PodKey,
    Status,
    fit_error_message,
    insufficient_resources,
    nominated_usage,
    release_gpus,
)

REASON_NOT_HELPFUL = "Preemption is not helpful for scheduling"
REASON_NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
PREEMPTION_PREFIX = "preemption: "
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100
_INT32_OFFSET = 2**31  # kube sums priorities + MaxInt32 + 1 so fewer victims always weigh less


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as preemption reads it."""

    namespace: str
    selector: tuple[Requirement, ...]
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()

    @classmethod
    def from_pdb(cls, pdb: dict[str, Any], disruptions_allowed: int) -> Budget:
        spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
        return cls(pdb["metadata"].get("namespace", "default"),
                   tuple(selector_from_spec(spec.get("selector"))), int(disruptions_allowed),
                   frozenset(status.get("disruptedPods") or {}))

    def covers(self, pod: PodInfo) -> bool:
        # An empty selector selects nothing here, as in kube-scheduler.
        return (self.namespace == pod.namespace and bool(self.selector)
                and pod.name not in self.disrupted_pods
                and labels_match(list(self.selector), pod.labels))


@dataclass(frozen=True)
class Candidate:
    node: str
    victims: tuple[PodInfo, ...]  # most important first
    pdb_violations: int


def _importance(pod: PodInfo) -> tuple[int, float]:
    """Sort key: higher priority first, then the earlier started."""
    return (-pod.priority, pod.start_time)


def split_by_budget(pods: list[PodInfo], budgets: list[Budget]
                    ) -> tuple[list[PodInfo], list[PodInfo]]:
    """(would violate a PDB, would not), each in the given order; evicting several pods
    covered by one budget spends it one by one."""
    allowed = [b.disruptions_allowed for b in budgets]
    violating: list[PodInfo] = []
    fine: list[PodInfo] = []
    for pod in pods:
        violates = False
        for i, budget in enumerate(budgets):
            if budget.covers(pod):
                allowed[i] -= 1
                if allowed[i] < 0:
                    violates = True
        (violating if violates else fine).append(pod)
    return violating, fine


def select_victims_on_node(pod: PodInfo, node: NodeInfo,
                           nominated: dict[PodKey, PodInfo] | None,
                           budgets: list[Budget]) -> Candidate | Status:
    """The fewest, least important pods to evict from `node` for `pod`, or why none do."""
    lower = sorted((p for p in node.pods.values() if p.priority < pod.priority), key=_importance)
    if not lower:
        return (UNRESOLVABLE, (REASON_NO_VICTIMS,))
    base, count, base_gpus = nominated_usage(pod, node, nominated)
    requested, gpu_used = dict(base), list(base_gpus)
    for victim in lower:
        for name, value in victim.requests.items():
            requested[name] -= value
        release_gpus(gpu_used, victim, node.gpu_held.get(victim.key, ()))
    count -= len(lower)
    status = insufficient_resources(pod, node, requested, count, gpu_used)
    if status is not None:
        return status
    violating, fine = split_by_budget(lower, budgets)
    victims: list[PodInfo] = []
    violations = 0
    for group, counts_as_violation in ((violating, True), (fine, False)):
        for candidate in group:
            held = node.gpu_held.get(candidate.key, ())
            for name, value in candidate.requests.items():
                requested[name] = requested.get(name, 0) + value
            _hold(gpu_used, candidate, held)
            if insufficient_resources(pod, node, requested, count + 1, gpu_used) is None:
                count += 1  # reprieved: it stays
                continue
            for name, value in candidate.requests.items():
                requested[name] -= value
            release_gpus(gpu_used, candidate, held)
            victims.append(candidate)
            violations += counts_as_violation
    victims.sort(key=_importance)
    return Candidate(node.name, tuple(victims), violations)


def _hold(gpu_used: list[int], pod: PodInfo, indices: tuple[int, ...]) -> None:
    """Give a reprieved victim its GPUs back."""
    milli = pod.gpu.milli or MILLI_PER_GPU
    for i in indices:
        gpu_used[i] += milli


def pick_one_node(candidates: list[Candidate]) -> Candidate:
    """kube-scheduler's pickOneNodeForPreemption, criteria in order, first node on ties."""
    def earliest_top_start(c: Candidate) -> float:
        top = c.victims[0].priority
        return min(v.start_time for v in c.victims if v.priority == top)

    return min(candidates, key=lambda c: (
        c.pdb_violations,
        c.victims[0].priority,
        sum(v.priority + _INT32_OFFSET for v in c.victims),
        len(c.victims),
        -earliest_top_start(c),
    ))


def not_eligible_reason(pod: PodInfo, nodes: dict[str, NodeInfo],
                        statuses: dict[str, Status]) -> str | None:
    """Why `pod` may not preempt now (PodEligibleToPreemptOthers), or None if it may."""
    if pod.preempt_never:
        return NOT_ELIGIBLE_NEVER
    if pod.nominated_node:
        status = statuses.get(pod.nominated_node)
        if status is not None and status[0] == UNRESOLVABLE:
            return None  # the nominated node cannot work any more: preempt again
        node = nodes.get(pod.nominated_node)
        if node is not None and any(p.priority < pod.priority and p.terminating_by_preemption
                                    for p in node.pods.values()):
            return NOT_ELIGIBLE_TERMINATING  # wait for the victims already going
    return None


def num_candidates(num_potential: int) -> int:
    wanted = max(num_potential * MIN_CANDIDATE_NODES_PERCENTAGE // 100,
                 MIN_CANDIDATE_NODES_ABSOLUTE)
    return min(wanted, num_potential)


def find_candidates(pod: PodInfo, order: Iterable[str], nodes: dict[str, NodeInfo],
                    statuses: dict[str, Status],
                    nominated: dict[str, dict[PodKey, PodInfo]],
                    budgets: list[Budget] | None) -> tuple[list[Candidate], dict[str, Status]]:
    """Dry-run preemption on every node where it might help; stop once enough candidates
    are found (10 % of those nodes, at least 100). Returns the candidates and, for the
    message when there are none, a status per node."""
    names = list(order)
    post: dict[str, Status] = {}
    potential = []
    for name in names:
        if statuses.get(name, (UNSCHEDULABLE, ()))[0] == UNRESOLVABLE:
            post[name] = (UNRESOLVABLE, (REASON_NOT_HELPFUL,))
        else:
            potential.append(name)
    if not potential:
        return [], post
    wanted = num_candidates(len(potential))
    # kube-scheduler starts the dry run at a random node; a hash of the pod keeps runs
    # reproducible without always preempting on the first nodes by name.
    offset = zlib.crc32(f"{pod.namespace}/{pod.name}".encode()) % len(potential)
    candidates: list[Candidate] = []
    for name in potential[offset:] + potential[:offset]:
        result = select_victims_on_node(pod, nodes[name], nominated.get(name), budgets or [])
        if isinstance(result, Candidate):
            candidates.append(result)
            if len(candidates) >= wanted and any(c.pdb_violations == 0 for c in candidates):
                break
        else:
            post[name] = result
    return candidates, post


def preemption_failure_message(post: dict[str, Status]) -> str:
    return PREEMPTION_PREFIX + fit_error_message(len(post), post.values())
