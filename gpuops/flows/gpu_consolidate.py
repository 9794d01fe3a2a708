"""Consolidate idle GPU nodes: remove the nodes nobody uses, with approval.

Started by the watcher's `gpuops.node.gpu-idle` and on a schedule. Each run:
1. settles what an earlier run left mid-removal (`scale_in.settle_leftovers`: gpuops' own
   cordon taken back, its record removed; the node is then chosen afresh);
2. reads each AWS-backed pool of the CapacityConfig Block (its nodes, its group's sizes) and
   what the capacity pre-warm plan holds for it — the `target` column of the latest
   `capacity-targets` artifact the pre-warm flow publishes, the most nodes it wants over its
   next lead-time window; a pool without a plan younger than `plan_max_age_s` is held whole;
3. records on each node without GPU pods since when it has none (`gpuops.io/gpu-unused-since`;
   cleared when it is used again), so the idle threshold holds across runs;
4. chooses (`tasks/rebalance/consolidation.py`): nodes without GPU pods for `idle_for_s`
   whose other pods (if any) may move and fit elsewhere by the planner's placement, never one
   the plan holds, never below a pool's minimum;
5. asks for approval (which nodes, what moves, $/h saved when the pool has a price), then
   removes each through `scale_in.remove_node`: cordon, drain through the Eviction API,
   terminate *that* instance with desired capacity decremented in the same call.
Dry-run reports the choice and changes nothing (no record, no approval, no change).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import Artifact, acreate_table_artifact
from prefect.runtime import flow_run as runtime_flow_run
from prefect.states import Completed

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import AwsConnection, KubernetesCluster, SlackConnection
from gpuops.blocks.loading import load_block
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.events import event_name
from gpuops.tasks.actions.perform import recording_actions
from gpuops.tasks.actions.removable import node_loads
from gpuops.tasks.actions.scale_in import remove_node, settle_leftovers
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import not_approved_message, request_approval
from gpuops.tasks.clients.aws import Aws
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rebalance.consolidation import (
    GPU_UNUSED_SINCE,
    Candidate,
    Kept,
    PoolView,
    choose,
    held_by_plan,
    parse_since,
)
from gpuops.tasks.rebalance.from_kube import cluster_view
from gpuops.tasks.rebalance.reading import run_is_active

GPU_IDLE = event_name("node", "gpu-idle")
PLAN_KEY = "capacity-targets"  # the pre-warm flow's per-pool targets (flows/capacity_prewarm)


async def read_plan(max_age_s: float, now: datetime) -> tuple[dict[str, int], str]:
    """(pool -> nodes the capacity plan holds, where that came from); empty when the latest
    plan is missing or older than `max_age_s`."""
    artifact = await Artifact.aget(PLAN_KEY)
    if artifact is None:
        return {}, f"no `{PLAN_KEY}` artifact: every pool held as it is"
    made = artifact.updated or artifact.created
    if made is not None and (now - made).total_seconds() > max_age_s:
        return {}, (f"the latest `{PLAN_KEY}` is from {made:%Y-%m-%d %H:%M} UTC, older than "
                    f"{max_age_s:.0f}s: every pool held as it is")
    rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    if not isinstance(rows, list):
        raise TypeError(f"`{PLAN_KEY}` artifact {artifact.id}: a table (list of rows) was "
                        f"expected, got {type(rows).__name__}")
    return held_by_plan(rows), f"capacity plan of flow run {artifact.flow_run_id}"


def read_pools(config: CapacityConfig, kube: Kube, aws: Aws, eks_cluster: str,
               held: dict[str, int]) -> list[PoolView]:
    views = []
    for pool in config.pools:
        if pool.backing == "placeholder":
            continue  # no group to remove a node from
        nodes = tuple(kube.list_nodes(label_selector=pool.selector))
        group = (aws.describe_nodegroup(eks_cluster, pool.group_name) if pool.backing == "eks"
                 else aws.describe_asg(pool.group_name))
        views.append(PoolView(pool.name, group.effective_desired,
                              max(pool.min_size, group.min_size), held.get(pool.name),
                              pool.price_per_hour, nodes))
    return views


def record_unused(kube: Kube, pools: list[PoolView], pods: list[dict[str, Any]],
                  now: datetime) -> list[PoolView]:
    """Mark nodes without GPU pods with the time first seen so, unmark the others; the
    views re-read."""
    stamp = now.isoformat()
    for pool in pools:
        for load in node_loads(list(pool.nodes), pods):
            node = next(n for n in pool.nodes if n["metadata"]["name"] == load.node)
            recorded = (node["metadata"].get("annotations") or {}).get(GPU_UNUSED_SINCE)
            if not load.gpu_pods and parse_since(recorded) is None:
                kube.merge_patch_node(load.node, {"metadata": {"annotations": {
                    GPU_UNUSED_SINCE: stamp}}})
            elif load.gpu_pods and recorded:
                kube.merge_patch_node(load.node, {"metadata": {"annotations": {
                    GPU_UNUSED_SINCE: None}}})
    return [PoolView(p.name, p.desired, p.floor, p.held, p.price_per_hour,
                     tuple(kube.get_node(n["metadata"]["name"]) for n in p.nodes))
            for p in pools]


def _rows(chosen: list[Candidate], kept: list[Kept], dry_run: bool) -> list[dict[str, Any]]:
    verb = "would remove" if dry_run else "remove"
    return ([{"node": c.node, "pool": c.pool, "decision": verb,
              "why": f"no GPU pod since {c.unused_since:%Y-%m-%d %H:%M:%S} UTC; moves "
                     + (", ".join(c.moves) or "nothing"),
              "usd_per_hour_saved": c.price_per_hour} for c in chosen]
            + [{"node": k.node, "pool": k.pool, "decision": "keep", "why": k.why,
                "usd_per_hour_saved": 0.0} for k in kept])


@flow(name="gpu-consolidate", log_prints=True)
async def gpu_consolidate(dry_run: bool = False, idle_for_s: float = 1800.0,
                          plan_max_age_s: float = 7200.0, config_block: str = "",
                          aws_block: str = "", cluster_block: str = "", slack_block: str = "",
                          policy_block: str = "", event_id: str = "",
                          now: datetime | None = None):
    """Remove GPU nodes nobody uses (see the module docstring).

    Args:
        dry_run: Report what would be removed; change nothing.
        idle_for_s: How long a node must have been unused before it is removed.
        plan_max_age_s: The oldest capacity plan still read (older: every pool held).
        config_block: The CapacityConfig Block naming the pools (empty: its defaults).
        aws_block: The AwsConnection Block.
        cluster_block: The KubernetesCluster Block.
        slack_block: The SlackConnection Block approvals are posted with.
        policy_block: The ApprovalPolicy Block.
        event_id: The `gpuops.node.gpu-idle` event that started the run, if any.
        now: The time to judge idleness at (tests; empty: now).
    """
    log = get_run_logger()
    if idle_for_s < 0 or plan_max_age_s < 0:
        raise ValueError(f"idle_for_s ({idle_for_s}) and plan_max_age_s ({plan_max_age_s}) "
                         "must be >= 0")
    if event_id:
        log.info("triggered by event %s", event_id)
    now = (now or datetime.now(UTC)).astimezone(UTC)
    config: CapacityConfig = await load_block(CapacityConfig, config_block)
    cluster = await load_block(KubernetesCluster, cluster_block)
    kube = cluster.kube()
    aws = Aws.from_connection(await load_block(AwsConnection, aws_block))
    eks_cluster = config.eks_cluster_name or cluster.cluster_name
    run_id = str(runtime_flow_run.id or "no-flow-run")

    async with recording_actions():
        pool_nodes = [n for p in config.pools if p.backing != "placeholder"
                      for n in await asyncio.to_thread(kube.list_nodes,
                                                       label_selector=p.selector)]
        settled = await settle_leftovers(kube, aws, pool_nodes, run_active=run_is_active,
                                         dry_run=dry_run, run_id=run_id)
        for line in settled:
            log.warning("%s", line)
        held, source = await read_plan(plan_max_age_s, now)
        log.info("capacity plan: %s", source)
        pools = await asyncio.to_thread(read_pools, config, kube, aws, eks_cluster, held)
        pods = await asyncio.to_thread(kube.list_pods)
        if not dry_run:
            pools = await asyncio.to_thread(record_unused, kube, pools, pods, now)
        view = cluster_view(await asyncio.to_thread(kube.list_nodes), pods,
                            await asyncio.to_thread(kube.list_pdbs))
        chosen, kept = choose(pools, pods, now=now, idle_for=timedelta(seconds=idle_for_s),
                              view=view)
        await acreate_table_artifact(
            table=_rows(chosen, kept, dry_run) or [{"node": "-", "pool": "-",
                                                    "decision": "-", "why": "no pool node",
                                                    "usd_per_hour_saved": 0.0}],
            key="gpu-consolidation", description=f"GPU consolidation ({source})")
        summary: dict[str, Any] = {"dry_run": dry_run, "chosen": [c.node for c in chosen],
                                   "kept": {k.node: k.why for k in kept}, "plan": source,
                                   "settled": settled}
        if not chosen:
            return Completed(name="NothingToConsolidate", data=summary,
                             message="no node to remove: " + "; ".join(
                                 f"{k.node}: {k.why}" for k in kept) if kept else
                             "no node to remove: no pool node")
        saved = sum(c.price_per_hour for c in chosen)
        if not dry_run:
            approval = await request_approval(ApprovalRequest(
                title=f"GPU consolidation: remove {len(chosen)} idle node(s)",
                summary="\n".join(f"• {c.node} (pool {c.pool}): moves "
                                  f"{', '.join(c.moves) or 'nothing'}; no GPU pod since "
                                  f"{c.unused_since:%H:%M} UTC" for c in chosen),
                reason=f"No GPU in use for at least {idle_for_s:.0f}s; the capacity plan "
                       f"does not hold them ({source}).",
                plan="\n".join(f"cordon, drain, terminate {c.node}'s instance with its "
                               f"group's desired capacity decremented" for c in chosen),
                cost_impact=f"-{saved:,.2f} $/h" if saved else None,
                targets=tuple(f"node/{c.node}" for c in chosen)),
                policy=await load_block(ApprovalPolicy, policy_block),
                slack_conn=await load_block(SlackConnection, slack_block))
            if not approval.approved:
                return Completed(name="NotApproved", data=summary,
                                 message=not_approved_message(approval))
        floors = {p.name: p.floor for p in pools}
        removals = []
        for c in chosen:
            removal = await remove_node(kube, aws, c.node, pool=c.pool, floor=floors[c.pool],
                                        dry_run=dry_run, run_id=run_id)
            removals.append(removal)
            log.info("%s", removal.describe())
        summary["removed"] = [r.node for r in removals if r.outcome == "removed"]
        summary["outcomes"] = {r.node: r.outcome for r in removals}
        return Completed(data=summary, message="; ".join(r.describe() for r in removals)
                         + (f" (-{saved:,.2f} $/h)" if saved and not dry_run else ""))

