"""GPU rebalance: repack running pods with the fewest evictions so that Pending GPU pods fit.

Triggered by `gpuops.gpu.stranded` (the cluster watcher sees GPU pods Pending while the free
GPUs would hold them in total) and on a schedule. One run:

1. removes what earlier runs left (a crashed run's taints and nominations, recorded on the
   objects, `tasks/rebalance/leftovers.py`), unless that run is still going;
2. reads the cluster into the planner's model and plans (`tasks/rebalance/repack.py`);
3. publishes the plan: the moves as a table, the measures before and after, and a map of
   GPU allocation per node before and after (which workload holds each GPU);
4. asks for approval (Slack or the Prefect UI): what moves, what then gets scheduled, GPUs
   put to work, the expected GPU-hours saved;
5. re-reads the cluster and stops if the approved plan no longer fits it;
6. executes through `perform()`, holding every involved node's slot: taints the nodes the
   plan frees, lets the pending pods tolerate that taint, nominates them to their planned
   nodes, evicts the moved pods through the Eviction API (`tasks/rebalance/execution.py`
   explains the mechanism); when a PodDisruptionBudget still refuses an eviction after
   `eviction_attempts` tries (each after its Retry-After), the run removes the plan's
   temporary changes and re-plans once, with the budgets as they are now and the refused
   pod left where it is: a plan that still lands pending pods is approved (a new plan, a
   new approval) and carried out the same way; otherwise the run ends `Blocked`;
7. waits until the pending pods are bound where the plan says and the moved pods'
   replacements are bound, not back where they were; stops and reports when reality
   diverges (a new pod took the space, a pod landed elsewhere, a replacement went back);
8. always removes its temporary changes (taints, nominations, their records), also when a
   step failed.

Dry-run plans, publishes and reports each action as "would apply", and changes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event
from prefect.runtime import flow_run as runtime_flow_run
from prefect.states import Completed

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.loading import load_block
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.blocks.rebalance import RebalancePolicy
from gpuops.common.annotations import (
    REBALANCE_EXPIRES,
    REBALANCE_NOMINATED,
    REBALANCE_RUN,
    REBALANCE_TAINT,
)
from gpuops.common.errors import ConfigError, KubeNotFound, KubeTooManyRequests
from gpuops.common.events import event_name, k8s_resource
from gpuops.common.flow_runs import run_is_active
from gpuops.tasks.actions.kube import EvictPod
from gpuops.tasks.actions.perform import hold_targets, perform, recording_actions
from gpuops.tasks.actions.scheduling import (
    AddToleration,
    ClearNomination,
    NominatePod,
    TaintNode,
    UntaintNode,
)
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import not_approved_message, request_approval
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rebalance import report
from gpuops.tasks.rebalance.execution import (
    Progress,
    Steps,
    check_before_acting,
    check_progress,
    execution_steps,
    live_pods,
)
from gpuops.tasks.rebalance.from_kube import ClusterView, ConversionPolicy
from gpuops.tasks.rebalance.leftovers import find_leftovers
from gpuops.tasks.rebalance.reading import read_cluster, read_objects
from gpuops.tasks.rebalance.repack import (
    CANNOT_HELP,
    CAPACITY,
    NO_MOVES_NEEDED,
    NOTHING_PENDING,
    RepackOptions,
    RepackPlan,
    plan_repack,
)

RECORD_KEYS = (REBALANCE_RUN, REBALANCE_EXPIRES, REBALANCE_NOMINATED)
EXPIRY_MARGIN = timedelta(minutes=10)  # beyond the settle timeout, for cleanup itself
POLL_S = 1.0
# The nodes' slots are renewed while held; a killed run's free themselves this soon, so the
# next run can clean up after it without waiting Prefect's default five minutes.
SLOT_LEASE_S = 60.0  # the server refuses leases under 60 s
STRANDED = event_name("gpu", "stranded")
CAPACITY_NEEDED = event_name("gpu", "capacity-needed")
DIVERGED = event_name("rebalance", "diverged")


@task(name="read-cluster", retries=2, retry_delay_seconds=2, cache_policy=NO_CACHE)
def scan_cluster(kube: Kube, policy: ConversionPolicy) -> ClusterView:
    """The cluster (nodes, pods, PDBs) as the planner's model."""
    return read_cluster(kube, policy)


@task(name="plan-repack", cache_policy=NO_CACHE)
def plan(view: ClusterView, options: RepackOptions) -> RepackPlan:
    return plan_repack(view.cluster, options)


def _options(policy: RebalancePolicy, max_moves: int | None, time_limit_s: float | None
             ) -> RepackOptions:
    if max_moves is not None and max_moves < 0:
        raise ConfigError("max_moves", f"must be >= 0, got {max_moves}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise ConfigError("time_limit_s", f"must be > 0, got {time_limit_s}")
    return RepackOptions(max_moves=policy.max_moves if max_moves is None else max_moves,
                         time_limit_s=policy.time_limit_s if time_limit_s is None
                         else time_limit_s, default_move_cost=policy.default_move_cost,
                         allow_local_storage=policy.allow_local_storage)


def _conversion(policy: RebalancePolicy) -> ConversionPolicy:
    return ConversionPolicy(opt_out_annotation=policy.opt_out_annotation,
                            move_cost_by_owner_kind=dict(policy.move_cost_by_owner_kind))


@flow(name="gpu-rebalance", log_prints=True)
async def gpu_rebalance(dry_run: bool = False, max_moves: int | None = None,
                        time_limit_s: float | None = None, rebalance_block: str = "",
                        cluster_block: str = "", slack_block: str = "",
                        policy_block: str = "", event_id: str = ""):
    """Plan and carry out a repack so that Pending GPU pods fit (see the module docstring).

    Args:
        dry_run: Plan and report what would be done; change nothing.
        max_moves: Most pods to evict (empty: the RebalancePolicy Block's max_moves).
        time_limit_s: Planning time bound in seconds (empty: the Block's time_limit_s).
        rebalance_block: The RebalancePolicy Block (empty: its defaults).
        cluster_block: The KubernetesCluster Block (empty: settings).
        slack_block: The SlackConnection Block approvals are posted with.
        policy_block: The ApprovalPolicy Block (the RebalancePolicy's
            approval_policy_block wins when set).
        event_id: The `gpuops.gpu.stranded` event that triggered the run, if any.
    """
    log = get_run_logger()
    policy: RebalancePolicy = await load_block(RebalancePolicy, rebalance_block)
    options = _options(policy, max_moves, time_limit_s)
    cluster = await load_block(KubernetesCluster, cluster_block)
    kube: Kube = cluster.kube()
    run_id = str(runtime_flow_run.id or "no-flow-run")
    if event_id:
        log.info("triggered by event %s", event_id)

    async with recording_actions():  # the actions artifact, however the run ends
        cleaned = await remove_leftovers(kube, run_id, dry_run=dry_run)
        view = scan_cluster(kube, _conversion(policy))
        repack = await asyncio.to_thread(plan, view, options)
        await publish_plan(repack, view, policy, dry_run=dry_run, cleaned=cleaned)

        summary: dict[str, Any] = {"status": repack.status, "moves": len(repack.moves),
                                   "landings": len(repack.landings), "dry_run": dry_run,
                                   "cleaned_runs": cleaned}
        if repack.fit_no_node:  # for the capacity side (flows/capacity_for_pending.py)
            emit_event(CAPACITY_NEEDED, resource=_cluster_resource(kube), payload={
                "pods": list(repack.fit_no_node), "reason": repack.reason or ""})
        if not repack.moves:
            name = {NOTHING_PENDING: "NothingPending", NO_MOVES_NEEDED: "NoMovesNeeded",
                    CAPACITY: "CapacityNeeded", CANNOT_HELP: "CannotHelp"}.get(repack.status,
                                                                              "NoPlan")
            return Completed(name=name, data=summary, message=f"no repack: {repack.reason or repack.status}")

        attempt = await _attempt(kube, repack, view, policy, run_id, dry_run=dry_run,
                                 summary=summary, slack_block=slack_block,
                                 policy_block=policy_block)
        if not isinstance(attempt, tuple):
            return attempt
        steps, outcome = attempt
        if outcome.refused and not dry_run:
            # A budget refused an eviction (the first plan's changes are cleaned up by now):
            # re-plan once without that pod, with the budgets as they are now.
            again = scan_cluster(kube, _conversion(policy))
            why = "its eviction was refused by a PodDisruptionBudget earlier in this run"
            second = await asyncio.to_thread(plan, again, dataclasses.replace(
                options, frozen=dict.fromkeys(outcome.refused, why)))
            summary["replan"] = {"without": list(outcome.refused), "status": second.status,
                                 "moves": len(second.moves),
                                 "landings": len(second.landings)}
            if not (second.moves and second.landings):
                return Completed(name="Blocked", data={
                    **summary, "blocked": list(outcome.blocked)}, message=(
                    "stopped: " + "; ".join(outcome.blocked) + "; re-planned without "
                    + ", ".join(outcome.refused) + ": "
                    + (second.reason or second.status) + "; temporary changes removed"))
            await publish_plan(second, again, policy, dry_run=False, cleaned=[], note=(
                f"Re-plan: {', '.join(outcome.refused)} left where it is ({why})."))
            attempt = await _attempt(kube, second, again, policy, run_id, dry_run=False,
                                     summary=summary, slack_block=slack_block,
                                     policy_block=policy_block, refused=outcome.refused)
            if not isinstance(attempt, tuple):
                return attempt
            steps, outcome = attempt
            outcome = dataclasses.replace(outcome, refused=())  # once: no third plan
        after = scan_cluster(kube, _conversion(policy))
        await acreate_markdown_artifact(
            key="gpu-rebalance-after", description="GPU allocation per node after the run",
            markdown="## GPU allocation after the run\n\n" + report.render_maps(
                {"now": report.gpu_map_now(after, [k for k, _ in outcome.landed])},
                focus=steps.nodes))
        summary.update({"landed": [list(x) for x in outcome.landed],
                        "replaced": [list(x) for x in outcome.replaced]})
        replanned = (f" (re-planned after a PodDisruptionBudget refused "
                     f"{', '.join(summary['replan']['without'])})" if "replan" in summary
                     else "")
        if dry_run:
            return Completed(name="DryRun", data=summary, message=(
                f"dry run: would move {len(repack.moves)} pod(s) and land "
                f"{len(repack.landings)}; nothing was changed"))
        if outcome.blocked:
            return Completed(name="Blocked", data={**summary, "blocked": list(outcome.blocked)},
                             message="stopped: " + "; ".join(outcome.blocked)
                             + replanned + "; temporary changes removed")
        if outcome.diverged:
            return await _stop_diverged(kube, list(outcome.diverged), summary)
        if outcome.waiting:
            return Completed(name="NotSettled", data=summary, message=(
                f"stopped after {policy.settle_timeout_s:g} s, still waiting for: "
                + "; ".join(outcome.waiting) + replanned + "; temporary changes removed"))
        return Completed(data=summary, message=(
            f"moved {len(steps.evict)} pod(s); " + ", ".join(
                f"{k} runs on {n}" for k, n in outcome.landed) + replanned
            + "; temporary changes removed"))


async def _attempt(kube: Kube, repack: RepackPlan, view: ClusterView, policy: RebalancePolicy,
                   run_id: str, *, dry_run: bool, summary: dict[str, Any], slack_block: str,
                   policy_block: str, refused: tuple[str, ...] = ()
                   ) -> tuple[Steps, Progress] | Any:
    """Approve (unless small or a dry run), check the plan still fits, carry it out: the
    steps and how it went, or the final state when it stopped before acting."""
    if not dry_run and len(repack.moves) > policy.approve_up_to_moves:
        again = (f" (re-plan: a PodDisruptionBudget refused {', '.join(refused)})"
                 if refused else "")
        approval = await request_approval(ApprovalRequest(
            title=f"GPU rebalance: {len(repack.moves)} move(s) to schedule "
                  f"{len(repack.landings)} pending pod(s){again}",
            summary=report.approval_summary(repack, view, policy.expected_wait_hours),
            reason=f"{len(view.cluster.pending)} GPU pod(s) Pending while "
                   f"{repack.stranded_gpus_before:g} GPU(s) sit stranded on nodes where they "
                   "do not fit." + (f" The approved plan needed {', '.join(refused)} to "
                                    "move, which its PodDisruptionBudget refused; this plan "
                                    "leaves it where it is." if refused else ""),
            plan=report.plan_text(repack),
            cost_impact=f"≈{report.landed_gpus(repack, view) * policy.expected_wait_hours:g} "
                        "GPU-hours saved",
            targets=tuple(f"node/{n}" for n in execution_steps(repack, view).nodes)),
            policy=await load_block(ApprovalPolicy, policy.approval_policy_block
                                    or policy_block),
            slack_conn=await load_block(SlackConnection, slack_block),
            key="approval-replan" if refused else "approval")  # one key per approval
        if not approval.approved:
            return Completed(name="NotApproved", data=summary,
                             message=not_approved_message(approval))

    now_view = view if dry_run else scan_cluster(kube, _conversion(policy))
    problems = check_before_acting(repack, view, now_view)
    if problems:
        return await _stop_diverged(kube, problems, summary, before_acting=True)
    steps = execution_steps(repack, now_view)
    outcome = await execute(kube, steps, run_id, dry_run=dry_run,
                            settle_timeout_s=policy.settle_timeout_s, before=now_view,
                            eviction_attempts=policy.eviction_attempts)
    return steps, outcome


def _cluster_resource(kube: Kube) -> dict[str, str]:
    return k8s_resource(kube.cluster_name, "Cluster", None, kube.cluster_name)


async def _stop_diverged(kube: Kube, problems: list[str], summary: dict[str, Any], *,
                         before_acting: bool = False) -> Any:
    get_run_logger().warning("the cluster diverged from the plan: %s", "; ".join(problems))
    emit_event(DIVERGED, resource=_cluster_resource(kube), payload={
        "problems": problems, "before_acting": before_acting})
    when = "before anything was changed" if before_acting else "temporary changes removed"
    return Completed(name="Diverged", data={**summary, "diverged": problems},
                     message=f"stopped, the cluster diverged from the plan ({when}): "
                     + "; ".join(problems))


# --- artifacts ------------------------------------------------------------------------------

async def publish_plan(repack: RepackPlan, view: ClusterView, policy: RebalancePolicy, *,
                       dry_run: bool, cleaned: list[str], note: str = "") -> None:
    focus = [m.from_node for m in repack.moves] + [lnd.node for lnd in repack.landings]
    maps = {"before": report.gpu_map_before(view, repack)}
    if repack.moves or repack.landings:
        maps["planned after"] = report.gpu_map_planned(view, repack)
    head = [f"# GPU rebalance{' (dry run)' if dry_run else ''}",
            f"Plan: **{repack.status}** by {repack.method} in {repack.solve_s:.1f} s, "
            f"{len(repack.moves)} move(s), cost {repack.cost:g}"
            + (f"; {repack.reason}" if repack.reason else "") + ".",
            report.approval_summary(repack, view, policy.expected_wait_hours)
            if repack.moves else "Nothing to move."]
    if note:
        head.insert(1, note)
    if cleaned:
        head.append("Removed what earlier runs left: " + ", ".join(cleaned) + ".")
    if view.skipped:
        head.append("Left out of the plan: " + "; ".join(f"{k} ({why})" for k, why
                                                          in sorted(view.skipped.items())))
    await acreate_markdown_artifact(key="gpu-rebalance-plan", description="The rebalance "
                                    "plan and GPU allocation before and after",
                                    markdown="\n\n".join(head) + "\n\n"
                                    + report.render_maps(maps, focus=focus))
    await acreate_table_artifact(key="gpu-rebalance-moves",
                                 table=report.move_rows(repack, view) or [
                                     {"step": "-", "pod": "no move", "workload": "",
                                      "gpus": 0, "from": "", "to": "", "cost": 0}],
                                 description="Pods the plan moves, and the pending pods that "
                                 "then land")
    await acreate_table_artifact(key="gpu-rebalance-measures",
                                 table=report.measure_rows(repack, view,
                                                           policy.expected_wait_hours),
                                 description="Measures before and after the plan")


# --- leftovers of earlier runs --------------------------------------------------------------

async def remove_leftovers(kube: Kube, run_id: str, *, dry_run: bool) -> list[str]:
    """Undo the temporary changes of every earlier run that is no longer going (or whose
    expiry passed); returns the run ids cleaned."""
    nodes, pods, _ = await asyncio.to_thread(read_objects, kube)
    cleaned = []
    now = datetime.now(UTC)
    for other, left in sorted(find_leftovers(nodes, pods).items()):
        if other == run_id:
            continue
        if await run_is_active(other) and not left.expired(now):
            get_run_logger().info("run %s is still going; leaving its changes (%s)", other,
                                  left.describe())
            continue
        get_run_logger().warning("removing what run %s left: %s", other, left.describe())
        for node in left.nodes:
            await perform(UntaintNode(kube, node, REBALANCE_TAINT, other, RECORD_KEYS),
                          dry_run=dry_run)
        for pod in left.pods:
            ns, name = pod.key.split("/", 1)
            await perform(ClearNomination(kube, ns, name, pod.uid, pod.nominated_to or "-",
                                          record_keys=RECORD_KEYS), dry_run=dry_run)
        cleaned.append(other)
    return cleaned


# --- execution ------------------------------------------------------------------------------

async def execute(kube: Kube, steps: Steps, run_id: str, *, dry_run: bool,
                  settle_timeout_s: float, before: ClusterView,
                  eviction_attempts: int = 6) -> Progress:
    """Carry out `steps` (see `tasks/rebalance/execution.py`), wait, and always clean up."""
    expires = (datetime.now(UTC) + timedelta(seconds=settle_timeout_s) + EXPIRY_MARGIN
               ).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = {REBALANCE_RUN: run_id, REBALANCE_EXPIRES: expires}
    toleration = {"key": REBALANCE_TAINT, "operator": "Equal", "value": run_id,
                  "effect": "NoSchedule"}
    if dry_run:
        for action in _actions(kube, steps, run_id, record, toleration):
            await perform(action, dry_run=True)
        return Progress(done=False, waiting=(), diverged=())
    async with hold_targets([f"node/{n}" for n in steps.nodes], lease_s=SLOT_LEASE_S):
        try:
            blocked, refused = await _act(kube, steps, run_id, record, toleration,
                                          eviction_attempts)
            if blocked:
                return Progress(done=False, waiting=(), diverged=(), blocked=tuple(blocked),
                                refused=tuple(refused))
            return await _wait(kube, steps, before, settle_timeout_s)
        finally:
            await _clean_up(kube, steps, run_id)


def _actions(kube: Kube, steps: Steps, run_id: str, record: dict[str, str],
             toleration: dict[str, str]) -> list[Any]:
    actions: list[Any] = [TaintNode(kube, n, REBALANCE_TAINT, run_id, record=record)
                          for n in steps.taint_nodes]
    for s in steps.land:
        if s.node in steps.taint_nodes:
            actions.append(AddToleration(kube, s.namespace, s.name, s.uid, s.node,
                                         toleration=toleration, record=record))
        actions.append(NominatePod(kube, s.namespace, s.name, s.uid, s.node,
                                   record={**record, REBALANCE_NOMINATED: s.node}))
    actions += [EvictPod(kube, s.namespace, s.name, s.uid, s.node) for s in steps.evict]
    return actions


async def _act(kube: Kube, steps: Steps, run_id: str, record: dict[str, str],
               toleration: dict[str, str], eviction_attempts: int = 6
               ) -> tuple[list[str], list[str]]:
    """Apply the steps in order; returns why it stopped early (a PDB, a pod gone) and the
    pods whose eviction a PDB refused."""
    for action in _actions(kube, steps, run_id, record, toleration):
        evicting = isinstance(action, EvictPod)
        try:
            await perform(action, dry_run=False,
                          **({"attempts": eviction_attempts} if evicting else {}))
        except KubeTooManyRequests as e:
            if not evicting:  # the API throttled us past the retries
                return [f"{action.describe()}: {e}"], []
            pod = f"{action.namespace}/{action.name}"
            return [(f"the eviction of {pod} is refused by a PodDisruptionBudget after "
                     f"{eviction_attempts} tries ({e})")], [pod]
        except KubeNotFound as e:
            return [f"{action.describe()}: {e}"], []
    return [], []


async def _wait(kube: Kube, steps: Steps, before: ClusterView, timeout_s: float) -> Progress:
    before_pods = live_pods(before)
    deadline = time.monotonic() + timeout_s
    conversion = ConversionPolicy()
    while True:
        now = await asyncio.to_thread(read_cluster, kube, conversion)
        progress = check_progress(steps, before_pods, live_pods(now))
        if progress.done or progress.diverged or time.monotonic() >= deadline:
            return progress
        await asyncio.sleep(POLL_S)


async def _clean_up(kube: Kube, steps: Steps, run_id: str) -> None:
    """Remove this run's taints and nominations; every one is tried even if one fails."""
    log = get_run_logger()
    undo: list[Any] = [UntaintNode(kube, n, REBALANCE_TAINT, run_id, RECORD_KEYS)
                       for n in steps.taint_nodes]
    undo += [ClearNomination(kube, s.namespace, s.name, s.uid, s.node, record_keys=RECORD_KEYS)
             for s in steps.land]
    failed = []
    for action in undo:
        try:
            await perform(action, dry_run=False)
        except Exception as e:  # noqa: BLE001 - the next run removes it (recorded on the object)
            failed.append(f"{action.describe()}: {type(e).__name__}")
    if failed:
        log.error("could not remove every temporary change (the next run will): %s",
                  "; ".join(failed))
