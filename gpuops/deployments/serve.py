"""The deployments `gpuops up` serves: each flow with its schedule or event trigger."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.events import DeploymentEventTrigger
from prefect.exceptions import TerminationSignal
from prefect.runner import Runner
from prefect.schedules import Interval, Schedule

from gpuops.flows.capacity_for_pending import CAPACITY_NEEDED, capacity_for_pending
from gpuops.flows.capacity_prewarm import capacity_prewarm
from gpuops.flows.drain_node import drain_node
from gpuops.flows.gpu_consolidate import GPU_IDLE, gpu_consolidate
from gpuops.flows.gpu_rebalance import STRANDED, gpu_rebalance
from gpuops.flows.gpu_scan import gpu_scan
from gpuops.flows.restart_diagnostics import restart_diagnostics
from gpuops.flows.run_runbook import runbook_deployments
from gpuops.flows.serving_rollout import serving_rollout, serving_rollout_abort
from gpuops.tasks.restarts.events import RESTART_DIAGNOSTICS_EVENTS

TRIGGER_WINDOW = timedelta(seconds=10)
STANDBY_INTERVAL = timedelta(minutes=15)
# A standing run ends this much before its successor is due, so the successor is not
# refused the deployment's one slot (a refused run waits the server's
# deployments.concurrency_slot_wait_seconds before it tries again).
STANDBY_HANDOVER = timedelta(seconds=3)
# A standing run held past its successor's due time by a storm still ends by then.
STANDBY_OVERRUN = timedelta(minutes=5)


def standby_schedule() -> Schedule:
    """The restart schedule's standing runs, anchored just ahead of now so the first one
    starts within seconds of serving, not an interval later."""
    stay = STANDBY_INTERVAL - STANDBY_HANDOVER
    return Interval(STANDBY_INTERVAL, anchor_date=datetime.now(UTC) + timedelta(seconds=10),
                    parameters={"stay_seconds": stay.total_seconds(),
                                "max_run_seconds": (stay + STANDBY_OVERRUN).total_seconds()})


def deployments(*, approval_policy: str = "", capacity_mode: str = "dry-run") -> list:
    """`approval_policy`: the saved ApprovalPolicy Block the flows that ask for approval use
    (a default parameter, visible and changeable per run in the UI); `capacity_mode`: what
    the hourly pre-warm does, explicit so that a new install never changes pools unasked."""
    policy = {"policy_block": approval_policy} if approval_policy else {}
    return [
        # One run at a time; the trigger fires at most once per TRIGGER_WINDOW (once a
        # reactive trigger fires, Prefect ignores matching events for the rest of its
        # window). A run covers its window and drains every restart event; while a run is
        # up the trigger rests (paused by the run, resumed as it leaves), so a storm is one
        # run, not one queued run per window (see the flow's docstring). The schedule's runs
        # stand by, one after the other, so restarts rarely wait for a run to start; they
        # also post "recovered". A Job's failure (`gpuops.job.failed`) starts a run too.
        restart_diagnostics.to_deployment(
            name="on-restart",
            triggers=[DeploymentEventTrigger(
                name="a pod restarted", expect=set(RESTART_DIAGNOSTICS_EVENTS),
                match={"prefect.resource.id": "k8s.*"}, within=TRIGGER_WINDOW,
                parameters={"event_id": "{{ event.id | string }}",
                            "trigger_window_seconds": TRIGGER_WINDOW.total_seconds()})],
            schedule=standby_schedule(),
            concurrency_limit=ConcurrencyLimitConfig(
                limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
            tags=["gpuops", "restarts"],
            description="Classify restarts and keep one Slack thread per workload and cause."),
        drain_node.to_deployment(
            name="on-demand", tags=["gpuops", "maintenance"], parameters=policy,
            description="Cordon and drain a node, with approval."),
        # Hourly, at the top of the hour: each run requests what is needed lead-time ahead.
        # One at a time, later ones queued: a run resumed from a long (suspended) approval
        # must wait for the active one, not be cancelled after its approver clicked; it then
        # re-plans and applies only if the plan is still the one approved.
        capacity_prewarm.to_deployment(
            name="hourly", cron="0 * * * *", tags=["gpuops", "capacity"],
            parameters={"mode": capacity_mode, **policy},
            concurrency_limit=ConcurrencyLimitConfig(
                limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE),
            description="Forecast demand, plan node pools, pre-warm them ahead of demand."),
        # A stranded-GPU episode (the watcher reports it once per episode) starts a run,
        # and so does the half-hour schedule (an episode reported while serve was down, or
        # one a run could not fix yet). One run at a time; a run due while one is up (it
        # may be waiting for approval) is cancelled: it would plan on the same cluster.
        gpu_rebalance.to_deployment(
            name="on-stranded", cron="*/30 * * * *", tags=["gpuops", "rebalance"],
            triggers=[DeploymentEventTrigger(
                name="GPUs stranded", expect={STRANDED},
                match={"prefect.resource.id": "k8s.*", "gpuops.kind": "Cluster"},
                parameters={"event_id": "{{ event.id | string }}"})],
            parameters=policy,
            concurrency_limit=ConcurrencyLimitConfig(
                limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            description="Repack running GPU pods so Pending GPU pods fit, with approval."),
        # A node whose allocated GPUs sit idle (the watcher's gpuops.node.gpu-idle, once per
        # episode) starts a run, and so does the half-hour schedule, a quarter past the
        # pre-warm (its plan, which consolidation never undercuts, is then fresh); the run's
        # own check finds the nodes nothing runs on. Removing nodes is a pool change: a dry
        # run unless pre-warm applies too. One run at a time, new ones cancelled.
        gpu_consolidate.to_deployment(
            name="on-idle", cron="15,45 * * * *", tags=["gpuops", "rebalance"],
            triggers=[DeploymentEventTrigger(
                name="GPUs idle", expect={GPU_IDLE},
                match={"prefect.resource.id": "k8s.*", "gpuops.kind": "Node"},
                parameters={"event_id": "{{ event.id | string }}"})],
            parameters={"dry_run": capacity_mode != "apply", **policy},
            concurrency_limit=ConcurrencyLimitConfig(
                limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            description="Remove idle GPU nodes (cordon, drain, terminate that instance), "
                        "with approval; never below the capacity plan or a pool's minimum."),
        # A rebalance that found pending GPU pods no node fits, even empty, names them in
        # gpuops.gpu.capacity-needed: the run raises the pool whose nodes would hold them.
        # A pool change: a dry run unless capacity changes are applied. One run at a time,
        # new ones cancelled (the next rebalance names the pods again if still pending).
        capacity_for_pending.to_deployment(
            name="on-capacity-needed", tags=["gpuops", "capacity"],
            triggers=[DeploymentEventTrigger(
                name="GPU capacity needed", expect={CAPACITY_NEEDED},
                match={"prefect.resource.id": "k8s.*", "gpuops.kind": "Cluster"},
                parameters={"pods": "{{ event.payload.pods }}",
                            "event_id": "{{ event.id | string }}"})],
            parameters={"mode": capacity_mode, **policy},
            concurrency_limit=ConcurrencyLimitConfig(
                limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            description="Raise the node pool whose nodes would hold pending GPU pods that "
                        "fit no node, with approval above the cost threshold."),
        gpu_scan.to_deployment(name="every-10-minutes", interval=timedelta(minutes=10),
                               tags=["gpuops", "rebalance"], description="GPU nodes as a "
                               "table: free GPUs, stranded GPUs, FGD fragmentation."),
        # On demand, from `gpuops rollout start` or the UI's form (the flow's parameters).
        # Rollouts of different pools run side by side; each holds its pools' and route's
        # slots, so a second one on the same pool ends Busy instead of interleaving.
        serving_rollout.to_deployment(
            name="on-demand", tags=["gpuops", "rollout"], parameters=policy,
            description="Roll an InferencePool out to a new vLLM version step by step, judged "
                        "on vLLM metrics against the old version, with approval and "
                        "automatic rollback."),
        serving_rollout_abort.to_deployment(
            name="on-demand", tags=["gpuops", "rollout"],
            description="Stop a pool's rollout and roll it back to the old version."),
        # Each shipped runbook, `<name>/runbook`, its form the runbook's parameters.
        *runbook_deployments(approval_policy=approval_policy),
    ]


def served_deployment_names() -> list[str]:
    """`flow/deployment` of everything `serve_all` serves: the runs gpuops owns."""
    return [f"{d.flow_name}/{d.name}" for d in deployments()]


RUNNER_POLL_SECONDS = 2.0  # Prefect's default, 10 s, would add up to 10 s to every restart


def serve_all(*, approval_policy: str = "", capacity_mode: str = "dry-run",
              when_registered: Callable[[], None] | None = None) -> None:
    """Serve until interrupted; PREFECT_RUNNER_POLL_FREQUENCY, when set, wins.

    Prefect's `serve()` with its Runner spelled out, so that `when_registered` runs once every
    deployment exists on the server: `gpuops up` says it is up only then (a user who ran
    `prefect deployment run drain-node/on-demand` right after the banner got a 404)."""
    poll = float(os.environ.get("PREFECT_RUNNER_POLL_FREQUENCY") or RUNNER_POLL_SECONDS)
    runner = Runner(pause_on_shutdown=True, query_seconds=poll)
    for deployment in deployments(approval_policy=approval_policy, capacity_mode=capacity_mode):
        runner.add_deployment(deployment)
    if when_registered is not None:
        when_registered()
    try:
        asyncio.run(runner.start())
    except (KeyboardInterrupt, TerminationSignal) as exc:
        logging.getLogger(__name__).info("%s: no longer serving", type(exc).__name__)
