"""Restart diagnostics: classify every reported restart and keep one Slack thread per
(cluster, workload, cause).

Run by the deployment's schedule (standing runs, below) and triggered by
`gpuops.pod.restarted` when no run is up.
The deployment allows one run at a time (others queue) and its trigger fires at most once per
`trigger_window_seconds`: the active run drains every restart event not yet handled (a
Prefect Variable holds its cursor; each workload's timeline artifact holds the identities
already handled), in batches, so a storm is one run and few Slack messages, and Slack thread
state is never written by two runs at once.

Events the trigger ignored inside its window are the responsibility of the run that window
fired: a triggered run stays until its window, plus the event persister's delay, is over.

While a run is up, the trigger rests (tasks/restarts/trigger.py): the run pauses it when it starts
and resumes it as it leaves, before its last read of the events, so the trigger creates a
run only when none is reading. A triggered run that still got queued behind the active one
(fired in the moment before the pause) is taken over: the active run ends it "Superseded"
(a completed state, not a cancellation) and stays until its window is over.

Events are validated at the edge (tasks/event_intake.py): one whose payload is not restart
evidence (a time that is not a time, a missing field), or whose classification fails, is
skipped and recorded (a log line and a `gpuops.event.rejected` event, without its values) and
the cursor moves past it with the rest, so it can never hold back the restarts after it.

The schedule's runs stand by: each stays up until its successor is due (`stay_seconds`,
counted from when it was due), so a restart is handled by a run that is already up, within
seconds, instead of waiting for a new run's process to start (seconds more); the trigger
covers the few seconds of each handover and any run that died. A standing run also posts
"recovered" replies in the lulls.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any
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
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.context import FlowRunContext
from prefect.states import Completed
from prefect.variables import Variable

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.loading import load_block
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.common.latest import LatestSaver
from gpuops.tasks.event_intake import EventIntake
from gpuops.tasks.restarts.events import JOB_FAILED, LiveRestartEvents, read_restart_events
from gpuops.tasks.restarts.evidence import JobFailure, RestartEvidence
from gpuops.tasks.restarts.history import load_all_timelines
from gpuops.tasks.restarts.posting import RestartReporter
from gpuops.tasks.restarts.trigger import set_restart_trigger, wake_restart_trigger_hook

CURSOR_VARIABLE = "gpuops-restarts-cursor"
# Events arrive live (the server's events websocket) and are read back once stored, every
# STORED_READ_EVERY, for what the live stream missed (`StoredReads`). Events can be stored after later ones
# (delivery retries, the event persister's batches): the first read of a run, and one every
# FULL_SCAN_EVERY, looks back OVERLAP behind the cursor; reads in between look back
# RECENT_OVERLAP. Event ids and restart identities dedupe what is seen twice.
STORED_READ_EVERY = timedelta(seconds=2)
OVERLAP = timedelta(minutes=2)
RECENT_OVERLAP = timedelta(seconds=15)
FULL_SCAN_EVERY = timedelta(seconds=30)
PERSIST_DELAY = timedelta(seconds=10)  # event received -> stored (persister flush: 1-5 s)
RECOVERY_CHECK_EVERY = timedelta(minutes=1)  # in a long run's lulls
SUPERSEDE_EVERY = timedelta(seconds=5)
BATCH_ATTEMPTS = 3  # a batch that fails (Prefect or Slack trouble) is tried again this often
LAST_ROUND_GATHER_S = 0.2  # after waking the trigger: events already on their way live


def _now() -> datetime:
    return datetime.now(UTC)


def _cursor_name(cluster: str) -> str:
    """Variable names allow lowercase letters, digits, dashes and underscores."""
    return f"{CURSOR_VARIABLE}-{re.sub(r'[^a-z0-9_-]+', '-', cluster.lower())}"[:255]


async def _cursor(name: str, default: datetime) -> datetime:
    value = await Variable.aget(name, default=None)  # type: ignore[func-returns-value]
    return datetime.fromisoformat(value) if value else default


def _window_end(created: datetime, trigger_window_seconds: float) -> datetime:
    """When a triggered run's events are all readable: its trigger window (events the
    trigger ignored in it are that run's to handle) plus the event persister's delay."""
    return created + timedelta(seconds=trigger_window_seconds) + PERSIST_DELAY


def _stay_until(me: FlowRun | None, started: datetime, stay_seconds: float,
                trigger_window_seconds: float) -> datetime:
    """A standing run (`stay_seconds`) stays until its slot on the schedule ends, counted
    from when it was due, not from when its process came up, so that it hands over to the
    next one on time. A triggered run stays until its window ends (`_window_end`)."""
    until = started
    if stay_seconds:
        due = me.expected_start_time if me and me.expected_start_time else started
        until = max(until, due + timedelta(seconds=stay_seconds))
    if trigger_window_seconds and me is not None and me.created is not None:
        until = max(until, _window_end(me.created, trigger_window_seconds))
    return until


class StoredReads:
    """Reads of this cluster's stored restart events, for what the live stream missed (a
    dropped connection): one every STORED_READ_EVERY, looking back OVERLAP behind the cursor
    on the first read and every FULL_SCAN_EVERY, RECENT_OVERLAP in between. The first read
    is awaited (a new run starts with what came before it); later ones go on beside the
    batches: a busy server can take a second or more to answer, and live events must not
    wait for that."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._last_read: datetime | None = None
        self._last_full: datetime | None = None
        self._reading: asyncio.Task | None = None

    @property
    def busy(self) -> bool:
        """A read is in flight."""
        return self._reading is not None

    async def collect(self, cursor: datetime, now: datetime) -> list[Any]:
        """What a finished read found; a new read is started when one is due."""
        found: list[Any] = []
        if self._reading is not None and self._reading.done():
            found, self._reading = self._reading.result(), None
        if self._reading is None and (self._last_read is None
                                      or now - self._last_read >= STORED_READ_EVERY):
            full = self._last_full is None or now - self._last_full >= FULL_SCAN_EVERY
            if full:
                self._last_full = now
            read = read_restart_events(self.cluster,
                                       cursor - (OVERLAP if full else RECENT_OVERLAP), now)
            if self._last_read is None:
                found += await read
            else:
                self._reading = asyncio.create_task(read)
            self._last_read = now
        return found

    async def last(self, cursor: datetime, now: datetime) -> list[Any]:
        """A read up to `now`, awaited: the run's last, once the trigger is awake again."""
        self.cancel()
        return await read_restart_events(self.cluster, cursor - RECENT_OVERLAP, now)

    def cancel(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            self._reading = None


async def _supersede(me: FlowRun | None, deadline: datetime, log: Any) -> datetime | None:
    if me is None or me.deployment_id is None:
        return None
    taken = await supersede_queued_runs(
        me.deployment_id, me.id, deadline,
        f"superseded: flow run {me.name} handled the restarts this run was for")
    if taken:
        log.info("took over %d queued run(s)", len(taken))
    return max(taken, default=None)


async def supersede_queued_runs(deployment_id: UUID, me: UUID, deadline: datetime,
                                 note: str) -> list[datetime]:
    """End the deployment's queued triggered runs whose trigger window (plus the event
    persister's delay) ends by `deadline`, as "Superseded" (completed with `note`: their
    work is done, by the run calling this, `me`, which must keep reading until the window
    ends it returns, one per run taken over). Runs of the schedule (no `event_id`) and runs
    already under way are left alone."""
    taken: list[datetime] = []
    async with get_client() as client:
        queued = await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))), limit=200)
        for run in queued:
            if run.id == me or not run.parameters.get("event_id") or run.created is None:
                continue
            ends = _window_end(run.created,
                               float(run.parameters.get("trigger_window_seconds") or 0))
            if ends > deadline:
                continue
            await client.set_flow_run_state(run.id, Completed(name="Superseded", message=note),
                                            force=True)
            taken.append(ends)
    return taken


async def _set_trigger(deployment_id: UUID | None, enabled: bool, log: Any) -> None:
    try:
        if await set_restart_trigger(deployment_id, enabled=enabled):
            log.info("restart trigger %s", "resumed" if enabled else "paused while this run "
                     "reads the events")
    except Exception as e:  # noqa: BLE001 - a trigger left as it was costs runs, not restarts
        log.warning("restart trigger not %s: %s", "resumed" if enabled else "paused", e)


@flow(name="restart-diagnostics", log_prints=True,
      on_cancellation=[wake_restart_trigger_hook], on_crashed=[wake_restart_trigger_hook])
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
    context = FlowRunContext.get()
    me = context.flow_run if context else None
    deployment_id = me.deployment_id if me else None
    await _set_trigger(deployment_id, False, log)  # this run reads them: no more runs needed
    try:  # the trigger wakes before the run's last read (below); a run that fails, here
        return await _handle_restarts(
            log, me, deployment_id, cluster_block=cluster_block, slack_block=slack_block,
            policy_block=policy_block, quiet_seconds=quiet_seconds,
            trigger_window_seconds=trigger_window_seconds, stay_seconds=stay_seconds,
            max_run_seconds=max_run_seconds, lookback_minutes=lookback_minutes)
    except BaseException:
        await _set_trigger(deployment_id, True, log)
        raise


async def _handle_restarts(log: Any, me: FlowRun | None, deployment_id: UUID | None, *,
                           cluster_block: str, slack_block: str, policy_block: str,
                           quiet_seconds: float, trigger_window_seconds: float,
                           stay_seconds: float, max_run_seconds: float,
                           lookback_minutes: int) -> dict:
    policy: RestartPolicy = await load_block(RestartPolicy, policy_block)
    rules = policy.cause_rules()  # validated when the Block was saved and again when loaded
    conn = await load_block(SlackConnection, slack_block)
    kube = (await load_block(KubernetesCluster, cluster_block)).kube()
    # Events are validated at the edge: a poisoned one is skipped and recorded, and the
    # cursor moves past it with the rest (event_intake.py).
    intake = EventIntake(RestartEvidence, log, what="restart evidence")
    job_intake = EventIntake(JobFailure, log, what="job failure")
    reporter = RestartReporter(policy, rules, conn, kube, intake, job_intake)
    started = _now()
    stay_until = _stay_until(me, started, stay_seconds, trigger_window_seconds)
    cursor_name = _cursor_name(kube.cluster_name)
    cursor = await _cursor(cursor_name, started - timedelta(minutes=lookback_minutes))
    # Saved in the background: a lost save only makes the next run re-read (and dedupe).
    cursor_saver = LatestSaver(
        lambda value: Variable.aset(cursor_name, value, overwrite=True))
    deadline = started + timedelta(seconds=max_run_seconds)
    seen: set[str] = set()
    retry: list[Any] = []  # a failed batch's events
    failures = 0
    quiet_since = last_recovery_check = last_supersede = _now()
    stored = StoredReads(kube.cluster_name)
    last_round = False  # the trigger is awake again: one more read, then the run ends
    async with LiveRestartEvents(kube.cluster_name, log) as live:
        while True:
            read_until = _now()
            events, retry = live.take() + retry, []  # as the server received them
            events += await (stored.last(cursor, read_until) if last_round
                             else stored.collect(cursor, read_until))
            events = list({str(e.id): e for e in events if str(e.id) not in seen}.values())
            if events:
                batch_started = time.monotonic()
                try:
                    jobs = [e for e in events if e.event == JOB_FAILED]
                    await reporter.handle_batch(intake.accept(
                        e for e in events if e.event != JOB_FAILED))
                    # After the batch's restarts: a Job's failure joins its pods' threads.
                    await reporter.handle_job_failures(job_intake.accept(jobs))
                except Exception as e:
                    # What was posted is in the timelines, so a retry skips it; a standing
                    # run that failed would leave the rest waiting for a new run to start.
                    failures += 1
                    if failures >= BATCH_ATTEMPTS:
                        raise
                    log.warning("a batch of %d restart event(s) failed (%r); trying again",
                                len(events), e)
                    retry = events
                    await asyncio.sleep(failures)
                    continue
                failures = 0
                log.info("handled %d restart event(s) in %.1f s", len(events),
                         time.monotonic() - batch_started)
                seen.update(str(e.id) for e in events)
                cursor = max(cursor, max(e.occurred for e in events))
                cursor_saver.save(cursor_name, cursor.isoformat())
                quiet_since = _now()
            if last_round:
                break
            if not events and reporter.waiting_job_failures:  # waiting for its pods' thread
                try:
                    await reporter.handle_job_failures([])
                except Exception as e:  # noqa: BLE001 - kept waiting; tried again next round
                    log.warning("a job failure could not be reported yet (%r)", e)
                    await asyncio.sleep(1)
            elif not events and _now() - last_recovery_check >= RECOVERY_CHECK_EVERY:  # a lull
                await reporter.check_recoveries(await load_all_timelines())
                last_recovery_check = _now()
            # Triggered runs queued behind this one need not start: it takes over their
            # windows. Always before stopping, so none is left waiting for a window read.
            stopping = not events and not stored.busy and _now() >= stay_until \
                and _now() - quiet_since >= timedelta(seconds=quiet_seconds)
            if stopping or _now() - last_supersede >= SUPERSEDE_EVERY:
                taken_until = await _supersede(me, deadline, log)
                last_supersede = _now()
                if taken_until is not None and taken_until > read_until:
                    stay_until, stopping = max(stay_until, taken_until), False
            if stopping or _now() >= deadline:
                # From now on a restart starts a new run; what reached the server before
                # that is this run's: one more round reads it (live, and stored).
                await _set_trigger(deployment_id, True, log)
                last_round = True
                await live.wait(LAST_ROUND_GATHER_S, gather=0)
                continue
            await live.wait(0.5)
    stored.cancel()
    try:
        await reporter.check_recoveries(await load_all_timelines())
    finally:
        await reporter.finish()  # whatever the last check did, the run's work is flushed
    try:
        await cursor_saver.flush()
    except Exception as e:  # noqa: BLE001 - the next run re-reads from an older cursor
        log.warning("restart cursor not saved: %s", e)
    counts = dict(reporter.counts)
    if intake.rejected or job_intake.rejected:
        counts["invalid"] = len(intake.rejected) + len(job_intake.rejected)
    log.info("restart diagnostics: %s", counts)
    return counts
