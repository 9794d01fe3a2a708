"""Cordon and drain a GPU node, with approval: the safe-action layer end to end.

Plans what `kubectl drain` would do, asks for approval (Slack buttons or the Prefect UI),
then cordons and evicts through the Eviction API (PodDisruptionBudgets honoured), holding
the node's concurrency slot for the whole sequence. Dry-run reports and changes nothing.
"""

from __future__ import annotations

from contextlib import nullcontext

from prefect import flow
from prefect.artifacts import acreate_markdown_artifact
from prefect.states import Completed

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.loading import load_block
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import KubeTooManyRequests
from gpuops.tasks.actions.drain import plan_drain
from gpuops.tasks.actions.kube import CordonNode, EvictPod
from gpuops.tasks.actions.perform import hold_targets, perform, recording_actions
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import not_approved_message, request_approval


@flow(name="drain-node", log_prints=True)
async def drain_node(node: str, reason: str = "maintenance", evict: bool = True,
                     dry_run: bool = False, eviction_attempts: int = 3,
                     cluster_block: str = "", slack_block: str = "", policy_block: str = ""):
    cluster = await load_block(KubernetesCluster, cluster_block)
    kube = cluster.kube()
    pods = kube.list_pods(field_selector=f"spec.nodeName={node}")
    plan = plan_drain(node, pods if evict else [])
    await acreate_markdown_artifact(markdown=f"# Drain {node}\n\nReason: {reason}\n\n"
                                    f"```\n{plan.describe()}\n```", key=None,
                                    description="The drain plan")
    async with recording_actions():
        if not dry_run:
            slack_conn = await load_block(SlackConnection, slack_block)
            policy = await load_block(ApprovalPolicy, policy_block)
            approval = await request_approval(ApprovalRequest(
                title=f"Drain node {node}", summary=f"Cordon `{node}` and evict "
                f"{len(plan.evict)} pod(s).", reason=reason, plan=plan.describe(),
                targets=(f"node/{node}",)), policy=policy, slack_conn=slack_conn)
            if not approval.approved:
                return Completed(name="NotApproved", message=not_approved_message(approval))
        async with hold_targets([f"node/{node}"]) if not dry_run else nullcontext():
            await perform(CordonNode(kube, node), dry_run=dry_run)
            blocked = []
            for namespace, name, uid in plan.evict:
                try:
                    await perform(EvictPod(kube, namespace, name, uid, node), dry_run=dry_run,
                                  attempts=eviction_attempts)
                except KubeTooManyRequests as e:
                    blocked.append(f"{namespace}/{name}: {e}")
    if blocked:
        return Completed(name="PartiallyDrained", message="cordoned; evictions blocked by "
                         "disruption budgets: " + "; ".join(blocked))
    return Completed(message=f"{'would drain' if dry_run else 'drained'} {node}: "
                     f"{len(plan.evict)} pod(s)")
