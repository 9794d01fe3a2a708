"""Node pool size, as the capacity Block configures each pool (EKS managed node group or
Auto Scaling group), through the same safe actions capacity pre-warm uses.

An EKS node group under cluster-autoscaler is sized by its `minSize` (a `desiredSize` set by
hand is put back by the autoscaler; nodegroups.py says why); an Auto Scaling group grows by
its desired capacity and shrinks by removing chosen empty nodes (`ScaleInPool`), never by a
bare decrease that lets AWS pick a busy node. A pool of placeholder pods is the capacity
plan's to size, not a runbook's. Every size is checked against the group's own min/max
before anything changes (`LimitViolation` names the field), and so are the capacity
Block's own limits: the pool's `min_size`/`max_size` (what Karpenter calls a NodePool's
`limits`, cluster-autoscaler a node group's `--nodes=min:max`) and the GPU quota of its
family (`quotas`: the account's service quota, as cluster-autoscaler's `--gpu-total` caps a
cluster), counting what the family's other pools hold now. What the new size costs, from the
Block's `price_per_hour`, is part of the step's planned change, so an approval shows it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gpuops.common.errors import LimitViolation, PermanentError
from gpuops.runbooks.bindings import Prediction, predicts, runs
from gpuops.runbooks.catalog import PoolSize, ScalePoolArgs
from gpuops.runbooks.context import StepContext
from gpuops.tasks.actions.nodepools import SetAsgDesiredCapacity, SetNodeGroupMinSize
from gpuops.tasks.actions.perform import SafeAction, perform
from gpuops.tasks.actions.scale_in import ScaleInPool
from gpuops.tasks.capacity.pool_actions import family_budget
from gpuops.tasks.capacity.pool_state import read_pool_states
from gpuops.tasks.clients.aws import GpuBudget, GroupScaling


@dataclass(frozen=True)
class _Sizing:
    group: GroupScaling
    action: SafeAction
    current: int  # nodes the pool converges to now
    cost: str  # the new size's price, for the plan


def cost_line(size: int, current: int, price: float, instance_type: str,
              budget: GpuBudget | None) -> str:
    """`2 x p4d.24xlarge at $32.77/h = $65.54/h (now 1: $32.77/h, +$32.77/h)`, and the
    family's GPU quota after the change when it has one."""
    now, then = current * price, size * price
    text = (f"{size} x {instance_type} at ${price:,.2f}/h = ${then:,.2f}/h (now {current}: "
            f"${now:,.2f}/h, {'+' if then >= now else '-'}${abs(then - now):,.2f}/h)")
    if budget is not None:
        used = size * budget.gpus_per_node + budget.other_pools_gpus
        text += f"; GPU quota {budget.family}: {used} of {budget.max_gpus} GPUs"
    return text


def _plan(ctx: StepContext, args: ScalePoolArgs) -> _Sizing:
    if ctx.capacity is None or ctx.aws is None:
        raise PermanentError("scale-node-pool needs the capacity Block (its pools) and an "
                             "AWS connection: give the run `capacity_block` and `aws_block`")
    names = [p.name for p in ctx.capacity.pools]
    if args.pool not in names:
        raise LimitViolation(f"{args.pool!r} is not a pool of the capacity Block (pools: "
                             f"{', '.join(names)})", field="pool")
    pool = ctx.capacity.pool(args.pool)
    eks_cluster = ctx.capacity.eks_cluster_name or ctx.kube.cluster_name
    cluster = ctx.kube.cluster_name
    if pool.backing == "eks":
        group = ctx.aws.describe_nodegroup(eks_cluster, pool.group_name)
        action: SafeAction = SetNodeGroupMinSize(ctx.aws, eks_cluster, pool.group_name,
                                                 pool.name, args.size, cluster_name=cluster)
    elif pool.backing == "asg":
        group = ctx.aws.describe_asg(pool.group_name)
        action = SetAsgDesiredCapacity(ctx.aws, pool.group_name, pool.name, args.size,
                                       cluster_name=cluster) \
            if args.size >= group.desired_size else \
            ScaleInPool(ctx.kube, ctx.aws, pool.name, pool.group_name, pool.selector,
                        args.size, max(pool.min_size, group.min_size))
    else:
        raise PermanentError(f"pool {pool.name!r} is held by placeholder pods, which the "
                             "capacity plan sizes; a runbook resizes node groups only")
    if args.size > group.max_size:
        raise LimitViolation(f"{args.size} is above {pool.group_name}'s maxSize "
                             f"{group.max_size}", field="size")
    if pool.backing == "asg" and args.size < group.min_size:  # EKS: the new minSize itself
        raise LimitViolation(f"{args.size} is below {pool.group_name}'s MinSize "
                             f"{group.min_size}", field="size")
    if not pool.min_size <= args.size <= pool.max_size:
        raise LimitViolation(f"{args.size} is outside pool {pool.name}'s limits "
                             f"{pool.min_size}..{pool.max_size} (the capacity Block's "
                             "min_size/max_size)", field="size")
    states = read_pool_states(ctx.capacity.pools, aws=ctx.aws, kube=ctx.kube,
                              eks_cluster=eks_cluster)
    budget = family_budget(ctx.capacity, pool.name, states)
    if budget is not None:
        budget.check(args.size, "size")
    current = states[pool.name].current_size
    return _Sizing(group, action, current, cost_line(args.size, current, pool.price_per_hour,
                                                     pool.instance_type, budget))


def _previous(group: GroupScaling, action: SafeAction) -> int:
    return group.min_size if isinstance(action, SetNodeGroupMinSize) else group.desired_size


@runs("scale-node-pool")
async def scale_pool(ctx: StepContext, args: ScalePoolArgs) -> PoolSize:
    sizing = await asyncio.to_thread(_plan, ctx, args)
    action = sizing.action
    if isinstance(action, ScaleInPool):
        lines = await action.run(dry_run=False)
        description = "; ".join(lines) or action.describe()
    else:
        description = (await perform(action, dry_run=False)).description
    return PoolSize(previous=_previous(sizing.group, action), size=args.size,
                    description=description, cost=sizing.cost)


@predicts("scale-node-pool")
async def predict_scale_pool(ctx: StepContext, args: ScalePoolArgs) -> Prediction:
    sizing = await asyncio.to_thread(_plan, ctx, args)
    holds = await asyncio.to_thread(sizing.action.holds)
    described = sizing.action.describe()
    return Prediction(PoolSize(previous=_previous(sizing.group, sizing.action), size=args.size,
                               description=described, cost=sizing.cost),
                      () if holds else (f"{described}: {sizing.cost}",))
