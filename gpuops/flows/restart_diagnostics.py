"""Restart diagnostics: classify every reported restart and keep one Slack thread per
(cluster, workload, cause).

Triggered by `gpuops.pod.restarted` (and on a schedule, for recoveries and stragglers).
The deployment allows one run at a time (others queue) and its trigger fires at most once per
`trigger_window_seconds`: the active run drains every restart event not yet handled (a
Prefect Variable holds its cursor; each workload's timeline artifact holds the identities
already handled), in batches, so a storm is one run and few Slack messages, and Slack thread
state is never written by two runs at once.

Events the trigger ignored inside its window are the responsibility of the run that window
fired: a triggered run stays until its window, plus the event persister's delay, is over.
When the active run stops, queued triggered runs whose windows ended before its last read
have nothing left to do: it cancels them ("superseded") instead of letting each start.

The schedule's runs stand by: each stays up for most of its interval (`stay_seconds`), so
a restart is usually handled by a run that is already up, within seconds, instead of
waiting for a new run's process to start; the trigger covers the gaps between them.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.context import FlowRunContext
from prefect.states import Cancelled
from prefect.variables import Variable

from gpuops.blocks.connections import KubernetesCluster, SlackConnection, load_block
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.tasks.restart_events import read_restart_events
from gpuops.tasks.restart_history import load_all_timelines
from gpuops.tasks.restart_reporter import RestartReporter
from gpuops.tasks.restart_rules import default_rules, load_rules

CURSOR_VARIABLE = "gpuops-restarts-cursor"
# Events can reach the server after later ones (delivery retries, the event persister's
# batches): the first read of a run, and one every FULL_SCAN_EVERY, looks back OVERLAP behind
# the cursor; reads in between look back RECENT_OVERLAP. Identities dedupe what is read twice.
OVERLAP = timedelta(minutes=2)
RECENT_OVERLAP = timedelta(seconds=15)
FULL_SCAN_EVERY = timedelta(seconds=30)
PERSIST_DELAY = timedelta(seconds=10)  # event received -> readable (persister flushes every 5 s)


def _now() -> datetime:
    return datetime.now(UTC)


def _cursor_name(cluster: str) -> str:
    """Variable names allow lowercase letters, digits, dashes and underscores."""
    return f"{CURSOR_VARIABLE}-{re.sub(r'[^a-z0-9_-]+', '-', cluster.lower())}"[:255]


async def _cursor(cluster: str, default: datetime) -> datetime:
    value = await Variable.aget(_cursor_name(cluster), default=None)
    return datetime.fromisoformat(value) if value else default


async def supersede_queued_runs(deployment_id: UUID, me: UUID, cutoff: datetime,
                                 note: str) -> int:
    """Cancel the deployment's queued triggered runs created before `cutoff`: the run ending
    now (`me`) has read everything their trigger windows were for. Runs of the schedule
    (no `event_id`) and runs already under way are left alone."""
    cancelled = 0
    async with get_client() as client:
        queued = await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))), limit=200)
        for run in queued:
            if run.id == me or not run.parameters.get("event_id") or (
                    run.created is None or run.created >= cutoff):
                continue
            await client.set_flow_run_state(run.id, Cancelled(message=note), force=True)
            cancelled += 1
    return cancelled


@flow(name="restart-diagnostics", log_prints=True)
async def restart_diagnostics(event_id: str | None = None, cluster_block: str = "",
                              slack_block: str = "", policy_block: str = "",
                              quiet_seconds: float = 20.0, trigger_window_seconds: float = 0.0,
                              stay_seconds: float = 0.0, max_run_seconds: float = 600.0,
                              lookback_minutes: int = 60) -> dict:
    """Handle every restart event not yet handled; stay while more keep arriving (until
    `quiet_seconds` pass without one: a storm's lulls between crash-loop back-offs must not
    end the run, since a new run takes seconds to start), and at least `stay_seconds`."""
    log = get_run_logger()
    if event_id:
        log.info("triggered by event %s; handling every restart not yet handled", event_id)
    policy: RestartPolicy = await load_block(RestartPolicy, policy_block)
    rules = default_rules()
    if policy.extra_rules_yaml.strip():
        rules = load_rules(policy.extra_rules_yaml, base=rules)
    conn = await load_block(SlackConnection, slack_block)
    kube = (await load_block(KubernetesCluster, cluster_block)).kube()
    reporter = RestartReporter(policy, rules, conn, kube)
    started = _now()
    window = timedelta(seconds=trigger_window_seconds)
    context = FlowRunContext.get()
    created = context.flow_run.created if event_id and context and context.flow_run else None
    stay_until = max(started + timedelta(seconds=stay_seconds),
                     started if created is None else created + window + PERSIST_DELAY)
    cursor = await _cursor(kube.cluster_name, started - timedelta(minutes=lookback_minutes))
    seen: set[str] = set()
    quiet_since = read_until = _now()
    last_full_scan: datetime | None = None
    while (_now() - started).total_seconds() < max_run_seconds:
        read_until = _now()
        full = last_full_scan is None or read_until - last_full_scan >= FULL_SCAN_EVERY
        if full:
            last_full_scan = read_until
        since = cursor - (OVERLAP if full else RECENT_OVERLAP)
        events = [e for e in await read_restart_events(kube.cluster_name, since, read_until)
                  if str(e.id) not in seen]
        if events:
            batch_started = time.monotonic()
            await reporter.handle_batch([(e.payload, str(e.id)) for e in events])
            log.info("handled %d restart event(s) in %.1f s", len(events),
                     time.monotonic() - batch_started)
            seen.update(str(e.id) for e in events)
            cursor = max(cursor, max(e.occurred for e in events))
            await Variable.aset(_cursor_name(kube.cluster_name), cursor.isoformat(),
                                overwrite=True)
            quiet_since = _now()
        elif (_now() - quiet_since).total_seconds() >= quiet_seconds and _now() >= stay_until:
            break
        await asyncio.sleep(0.5)
    await reporter.finish()
    await reporter.check_recoveries(await load_all_timelines())
    me = context.flow_run if context else None
    if window and me is not None and me.deployment_id is not None:
        superseded = await supersede_queued_runs(
            me.deployment_id, me.id, read_until - window - PERSIST_DELAY,
            f"superseded: flow run {me.name} handled the restarts this run was for")
        if superseded:
            log.info("cancelled %d queued run(s) whose restarts this run handled", superseded)
    log.info("restart diagnostics: %s", dict(reporter.counts))
    return dict(reporter.counts)
