"""Capacity for pending GPU pods: raise the node pool whose nodes would hold pods that fit no
node of the cluster, even empty.

Started by `gpuops.gpu.capacity-needed`, which the GPU rebalance emits when a repack cannot
help because the pending shape fits no node (`flows/gpu_rebalance.py`); the event names the
pods. Each run:
1. re-reads those pods and keeps the ones still Pending and asking for GPUs (a stale or
   replayed event finds them scheduled or gone, and does nothing);
2. reads each AWS-backed pool of the CapacityConfig Block (its group's sizes, its nodes) and
   decides which pool's new nodes would take each pod and how many nodes that needs, nodes
   already requested but not Ready counted first (`tasks/capacity/pending.py`); pools sized
   by placeholder pods are left to their autoscaler, which sees the pending pods itself;
3. raises those pools as pre-warm does (an EKS node group's minSize, an ASG's desired
   capacity; never above the pool's maximum or the family's GPU quota), through
   `perform()`, asking for approval when the raise adds more than the config's
   `approval_cost_per_hour`.
`mode` "dry-run" (the served deployment's unless `gpuops up --capacity-mode apply`) reports
what it would raise and changes nothing. Artifact: `capacity-for-pending` (per pod: the pool,
or why none).
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_table_artifact
from prefect.states import Completed

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import AwsConnection, KubernetesCluster, SlackConnection
from gpuops.blocks.loading import load_block
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import ConfigError, KubeNotFound
from gpuops.common.events import event_name
from gpuops.flows.capacity_prewarm import VERIFY_TIMEOUT_S, CapacityMode
from gpuops.tasks.actions.perform import hold_targets, perform, recording_actions
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import not_approved_message, request_approval
from gpuops.tasks.capacity.pending import (
    PendingPod,
    PoolOffer,
    PoolRaise,
    pending_pod,
    plan_raises,
    pool_offer,
)
from gpuops.tasks.capacity.pool_actions import family_budget, raise_actions
from gpuops.tasks.capacity.pool_state import read_pool_states
from gpuops.tasks.capacity.prewarm import PoolState
from gpuops.tasks.clients.aws import Aws
from gpuops.tasks.clients.kube import Kube

CAPACITY_NEEDED = event_name("gpu", "capacity-needed")


def parse_pods(pods: list[str]) -> list[tuple[str, str]]:
    """`namespace/name` entries; a bad one is refused naming its index."""
    keys = []
    for i, key in enumerate(pods):
        namespace, _, name = str(key).partition("/")
        if not namespace or not name or "/" in name:
            raise ConfigError(f"pods[{i}]", f"{key!r} is not namespace/name")
        keys.append((namespace, name))
    return keys


def read_pending(kube: Kube, keys: list[tuple[str, str]]) -> tuple[list[PendingPod], list[str]]:
    """The named pods still Pending with GPUs, and one line per pod that no longer is."""
    pending, gone = [], []
    for namespace, name in keys:
        try:
            pod = pending_pod(kube.get_pod(namespace, name))
        except KubeNotFound:
            gone.append(f"{namespace}/{name}: gone")
            continue
        if pod is None:
            gone.append(f"{namespace}/{name}: no longer a pending GPU pod")
        else:
            pending.append(pod)
    return pending, gone


def read_offers(config: CapacityConfig, kube: Kube, states: dict[str, PoolState]
                ) -> list[PoolOffer]:
    offers = []
    for pool in config.pools:
        if pool.backing == "placeholder":
            continue
        state = states[pool.name]
        budget = family_budget(config, pool.name, states)
        left = None if budget is None else (budget.max_gpus - budget.other_pools_gpus
                                            - state.current_size * pool.gpus_per_node)
        offers.append(pool_offer(
            name=pool.name, gpus_per_node=pool.gpus_per_node, gpu_product=pool.gpu_product,
            instance_type=pool.instance_type, selector=pool.selector,
            price_per_hour=pool.price_per_hour, desired=state.current_size,
            max_size=min(pool.max_size, state.aws_max if state.aws_max is not None
                         else pool.max_size),
            nodes=kube.list_nodes(label_selector=pool.selector), quota_gpus_left=left))
    return offers


def _rows(pending: list[PendingPod], raises: list[PoolRaise], unserved: dict[str, str],
          dry_run: bool) -> list[dict[str, Any]]:
    to = {key: r for r in raises for key in r.pods}
    rows = []
    for pod in pending:
        r = to.get(pod.key)
        rows.append({"pod": pod.key, "gpus": pod.gpus, "pool": r.pool if r else "",
                     "pool size": f"{r.current} -> {r.target}" if r else "",
                     "decision": unserved.get(pod.key) or (
                         ("would raise" if dry_run else "raise") if r and r.change > 0
                         else "; ".join(r.notes) if r else "")})
    return rows


def describe(r: PoolRaise) -> str:
    notes = f" ({'; '.join(r.notes)})" if r.notes else ""
    return (f"pool {r.pool}: {r.current} -> {r.target} node(s) for {', '.join(r.pods)} "
            f"({r.nodes_for_pods} new node(s) of {r.gpus_per_node} GPUs hold them){notes}")


@flow(name="capacity-for-pending", log_prints=True)
async def capacity_for_pending(pods: list[str] | None = None, mode: CapacityMode = "dry-run",
                               config_block: str = "", aws_block: str = "",
                               cluster_block: str = "", slack_block: str = "",
                               policy_block: str = "", event_id: str = ""):
    """Raise the node pools that would hold Pending GPU pods no node fits (see the module
    docstring).

    Args:
        pods: The pending pods, `namespace/name` (the event's `payload.pods`).
        mode: "dry-run" reports what it would raise and changes nothing; "apply" raises
            pools (asking for approval above the config's approval_cost_per_hour).
        config_block: The CapacityConfig Block naming the pools (empty: its defaults).
        aws_block: The AwsConnection Block.
        cluster_block: The KubernetesCluster Block.
        slack_block: The SlackConnection Block approvals are posted with.
        policy_block: The ApprovalPolicy Block.
        event_id: The `gpuops.gpu.capacity-needed` event that started the run, if any.
    """
    log = get_run_logger()
    keys = parse_pods(list(pods or []))
    dry_run = mode == "dry-run"
    log.info("mode: %s%s", mode, f"; triggered by event {event_id}" if event_id else "")
    config: CapacityConfig = await load_block(CapacityConfig, config_block)
    cluster = await load_block(KubernetesCluster, cluster_block)
    kube = cluster.kube()
    aws = Aws.from_connection(await load_block(AwsConnection, aws_block)) \
        if any(p.backing != "placeholder" for p in config.pools) else None
    eks_cluster = config.eks_cluster_name or cluster.cluster_name

    async with recording_actions():
        pending, gone = await asyncio.to_thread(read_pending, kube, keys)
        summary: dict[str, Any] = {"mode": mode, "pending": [p.key for p in pending],
                                   "gone": gone}
        if not pending:
            return Completed(name="NothingPending", data=summary, message=(
                "no pod to make room for: " + ("; ".join(gone) or "the event named none")))
        states = await asyncio.to_thread(read_pool_states, config.pools, aws=aws, kube=kube,
                                         eks_cluster=eks_cluster)
        offers = await asyncio.to_thread(read_offers, config, kube, states)
        raises, unserved = plan_raises(pending, offers)
        await acreate_table_artifact(table=_rows(pending, raises, unserved, dry_run),
                                     key="capacity-for-pending",
                                     description="Pending GPU pods no node fits: the pool "
                                     "raised for each, or why none")
        summary.update({"targets": {r.pool: r.target for r in raises},
                        "unserved": unserved, "raises": [describe(r) for r in raises]})
        for key, why in sorted(unserved.items()):
            log.warning("%s: %s", key, why)
        actions = raise_actions(config, raises, states, aws=aws, kube=kube,
                                eks_cluster=eks_cluster) if aws is not None else []
        needed = [a for a in actions if not await asyncio.to_thread(a.holds)]
        if not needed:
            return Completed(name="NoChange", data=summary, message="no pool to raise: " + (
                "; ".join([describe(r) for r in raises]
                          + [f"{k}: {w}" for k, w in sorted(unserved.items())])))
        cost = sum(r.cost_change_per_hour for r in raises)
        if not dry_run and cost > config.approval_cost_per_hour:
            approval = await request_approval(ApprovalRequest(
                title=f"Capacity for pending GPU pods: {cost:+,.2f} $/h",
                summary="\n".join(f"• {describe(r)}" for r in raises if r.change > 0),
                reason=f"{len(pending)} GPU pod(s) Pending fit no node of the cluster, even "
                       "empty; no repack can place them.",
                plan="\n".join(f"• {a.describe()}" for a in needed),
                cost_impact=f"{cost:+,.2f} $/h",
                targets=tuple(sorted({a.target for a in needed}))),
                policy=await load_block(ApprovalPolicy, policy_block),
                slack_conn=await load_block(SlackConnection, slack_block))
            if not approval.approved:
                return Completed(name="NotApproved", data=summary,
                                 message=not_approved_message(approval))
        async with hold_targets(sorted({a.target for a in needed})) if not dry_run \
                else nullcontext():
            for action in needed:
                await perform(action, dry_run=dry_run, verify_timeout_s=VERIFY_TIMEOUT_S)
        verb = "dry run: would raise" if dry_run else "raised"
        return Completed(data={**summary, "applied": not dry_run}, message=(
            f"{verb} {len(needed)} pool(s) ({cost:+,.2f} $/h): "
            + "; ".join(describe(r) for r in raises if r.change > 0)
            + "".join(f"; {k}: {w}" for k, w in sorted(unserved.items()))))
