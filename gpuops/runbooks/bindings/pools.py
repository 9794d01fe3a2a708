"""Node pool size, as the capacity Block configures each pool (EKS managed node group or
Auto Scaling group), through the same safe actions capacity pre-warm uses.

An EKS node group under cluster-autoscaler is sized by its `minSize` (a `desiredSize` set by
hand is put back by the autoscaler; nodegroups.py says why); an Auto Scaling group grows by
its desired capacity and shrinks by removing chosen empty nodes (`ScaleInPool`), never by a
bare decrease that lets AWS pick a busy node. A pool of placeholder pods is the capacity
plan's to size, not a runbook's. Every size is checked against the group's own min/max
before anything changes (`LimitViolation` names the field).
"""

from __future__ import annotations

import asyncio

from gpuops.common.errors import LimitViolation, PermanentError
from gpuops.runbooks.bindings import Prediction, predicts, runs
from gpuops.runbooks.catalog import PoolSize, ScalePoolArgs
from gpuops.runbooks.context import StepContext
from gpuops.tasks.actions.nodepools import SetAsgDesiredCapacity, SetNodeGroupMinSize
from gpuops.tasks.actions.perform import SafeAction, perform
from gpuops.tasks.actions.scale_in import ScaleInPool
from gpuops.tasks.clients.aws import GroupScaling


def _plan(ctx: StepContext, args: ScalePoolArgs) -> tuple[GroupScaling, SafeAction]:
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
    return group, action


def _previous(group: GroupScaling, action: SafeAction) -> int:
    return group.min_size if isinstance(action, SetNodeGroupMinSize) else group.desired_size


@runs("scale-node-pool")
async def scale_pool(ctx: StepContext, args: ScalePoolArgs) -> PoolSize:
    group, action = await asyncio.to_thread(_plan, ctx, args)
    if isinstance(action, ScaleInPool):
        lines = await action.run(dry_run=False)
        description = "; ".join(lines) or action.describe()
    else:
        description = (await perform(action, dry_run=False)).description
    return PoolSize(previous=_previous(group, action), size=args.size,
                    description=description)


@predicts("scale-node-pool")
async def predict_scale_pool(ctx: StepContext, args: ScalePoolArgs) -> Prediction:
    group, action = await asyncio.to_thread(_plan, ctx, args)
    holds = await asyncio.to_thread(action.holds)
    return Prediction(PoolSize(previous=_previous(group, action), size=args.size,
                               description=action.describe()),
                      () if holds else (action.describe(),))
