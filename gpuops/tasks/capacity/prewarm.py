"""From a capacity plan to the node counts to hold now: lead time, what is in use, limits.

Why this is its own step: the plan says how many nodes each pool should *serve with* in each
hour; what gpuops must *request* now is different. A node asked for now serves
`lead_time_hours` later, and the next run is an hour away, so this run must already ask for
the plan's hour-`lead` capacity — and must not let go of capacity still needed before then,
because getting it back would take the lead time again. Hence, per pool:

    target = max(plan.nodes[pool][0 .. lead_time_hours])       (the window of this run)
    target = max(target, nodes in use, pool min_size)           (never below what is used)
    target = min(target, the group's maxSize in AWS)            (clipped, with a note)

Capacity rises ahead of demand (the window reaches into the future) and falls after it
(once the peak leaves the window). Pure: plain data in, plain data out; the flow reads the
current state and applies the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuops.common.annotations import PLACEHOLDER_LABEL
from gpuops.common.errors import LimitViolation
from gpuops.common.podfacts import holds_resources, is_daemonset_pod, pod_gpus
from gpuops.tasks.capacity.plan import CapacityPlan, GpuQuota, NodePoolSpec
from gpuops.tasks.capacity.resize import PoolResize


@dataclass(frozen=True)
class PoolState:
    """A pool as it is now. `current_size`: nodes running plus requested (EKS: desired
    clamped into [min, max]; ASG: DesiredCapacity; placeholder pools: the node count).
    `aws_min`/`aws_max`: the group's limits in AWS (None for placeholder pools)."""

    name: str
    current_size: int
    nodes_in_use: int = 0
    gpus_in_use: int = 0
    aws_min: int | None = None
    aws_max: int | None = None


@dataclass(frozen=True)
class PoolTarget(PoolResize):
    """What to hold for one pool during this run's window, and why."""

    pool: str
    current: int
    planned: int  # the plan's peak over the window
    target: int
    window_hours: int
    price_per_hour: float
    gpus_per_node: int
    notes: tuple[str, ...] = field(default=())


def pool_usage(node_names: Iterable[str], pods: Iterable[Mapping[str, Any]],
               gpus_per_node: int) -> tuple[int, int]:
    """(nodes in use, GPUs in use) on a pool's nodes, placeholders and DaemonSets left out.

    Nodes in use: at least every node running a GPU pod, and at least the nodes the GPU
    requests need when packed perfectly."""
    names = set(node_names)
    busy: set[str] = set()
    gpus = 0
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if node not in names or not holds_resources(pod) or is_daemonset_pod(pod) \
                or PLACEHOLDER_LABEL in labels:
            continue
        wanted = pod_gpus(pod)
        if wanted:
            busy.add(node)
            gpus += wanted
    return max(len(busy), math.ceil(gpus / gpus_per_node)), gpus


def derive_targets(plan: CapacityPlan, pools: Sequence[NodePoolSpec],
                   states: Mapping[str, PoolState], quotas: Sequence[GpuQuota] = ()
                   ) -> list[PoolTarget]:
    """Per-pool node counts to hold now (see the module docstring for the rule).

    Raises `LimitViolation` naming the quota when the targets together exceed an account GPU
    quota (possible only when nodes in use already do): nothing should then be applied.
    """
    targets = []
    for pool in pools:
        state = states[pool.name]
        window = plan.nodes[pool.name][: min(plan.hours, pool.lead_time_hours + 1)]
        planned = max(window)
        target, notes = planned, []
        if state.nodes_in_use > target:
            target = state.nodes_in_use
            notes.append(f"{state.nodes_in_use} node(s) in use: not going below")
        if pool.min_size > target:
            target = pool.min_size
            notes.append(f"pool min_size {pool.min_size}")
        if state.aws_max is not None and target > state.aws_max:
            notes.append(f"clipped from {target} to the group's maxSize {state.aws_max}")
            target = state.aws_max
        if state.aws_min is not None and target < state.aws_min:
            notes.append(f"raised from {target} to the group's minSize {state.aws_min}")
            target = state.aws_min
        targets.append(PoolTarget(pool.name, state.current_size, planned, target, len(window),
                                  pool.price_per_hour, pool.gpus_per_node, tuple(notes)))
    check_quotas(targets, pools, quotas)
    return targets


def check_quotas(targets: Sequence[PoolTarget], pools: Sequence[NodePoolSpec],
                 quotas: Sequence[GpuQuota]) -> None:
    family = {p.name: p.gpu_family for p in pools}
    for quota in quotas:
        used = sum(t.target * t.gpus_per_node for t in targets if family[t.pool] == quota.family)
        if used > quota.max_gpus:
            detail = ", ".join(f"{t.pool}: {t.target} x {t.gpus_per_node}" for t in targets
                               if family[t.pool] == quota.family)
            raise LimitViolation(f"the targets need {used} GPUs ({detail}), above the "
                                 f"quota of {quota.max_gpus}",
                                 field=f"quotas[{quota.family!r}].max_gpus")


def placeholder_pods(target_nodes: int, gpus_per_node: int, gpus_in_use: int,
                     gpus_per_pod: int) -> int:
    """Pause pods that, with the real pods, fill `target_nodes` nodes' GPUs.

    Rounded down: a partly filled node is already there for the real pods on it."""
    if gpus_per_pod < 1:
        raise ValueError(f"gpus_per_pod must be >= 1, got {gpus_per_pod}")
    free = max(0, target_nodes * gpus_per_node - gpus_in_use)
    return free // gpus_per_pod


def budget_for(pool: NodePoolSpec, targets: Sequence[PoolTarget],
               pools: Sequence[NodePoolSpec], quotas: Sequence[GpuQuota]
               ) -> tuple[str, int, int] | None:
    """(family, quota, GPUs the *other* pools of the family will hold) for a per-call
    quota check, or None when the family has no quota."""
    quota = next((q for q in quotas if q.family == pool.gpu_family), None)
    if quota is None:
        return None
    others = {p.name for p in pools if p.gpu_family == pool.gpu_family and p.name != pool.name}
    other_gpus = sum(t.target * t.gpus_per_node for t in targets if t.pool in others)
    return quota.family, quota.max_gpus, other_gpus


@dataclass(frozen=True)
class CostSummary:
    """$ over the plan's horizon for the plan and two alternatives, and this run's change."""

    hours: int
    plan: float
    static_peak: float  # every pool at its planned peak all the time
    current: float  # every pool kept at its current size
    change_per_hour: float  # what this run's targets add (negative: save) per hour

    def rows(self) -> list[dict[str, Any]]:
        def row(name: str, cost: float, what: str) -> dict[str, Any]:
            saving = 100.0 * (1 - cost / self.static_peak) if self.static_peak else 0.0
            return {"option": name, "cost_usd": round(cost, 2),
                    "vs_static_peak": f"{-saving:+.1f}%", "what": what}
        return [row("plan", self.plan, "nodes per pool per hour as planned"),
                row("static peak", self.static_peak, "each pool at its planned peak"),
                row("current size", self.current, "each pool kept at today's size")]


def cost_summary(plan: CapacityPlan, pools: Sequence[NodePoolSpec],
                 targets: Sequence[PoolTarget]) -> CostSummary:
    price = {p.name: p.price_per_hour for p in pools}
    hours = plan.hours
    static = sum(max(plan.nodes[p]) * hours * price[p] for p in plan.pools)
    current = sum(p.current_size * hours * price[p.name] for p in pools)
    return CostSummary(hours, plan.cost, static, current,
                       sum(t.cost_change_per_hour for t in targets))
