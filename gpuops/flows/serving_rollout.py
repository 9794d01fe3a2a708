"""Serving rollout: move an InferencePool's traffic to a new vLLM version step by step, judged
on vLLM metrics against the old version, with approval and automatic rollback.

One run:
1. checks its parameters and reads everything it needs (`tasks/rollout/preflight.py`): the
   pool, its model server and route, the new version's objects derived from the old ones,
   free GPUs and so the mode (blue-green, or fixed-capacity without spare GPUs); any problem
   is an error naming the parameter, before anything changes;
2. publishes the plan (a dry run stops here);
3. holds the pools' and the route's slots (one rollout per pool at a time) and settles what an
   earlier run left on the route: its own record (a re-run after a suspended approval) or
   that of a run no longer going with the same version is resumed, any other rolled back; a
   rollout still going elsewhere makes this run end `Busy`, changing nothing;
4. rolls out (`tasks/rollout/run.py`): new objects, Ready and warm, each step's weights
   through `perform()` with the record on the route, an analysis window per step, approval
   before 100 % (or every step), rollback on a failed gate, a timeout or a "no";
5. publishes the timeline of steps with each gate's numbers and a chart of both versions'
   TTFT, inter-token latency and error ratio over the rollout, however it ended.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import (
    acreate_image_artifact,
    acreate_markdown_artifact,
    acreate_table_artifact,
)
from prefect.concurrency.asyncio import AcquireConcurrencySlotTimeoutError
from prefect.events import emit_event
from prefect.exceptions import NotPausedError
from prefect.runtime import flow_run as runtime_flow_run
from prefect.states import Cancelled, Completed, Failed

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.loading import load_block
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.blocks.rollout import RolloutPolicy
from gpuops.common.annotations import ROLLOUT_ABORT
from gpuops.common.errors import PrometheusError
from gpuops.common.events import event_name, k8s_resource
from gpuops.common.flow_runs import run_is_active
from gpuops.common.png import png_data_uri
from gpuops.common.settings import PrometheusSettings, get_settings
from gpuops.tasks.actions.perform import hold_targets, perform, recording_actions
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import Approval, request_approval, resume_approval
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus
from gpuops.tasks.rollout.actions import RequestAbort, abort_target, pool_target, route_target
from gpuops.tasks.rollout.notify import slack_notifier
from gpuops.tasks.rollout.params import RolloutSpec, parse_pool, parse_spec
from gpuops.tasks.rollout.preflight import Plan, preflight
from gpuops.tasks.rollout.read_objects import read_served_apis
from gpuops.tasks.rollout.run import (
    AskCapacity,
    Course,
    Result,
    check_resumable,
    retire_old,
    roll_back,
)
from gpuops.tasks.rollout.state import RolloutRecord
from gpuops.tasks.rollout.status import read_status
from gpuops.tasks.rollout.timeline import timeline_rows, timeline_text

# The slots are renewed while held; a killed run's free themselves this soon (the server
# refuses leases under 60 s), so the next run can resume or roll back what it left.
SLOT_LEASE_S = 60.0


def spec_of(policy: RolloutPolicy, **given: Any) -> RolloutSpec:
    """The run's parameters over the Block's defaults (None: the Block's)."""
    defaults = policy.model_dump(include={
        "steps", "gates", "min_requests", "window_s", "step_timeout_s", "poll_s",
        "ready_timeout_s", "warmup_requests", "warmup_interval_s", "warm_tolerance",
        "keep_old_s", "on_success", "mode", "capacity_step", "approve", "baseline", "no_room",
        "prewarm_timeout_s", "prewarm_fallback", "adapt_steps", "max_first_step"})
    values = {**defaults, **{k: v for k, v in given.items() if v is not None}}
    if given.get("steps") is not None and given.get("adapt_steps") is None:
        values["adapt_steps"] = False  # steps a person gave this run are kept as given
    return parse_spec(**values)


@flow(name="serving-rollout", log_prints=True)
async def serving_rollout(pool: str, image: str | None = None, model: str | None = None,
                          args: list[str] | None = None, steps: list[int] | None = None,
                          gates: list[dict[str, Any]] | None = None,
                          window_s: float | None = None, min_requests: int | None = None,
                          mode: Literal["auto", "blue-green", "fixed-capacity"] | None = None,
                          approve: Literal["final", "every-step", "none"] | None = None,
                          baseline: Literal["auto", "none", "fresh-copy"] | None = None,
                          no_room: Literal["fixed-capacity", "prewarm"] | None = None,
                          prewarm_fallback: Literal["fixed-capacity", "fail"] | None = None,
                          dry_run: bool = False, rollout_block: str = "",
                          cluster_block: str = "", slack_block: str = "",
                          policy_block: str = ""):
    """Roll an InferencePool's model server out to a new version (see the module docstring).

    Args:
        pool: The InferencePool serving now, `namespace/name`.
        image: The new vLLM image (empty: the old one).
        model: The model the new version loads, `--model` (empty: the old one; the served
            model name clients ask for stays).
        args: Engine flags to set on the new version, `--flag=value` or `--flag`.
        steps: The new version's traffic %, increasing, ending at 100 (empty: the Block's,
            1 5 25 50 100).
        gates: Gates judged after each step, `{metric, factor, slack, floor}` relative to the
            old version or `{metric, limit}` (empty: the Block's, else the built-in ones).
        window_s: Analysis window after each step, seconds (empty: the Block's).
        min_requests: Requests each version must finish in a window before it is judged.
        mode: blue-green (spare GPUs), fixed-capacity (k replicas at a time) or auto.
        approve: Ask before 100 % (final), before every step, or never (none).
        baseline: none, or fresh-copy: a copy of the old version as large as the new one,
            started and warmed with it and given its weight below 50 %, so the two are
            judged equally busy from the first step (blue-green; its GPUs too, else the
            plan says so and runs without it); auto: fresh-copy when there is room for it,
            else none. Empty: the Block's (auto).
        no_room: Without spare GPUs for blue-green: fixed-capacity, or prewarm: ask the
            capacity side for nodes (gpuops.gpu.capacity-needed), wait up to the Block's
            prewarm_timeout_s, then blue-green. Empty: the Block's.
        prewarm_fallback: A pre-warm that timed out (its pods removed) goes on in
            fixed-capacity mode or fails the rollout (fail). Empty: the Block's.
        dry_run: Check everything and publish the plan; change nothing.
        rollout_block: The RolloutPolicy Block with the defaults (empty: built-in ones).
        cluster_block: The KubernetesCluster Block (empty: settings).
        slack_block: The SlackConnection Block approvals and rollback messages go through.
        policy_block: The ApprovalPolicy Block (the RolloutPolicy's approval_policy_block
            wins when set).
    """
    log = get_run_logger()
    policy: RolloutPolicy = await load_block(RolloutPolicy, rollout_block)
    spec = spec_of(policy, pool=pool, image=image, model=model, args=args, steps=steps,
                 gates=gates, window_s=window_s, min_requests=min_requests, mode=mode,
                 approve=approve, baseline=baseline, no_room=no_room,
                 prewarm_fallback=prewarm_fallback)
    cluster = await load_block(KubernetesCluster, cluster_block)
    kube: Kube = cluster.kube()
    prom = Prometheus(policy.prometheus_url or get_settings(PrometheusSettings).url)
    run_id = str(runtime_flow_run.id or "no-flow-run")

    async with recording_actions():
        plan = await asyncio.to_thread(preflight, kube, spec, run_id)
        await acreate_markdown_artifact(
            key="serving-rollout-plan", description="The rollout's plan",
            markdown=f"# Serving rollout{' (dry run)' if dry_run else ''}\n\n"
                     f"```\n{plan.describe()}\n```")
        if dry_run:
            return Completed(name="DryRun", message="dry run: nothing was changed\n"
                             + plan.describe())
        approvals = await load_block(ApprovalPolicy, policy.approval_policy_block
                                     or policy_block)
        slack_conn = await load_block(SlackConnection, slack_block)

        async def ask(key: str, request: ApprovalRequest) -> Approval:
            return await request_approval(request, policy=approvals, slack_conn=slack_conn,
                                          key=key)

        targets = [pool_target(plan.new.namespace, plan.old.pool.name),
                   pool_target(plan.new.namespace, plan.new.pool_name),
                   *(route_target(plan.route.namespace, r) for r in plan.route_names)]
        result: Result | None = None
        try:
            async with hold_targets(targets, timeout_s=policy.lock_timeout_s,
                                    lease_s=SLOT_LEASE_S):
                settled = await _settle_leftovers(kube, spec, run_id, plan)
                if isinstance(settled, str):
                    return Failed(name="Busy", message=settled)
                course = Course(kube, prom, settled, run_id, ask=ask, notify=slack_notifier(
                    slack_conn, policy.notify_channel or approvals.channel),
                    ask_capacity=capacity_asker(kube))
                try:
                    result = await course.run()
                finally:
                    await _publish_timeline(course, result)
        except AcquireConcurrencySlotTimeoutError:
            return Failed(name="Busy", message=f"another rollout holds {plan.old.pool.ref} "
                          f"(or its route) for more than {policy.lock_timeout_s:g} s; nothing "
                          "was changed")
    summary = {"outcome": result.outcome, "old_pool": plan.old.pool.name,
               "new_pool": plan.new.pool_name, "mode": course.plan.mode,
               "baseline": course.plan.baseline.pool_name if course.plan.baseline else None,
               "notes": list(course.notes),
               "steps": [{"weight": s.weight, "outcome": s.outcome} for s in result.steps]}
    log.info("rollout %s: %s", result.outcome, result.message.splitlines()[0])
    if result.outcome == "completed":
        return Completed(message=result.message, data=summary)
    if result.outcome == "aborted":
        return Cancelled(name="Aborted", message=result.message)
    return Failed(name="RolledBack", message=result.message)


CAPACITY_NEEDED = event_name("gpu", "capacity-needed")  # flows/capacity_for_pending.py


def capacity_asker(kube: Kube) -> AskCapacity:
    """How a pre-warm asks the capacity side for nodes: the event the GPU rebalance emits for
    pods no node fits, handled by `capacity-for-pending/on-capacity-needed` (the same pools,
    quotas and approval; a dry run unless capacity changes are applied)."""
    async def ask(pods: list[str], reason: str) -> None:
        emit_event(CAPACITY_NEEDED, resource=k8s_resource(kube.cluster_name, "Cluster", None,
                                                          kube.cluster_name),
                   payload={"pods": pods, "reason": reason})
    return ask


async def _settle_leftovers(kube: Kube, spec: RolloutSpec, run_id: str, plan: Plan
                            ) -> Plan | str:
    """The plan to go on with once what another run recorded on the route is dealt with, or
    why this run must not act (that run is still going)."""
    record = plan.record
    if record is None or record.run == run_id:
        check_resumable(plan)
        return plan
    if await run_is_active(record.run):
        return (f"flow run {record.run} is rolling out {record.old_pool} -> "
                f"{record.new_pool} on HTTPRoute {plan.route} ({record.phase}); nothing was "
                "changed")
    if record.old_pool == plan.old.pool.name and record.version == plan.new.digest:
        get_run_logger().info("resuming the rollout run %s left at %s (%d %%)", record.run,
                              record.phase, record.weight)
        return plan
    ns = plan.route.namespace
    if record.phase == "promoted":
        await retire_old(kube, plan.apis, ns, plan.route_names, record,
                         delete=spec.on_success == "delete")
    else:
        await roll_back(kube, plan.apis, ns, plan.route_names, record,
                        f"left half done by flow run {record.run}, which is no longer going",
                        group=plan.old_ref.group)
    fresh = await asyncio.to_thread(preflight, kube, spec, run_id)
    check_resumable(fresh)
    return fresh


async def _publish_timeline(course: Course, result: Result | None) -> None:
    rows = timeline_rows(course.steps) or [{"step": "-", "outcome": "no step was taken"}]
    await acreate_table_artifact(key="serving-rollout-timeline", table=rows,
                                 description="The rollout's steps, each gate's numbers and "
                                 "the verdict" + (f" ({result.outcome})" if result else ""))
    plan = course.plan
    outcome = result.outcome if result is not None else "failed"
    await acreate_markdown_artifact(
        key="serving-rollout-summary", description="How the rollout went",
        markdown=f"# Serving rollout {plan.old.pool.ref} -> {plan.new.pool_name}: "
                 f"{outcome}\n\n" + (f"{result.message.splitlines()[0]}\n\n" if result else "")
                 + f"```\n{plan.describe()}\n```\n\n"
                 + "".join(f"- {note}\n" for note in course.notes)
                 + "\n## Steps\n\n```\n"
                 f"{timeline_text(course.steps)}\n```")
    try:
        png = await asyncio.to_thread(course.chart)
    except PrometheusError as e:  # the chart is a picture of what the tables already say
        get_run_logger().warning("no rollout chart: %s", e)
        return
    if png is not None:
        await acreate_image_artifact(
            key="serving-rollout-chart", image_url=png_data_uri(png),
            description="TTFT, inter-token latency and error ratio of the old and the new "
                        "version over the rollout; dashed lines: the steps")


# --- abort ------------------------------------------------------------------------------------

ABORTER = "gpuops-abort"  # the approver a waiting approval is answered "no" by


@flow(name="serving-rollout-abort", log_prints=True)
async def serving_rollout_abort(pool: str, reason: str = "", requested_by: str = ABORTER,
                                wait_s: float = 300.0, cluster_block: str = "",
                                rollout_block: str = ""):
    """Stop the rollout recorded on a pool's route and roll it back to the old version.

    A run still going is asked to (a request on the route it looks at between its waits; an
    approval it waits on is answered "no") and rolls back itself; what a run no longer going
    left is rolled back here.

    Args:
        pool: The InferencePool, old or new, `namespace/name`.
        reason: Why (kept on the route and in the run's state).
        requested_by: Who asks.
        wait_s: How long to wait for a running rollout to roll back.
        cluster_block: The KubernetesCluster Block (empty: settings).
        rollout_block: The RolloutPolicy Block (its lock timeout).
    """
    name = parse_pool(pool)
    policy: RolloutPolicy = await load_block(RolloutPolicy, rollout_block)
    kube: Kube = (await load_block(KubernetesCluster, cluster_block)).kube()
    status = await asyncio.to_thread(read_status, kube, name.namespace, name.name)
    record, route = status.record, status.route
    if record is None:
        return Completed(name="NothingToAbort", message=f"no rollout is recorded on HTTPRoute "
                         f"{route}" + (f"; last: {status.last}" if status.last else ""))
    why = f"{requested_by}: {reason}" if reason else requested_by
    apis = await asyncio.to_thread(read_served_apis, kube)
    ns = route.namespace
    async with recording_actions():
        if await run_is_active(record.run):
            await perform(RequestAbort(kube, apis, ns, route.name, abort_target(ns, route.name),
                                       {ROLLOUT_ABORT: why}, what=f"abort requested by {why}"),
                          dry_run=False)
            await _answer_no(record.run, why)
            ended = await _wait_ended(kube, name.namespace, name.name, record, wait_s)
            if ended is not None:
                return Completed(name="Aborted", message=f"flow run {record.run} rolled back: "
                                 f"{ended}")
            if await run_is_active(record.run):
                return Failed(name="NotAborted", message=f"flow run {record.run} did not roll "
                              f"back within {wait_s:g} s; the abort request stays on HTTPRoute "
                              f"{route}")
            left = (await asyncio.to_thread(read_status, kube, name.namespace, name.name)).record
            if left is None:
                return Completed(name="Aborted", message=f"flow run {record.run} ended")
            record = left
        targets = [pool_target(ns, record.old_pool), pool_target(ns, record.new_pool),
                   *(route_target(ns, r.name) for r in status.routes or (route,))]
        async with hold_targets(targets, timeout_s=max(policy.lock_timeout_s, 2 * SLOT_LEASE_S),
                                lease_s=SLOT_LEASE_S):
            await roll_back(kube, apis, ns, [r.name for r in status.routes or (route,)],
                            record, f"aborted by {why}",
                            outcome="aborted")
    return Completed(name="Aborted", message=f"rolled back what flow run {record.run} left: "
                     f"{record.old_pool} serves 100 % again")


async def _answer_no(run_id: str, why: str) -> None:
    """A run waiting on an approval gets a "no" (nothing happens when it is not waiting)."""
    try:
        await resume_approval(UUID(run_id), {"approved": False, "approver": ABORTER,
                                             "comment": f"rollout aborted by {why}"})
    except NotPausedError:
        pass


async def _wait_ended(kube: Kube, namespace: str, name: str, record: RolloutRecord,
                      wait_s: float) -> str | None:
    """How the rollout ended (the route's last line) once its record is gone; None on time."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        status = await asyncio.to_thread(read_status, kube, namespace, name)
        if status.record is None or status.record.run != record.run:
            return status.last or "ended"
        if not await run_is_active(record.run):
            return None
        await asyncio.sleep(1.0)
    return None
