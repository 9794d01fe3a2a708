"""A capacity plan's pool targets as node pool actions, for `perform`.

Why apart from the actions themselves (tasks/actions/nodepools.py): choosing the action
per pool (placeholder pods, an EKS node group's minSize, an ASG's desired capacity, a warm
pool) and the GPU budget each may use is capacity's decision; the actions only make a
size hold. An ASG's decrease is a scale-in of chosen empty nodes (`ScaleInPool`): a bare
lower desired capacity lets AWS's termination policy pick the instance, busy or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuops.blocks.capacity import CapacityConfig
from gpuops.tasks.actions.nodepools import (
    PlaceholderCapacity,
    SetAsgDesiredCapacity,
    SetAsgWarmPool,
    SetNodeGroupMinSize,
)
from gpuops.tasks.actions.perform import SafeAction
from gpuops.tasks.actions.scale_in import ScaleInPool
from gpuops.tasks.capacity.pending import PoolRaise
from gpuops.tasks.capacity.plan import CapacityPlan
from gpuops.tasks.capacity.prewarm import PoolState, PoolTarget, budget_for, placeholder_pods
from gpuops.tasks.clients.aws import Aws, GpuBudget
from gpuops.tasks.clients.kube import Kube


def prewarm_actions(config: CapacityConfig, plan: CapacityPlan, targets: Sequence[PoolTarget],
                    states: Mapping[str, PoolState], *, aws: Aws | None, kube: Kube,
                    eks_cluster: str) -> list[SafeAction]:
    """One action per pool for its target (and the warm pool where asked), decreases first
    so that quota freed by one pool is there for another."""
    specs = config.node_pool_specs({name: s.current_size for name, s in states.items()})
    quotas = config.gpu_quotas()
    spec_of = {s.name: s for s in specs}
    actions: list[tuple[int, SafeAction]] = []
    for target in targets:
        pool = config.pool(target.pool)
        budget_args = budget_for(spec_of[pool.name], targets, specs, quotas)
        budget = GpuBudget(budget_args[0], budget_args[1], pool.gpus_per_node,
                           budget_args[2]) if budget_args else None
        action: SafeAction
        if pool.backing == "placeholder":
            per_pod = config.placeholder.gpus_per_pod or pool.gpus_per_node
            action = PlaceholderCapacity(
                kube, pool.name, config.placeholder.namespace,
                placeholder_pods(target.target, pool.gpus_per_node,
                                 states[pool.name].gpus_in_use, per_pod),
                per_pod, pool.selector, config.placeholder.priority_class,
                config.placeholder.image)
        else:
            assert aws is not None
            if pool.backing == "eks":
                action = SetNodeGroupMinSize(aws, eks_cluster, pool.group_name, pool.name,
                                             target.target, budget,
                                             cluster_name=kube.cluster_name)
            elif target.change < 0:  # chosen empty nodes removed, never a bare decrease
                action = ScaleInPool(kube, aws, pool.name, pool.group_name, pool.selector,
                                     target.target, pool.min_size)
            else:
                action = SetAsgDesiredCapacity(aws, pool.group_name, pool.name,
                                               target.target, budget,
                                               cluster_name=kube.cluster_name)
        actions.append((target.change, action))
        if pool.warm_pool and aws is not None:
            warm = max(0, max(plan.nodes[pool.name]) - target.target)
            actions.append((target.change, SetAsgWarmPool(aws, pool.group_name, pool.name,
                                                          warm, kube.cluster_name)))
    return [a for _, a in sorted(actions, key=lambda pair: pair[0] > 0)]


def family_budget(config: CapacityConfig, pool: str, states: Mapping[str, PoolState]
                  ) -> GpuBudget | None:
    """The GPU quota of `pool`'s family and what its other pools hold now, or None."""
    this = config.pool(pool)
    quota = next((q for q in config.quotas if q.family == this.family), None)
    if quota is None:
        return None
    others = sum(states[p.name].current_size * p.gpus_per_node for p in config.pools
                 if p.family == this.family and p.name != pool and p.name in states)
    return GpuBudget(quota.family, quota.max_gpus, this.gpus_per_node, others)


def raise_actions(config: CapacityConfig, raises: Sequence[PoolRaise],
                  states: Mapping[str, PoolState], *, aws: Aws, kube: Kube,
                  eks_cluster: str) -> list[SafeAction]:
    """One action per pool raised for pending pods, as pre-warm raises a pool: an EKS node
    group's minSize (desired follows), an ASG's desired capacity; the quota checked by AWS's
    wrapper before the call."""
    actions: list[SafeAction] = []
    for r in raises:
        if r.change <= 0:
            continue
        pool = config.pool(r.pool)
        budget = family_budget(config, r.pool, states)
        if pool.backing == "eks":
            actions.append(SetNodeGroupMinSize(aws, eks_cluster, pool.group_name, pool.name,
                                               r.target, budget,
                                               cluster_name=kube.cluster_name))
        elif pool.backing == "asg":
            actions.append(SetAsgDesiredCapacity(aws, pool.group_name, pool.name, r.target,
                                                 budget, cluster_name=kube.cluster_name))
    return actions
