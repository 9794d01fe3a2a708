"""Consolidate GPU nodes: remove the nodes nobody needs, moving their pods, with approval.

Started by the watcher's `gpuops.node.gpu-idle` and on a schedule. Each run:
1. settles what an earlier run left mid-removal (`scale_in.settle_leftovers`: gpuops' own
   cordon taken back, its record removed; the node is then chosen afresh);
2. reads each AWS-backed pool of the CapacityConfig Block (its nodes, its group's sizes) and
   what the capacity pre-warm plan holds for it — the `target` column of the latest
   `capacity-targets` artifact the pre-warm flow publishes, the most nodes it wants over its
   next lead-time window; a pool without a plan younger than `plan_max_age_s` is held whole;
3. records on each node whose GPUs are spare (no GPU pod, or only GPU pods that may move and
   fit elsewhere) since when they are (`gpuops.io/gpu-unused-since`; cleared when they are
   needed again), so the idle threshold holds across runs;
4. chooses (`tasks/rebalance/consolidation.py`): nodes spare for `idle_for_s` whose pods
   may all move (controller, opt-outs, PodDisruptionBudgets over the whole run) and each
   have a place on a node that stays by the planner's placement, never one the plan holds,
   never below a pool's minimum;
5. asks for approval (which nodes go, which pods move where, GPU-hours and $/h saved), then
   cordons every chosen node first (so pods drained from one never land on the next) and
   removes each through `scale_in.remove_node`: drain through the Eviction API, wait until
   the moved pods' replacements are bound elsewhere, terminate *that* instance with desired
   capacity decremented in the same call. A removal that cannot finish is undone.
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
from gpuops.common.flow_runs import run_is_active
from gpuops.tasks.actions.perform import recording_actions
from gpuops.tasks.actions.removable import node_loads
from gpuops.tasks.actions.scale_in import (
    Removal,
    claim_node,
    remove_node,
    settle_leftovers,
    undo_removal,
)
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
    spare_nodes,
)
from gpuops.tasks.rebalance.from_kube import ClusterView, cluster_view

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
                  view: ClusterView, now: datetime) -> list[PoolView]:
    """Mark the nodes whose GPUs are spare with the time first seen so, unmark the others;
    the views re-read."""
    stamp = now.isoformat()
    nodes = [n for p in pools for n in p.nodes]
    spare = spare_nodes(view, nodes, pods)
    for node in nodes:
        name = node["metadata"]["name"]
        recorded = (node["metadata"].get("annotations") or {}).get(GPU_UNUSED_SINCE)
        if name in spare and parse_since(recorded) is None:
            kube.merge_patch_node(name, {"metadata": {"annotations": {
                GPU_UNUSED_SINCE: stamp}}})
        elif name not in spare and recorded:
            kube.merge_patch_node(name, {"metadata": {"annotations": {
                GPU_UNUSED_SINCE: None}}})
    return [PoolView(p.name, p.desired, p.floor, p.held, p.price_per_hour,
                     tuple(kube.get_node(n["metadata"]["name"]) for n in p.nodes))
            for p in pools]


def _rows(chosen: list[Candidate], kept: list[Kept], dry_run: bool) -> list[dict[str, Any]]:
    verb = "would remove" if dry_run else "remove"
    return ([{"node": c.node, "pool": c.pool, "decision": verb,
              "why": f"GPUs spare since {c.unused_since:%Y-%m-%d %H:%M:%S} UTC; moves "
                     + c.describe_moves(),
              "usd_per_hour_saved": c.price_per_hour, "gpus": c.gpus} for c in chosen]
            + [{"node": k.node, "pool": k.pool, "decision": "keep", "why": k.why,
                "usd_per_hour_saved": 0.0, "gpus": 0} for k in kept])


def approval_request(chosen: list[Candidate], *, idle_for_s: float, source: str
                     ) -> ApprovalRequest:
    """What the approver sees: which node goes, which pod moves where, what it saves."""
    saved = sum(c.price_per_hour for c in chosen)
    gpus = sum(c.gpus for c in chosen)
    moved = sum(len(c.moves) for c in chosen)
    hours = f"{gpus} GPU-hours saved per hour" if gpus else ""
    return ApprovalRequest(
        title=f"GPU consolidation: remove {len(chosen)} node(s)"
              + (f", move {moved} pod(s)" if moved else ""),
        summary="\n".join(f"• {c.node} (pool {c.pool}, {c.gpus} GPU(s)) goes; moves "
                          f"{c.describe_moves()}; GPUs spare since {c.unused_since:%H:%M} UTC"
                          for c in chosen),
        reason=f"Their GPUs have been spare for at least {idle_for_s:.0f}s and every pod on "
               f"them has a place on a node that stays; the capacity plan does not hold "
               f"them ({source}).",
        plan=f"cordon {', '.join(c.node for c in chosen)}; then for each: drain through the "
             "Eviction API, wait for the moved pods' replacements on other nodes, terminate "
             "its instance with its group's desired capacity decremented",
        cost_impact=", ".join(x for x in (f"-{saved:,.2f} $/h" if saved else "", hours) if x)
        or None,
        targets=tuple(f"node/{c.node}" for c in chosen))


@flow(name="gpu-consolidate", log_prints=True)
async def gpu_consolidate(dry_run: bool = False, idle_for_s: float = 1800.0,
                          plan_max_age_s: float = 7200.0, config_block: str = "",
                          aws_block: str = "", cluster_block: str = "", slack_block: str = "",
                          policy_block: str = "", event_id: str = "",
                          now: datetime | None = None):
    """Remove GPU nodes nobody needs, moving their pods (see the module docstring).

    Args:
        dry_run: Report what would be removed; change nothing.
        idle_for_s: How long a node's GPUs must have been spare before it is removed.
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
        view = cluster_view(await asyncio.to_thread(kube.list_nodes), pods,
                            await asyncio.to_thread(kube.list_pdbs))
        if not dry_run:
            pools = await asyncio.to_thread(record_unused, kube, pools, pods, view, now)
        chosen, kept = choose(pools, pods, now=now, idle_for=timedelta(seconds=idle_for_s),
                              view=view)
        await acreate_table_artifact(
            table=_rows(chosen, kept, dry_run) or [{"node": "-", "pool": "-",
                                                    "decision": "-", "why": "no pool node",
                                                    "usd_per_hour_saved": 0.0, "gpus": 0}],
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
        summary["moves"] = {c.node: {m.pod: m.to_node for m in c.moves} for c in chosen}
        if not dry_run:
            approval = await request_approval(
                approval_request(chosen, idle_for_s=idle_for_s, source=source),
                policy=await load_block(ApprovalPolicy, policy_block),
                slack_conn=await load_block(SlackConnection, slack_block))
            if not approval.approved:
                return Completed(name="NotApproved", data=summary,
                                 message=not_approved_message(approval))
            changed = changed_since_approval(chosen, await asyncio.to_thread(kube.list_pods))
            if changed:
                return Completed(name="Diverged", data={**summary, "diverged": changed},
                                 message="stopped before changing anything, the cluster "
                                 "changed since the approval: " + "; ".join(changed))
        removals = await remove_chosen(kube, aws, chosen, {p.name: p.floor for p in pools},
                                       dry_run=dry_run, run_id=run_id)
        for removal in removals:
            log.info("%s", removal.describe())
        summary["removed"] = [r.node for r in removals if r.outcome == "removed"]
        summary["outcomes"] = {r.node: r.outcome for r in removals}
        return Completed(data=summary, message="; ".join(r.describe() for r in removals)
                         + (f" (-{saved:,.2f} $/h)" if saved and not dry_run else ""))


def changed_since_approval(chosen: list[Candidate], pods: list[dict[str, Any]]) -> list[str]:
    """The approved nodes whose drain would now move other pods than the approval showed
    (a pod arrived or left meanwhile): the approval was for another plan."""
    nodes = [{"metadata": {"name": c.node}} for c in chosen]
    now = {load.node: set(load.gpu_pods + load.other_pods) for load in node_loads(nodes, pods)}
    changed = []
    for c in chosen:
        approved = {m.pod for m in c.moves}
        if now[c.node] != approved:
            came, went = sorted(now[c.node] - approved), sorted(approved - now[c.node])
            changed.append(f"node {c.node}: " + "; ".join(
                x for x in (f"now also runs {', '.join(came)}" if came else "",
                            f"no longer runs {', '.join(went)}" if went else "") if x))
    return changed


async def remove_chosen(kube: Kube, aws: Aws, chosen: list[Candidate], floors: dict[str, int],
                        *, dry_run: bool, run_id: str) -> list[Removal]:
    """Claim (record and cordon) every chosen node, then remove them one by one; a claimed
    node whose removal never started (a step failed before it) is given back."""
    claimed: dict[str, bool] = {}
    removals: list[Removal] = []
    try:
        if not dry_run:
            for c in chosen:
                claimed[c.node] = await claim_node(kube, c.node, run_id=run_id,
                                                   dry_run=False)
        for c in chosen:
            removals.append(await remove_node(kube, aws, c.node, pool=c.pool,
                                              floor=floors[c.pool], dry_run=dry_run,
                                              run_id=run_id, await_replacements=True))
    finally:
        started = {r.node for r in removals}
        for node, by_us in claimed.items():
            if node not in started:
                await undo_removal(kube, node, run_id, cordoned_by_gpuops=by_us)
    return removals
