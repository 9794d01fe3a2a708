"""Report restarts: classify, post or thread in Slack, record the workload's timeline.

The restart-diagnostics flow hands a `RestartReporter` each batch of new restart events.
Per (workload, cause) a batch costs one Slack message: a new parent, or one threaded reply
listing the batch's restarts. Parents are edited with the running count at most every
`parent_update_seconds`, and once more at the end of the run. Workloads are handled
concurrently; every Slack call is a Prefect task (retried, visible in the UI) held to gpuops'
own rate limits (slack_limits.py).
The state lives in the timeline artifacts (history.py), saved in the background
right after each post.

A thread's parent links to the report artifact of the restart it shows. Messages are not
held back for the report: it is written beside them, and a new parent is edited once with
the link as soon as the report exists (one edit per new thread, counted against gpuops'
Slack update limit); a reply carries the link only when its report was already written, and
its parent shows the new link at its next edit. Every message links the workload's timeline
(a keyed artifact: known before anything is written). The run itself is not linked: a
standing run handles hundreds of restarts.

A Job's own failure (`gpuops.job.failed`) is a reply in the open threads of the Job's pods'
failures. The Job's last pod may be reported just after the Job itself: a failure that finds
no thread yet waits up to `JOB_FAILURE_GRACE` for one, then gets a parent of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.events import Event, emit_event
from prefect.runtime import flow_run as runtime_flow_run
from prefect.settings import get_current_settings
from slack_sdk.errors import SlackApiError

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.common.errors import SlackArchived, SlackError, SlackNotFound, TemporaryError
from gpuops.common.latest import LatestSaver
from gpuops.common.prefect_api import state_error
from gpuops.tasks.clients import slack
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.event_intake import EventIntake, handling_problem
from gpuops.tasks.restarts.diagnose import Diagnosis, diagnose
from gpuops.tasks.restarts.evidence import JobFailure, RestartEvidence, Workload
from gpuops.tasks.restarts.filters import job_skip_reason, route_channel, skip_reason
from gpuops.tasks.restarts.history import (
    Timeline,
    TimelineRow,
    load_timeline,
    save_timeline,
)
from gpuops.tasks.restarts.node_fault import hardware_xid_event
from gpuops.tasks.restarts.recovery import workload_ready_since
from gpuops.tasks.restarts.report import (
    Restart,
    RestartLinks,
    SlackMessage,
    exit_summary,
    job_failure_blocks,
    job_failure_summary,
    parent_blocks,
    recovered_blocks,
    reply_blocks,
    report_title,
    restart_markdown,
)
from gpuops.tasks.restarts.rules import RuleSet
from gpuops.tasks.restarts.slack_limits import SlackLimits

THREAD_GONE = (SlackNotFound, SlackArchived)  # the parent deleted, or its channel archived
WORKLOADS_AT_ONCE = 8  # workloads of one batch handled concurrently
REPORTS_AT_ONCE = 4  # restart report artifacts written concurrently, in the background
JOB_FAILURE_GRACE = timedelta(seconds=15)
JOB_FAILED_CAUSE = "job-failed"  # the thread of a Job failure none of whose pods was reported


def _now() -> datetime:
    return datetime.now(UTC)


def _worth_retrying(task, task_run, state) -> bool:
    """Retry transport and server trouble, not Slack's definite answers. Prefect calls this
    synchronously, also for async tasks, where a plain `state.result()` is a coroutine."""
    error = state_error(state)
    if isinstance(error, SlackApiError):  # the SDK's own, had it not come through the client
        error = slack.slack_error(error)
    return not isinstance(error, SlackError) or isinstance(error, TemporaryError)


@task(retries=3, retry_delay_seconds=[1, 5, 15], retry_condition_fn=_worth_retrying,
      task_run_name="post-restart-{thread}", cache_policy=NO_CACHE)
async def post_to_slack(conn: SlackConnection, channel: str, text: str, blocks: list[dict],
                        thread: str, thread_ts: str | None = None) -> slack.PostedMessage:
    return await asyncio.to_thread(slack.post_message, conn, channel, text, blocks,
                                   thread_ts=thread_ts)


@task(retries=3, retry_delay_seconds=[1, 5, 15], retry_condition_fn=_worth_retrying,
      task_run_name="update-parent-{thread}", cache_policy=NO_CACHE)
async def update_in_slack(conn: SlackConnection, message: slack.PostedMessage, text: str,
                          blocks: list[dict], thread: str) -> None:
    await asyncio.to_thread(slack.update_message, conn, message, text, blocks)


@dataclass
class _Parent:
    """A thread's parent message, to be edited with the running count."""

    message: slack.PostedMessage
    timeline: Timeline
    latest: Restart
    links: RestartLinks
    edited_at: float = float("-inf")  # time.monotonic() of our last edit in this run
    replies: int = 0  # replies posted under it in this run
    edited_replies: int = 0  # replies its last edit counted

    @property
    def stale(self) -> bool:
        return self.replies != self.edited_replies


@dataclass
class _Group:
    """A batch's restarts of one (workload, cause), the thread they join (None: a new one)
    and the channel their message goes to."""

    items: list[tuple[RestartEvidence, Diagnosis, TimelineRow]]
    thread: TimelineRow | None
    channel: str


@dataclass
class _WorkloadPlan:
    timeline: Timeline
    handled: list[Restart] = field(default_factory=list)
    skipped: list[TimelineRow] = field(default_factory=list)
    groups: list[_Group] = field(default_factory=list)


class RestartReporter:
    """One run's work: per workload, classify, post or thread, and record the timeline."""

    def __init__(self, policy: RestartPolicy, rules: RuleSet, conn: SlackConnection,
                 kube: Kube, intake: EventIntake[RestartEvidence],
                 job_intake: EventIntake[JobFailure] | None = None) -> None:
        self.policy, self.rules, self.conn, self.kube = policy, rules, conn, kube
        self.intake = intake  # where a restart that cannot be handled is rejected
        self.job_intake: EventIntake[Any] = job_intake or intake  # and a Job failure
        self.log = get_run_logger()
        self.limits = SlackLimits(policy, self.log)
        self.timelines: dict[str, Timeline] = {}
        self.parents: dict[str, _Parent] = {}  # thread ts -> parent
        self.counts: dict[str, int] = defaultdict(int)
        self.links = RestartLinks(flow_run_url=runtime_flow_run.ui_url)
        self.ui_url = get_current_settings().ui_url  # None: no links
        self._reports: dict[str, asyncio.Task] = {}  # restart identity -> its report's id
        self._linking: list[asyncio.Task] = []  # parents to point at their report
        self._waiting_jobs: list[tuple[JobFailure, Event]] = []
        self._edits: asyncio.Task | None = None
        self._report_gate = asyncio.Semaphore(REPORTS_AT_ONCE)
        self._saves = LatestSaver(save_timeline)  # workload key -> its timeline

    async def finish(self) -> None:
        """Post the Job failures still waiting for a thread, bring every edited thread's
        parent up to date, wait for the timelines to be saved (raising if one was not), the
        restart reports and the rate-limit records."""
        await self.handle_job_failures([], final=True)
        if self._edits is not None:
            await self._edits
        for linked in await asyncio.gather(*self._linking, return_exceptions=True):
            if isinstance(linked, BaseException):
                self.log.warning("a parent was not linked to its restart report: %s", linked)
        self._linking.clear()
        await self.update_parents(final=True)
        await self._saves.flush()
        await self.limits.finish()
        results = await asyncio.gather(*self._reports.values(), return_exceptions=True)
        self._reports.clear()
        for error in (r for r in results if isinstance(r, BaseException)):
            self.log.warning("a restart report artifact was not written: %s", error)

    async def timeline(self, workload_key: str) -> Timeline:
        if workload_key not in self.timelines:
            self.timelines[workload_key] = await load_timeline(workload_key)
        return self.timelines[workload_key]

    async def handle_batch(self, restarts: Sequence[tuple[RestartEvidence, Event]]) -> None:
        """Handle validated restarts (`EventIntake.accept`); raise after the others if one
        workload failed (its restarts stay unrecorded, so the next run handles them)."""
        by_workload: dict[str, list[tuple[RestartEvidence, Event]]] = defaultdict(list)
        for evidence, event in restarts:
            by_workload[evidence.workload_key].append((evidence, event))
        gate = asyncio.Semaphore(WORKLOADS_AT_ONCE)

        async def bounded(work: Any) -> Any:
            async with gate:
                return await work
        plans = await asyncio.gather(*(bounded(self._plan(key, found))
                                       for key, found in by_workload.items()))
        # The batch's Slack slots, taken before any of its messages.
        await self.limits.post(Counter(group.channel for plan in plans for group in plan.groups))
        results = await asyncio.gather(*(bounded(self._report(plan)) for plan in plans),
                                       return_exceptions=True)
        # Parent edits run beside the next batches (one round at a time), not before them.
        if self._edits is None or self._edits.done():
            if self._edits is not None:
                self._edits.result()  # a failed round fails the run
            self._edits = asyncio.create_task(self.update_parents(final=False))
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    async def _plan(self, workload_key: str, found: list[tuple[RestartEvidence, Event]]
                    ) -> _WorkloadPlan:
        """Classify a workload's new restarts: skipped ones, and one group per cause with
        the thread and channel its message goes to. A restart whose classification fails
        is rejected (it would fail the same way every time), not the batch."""
        timeline = await self.timeline(workload_key)
        now = _now()
        plan = _WorkloadPlan(timeline)
        by_cause: dict[str, list[tuple[RestartEvidence, Diagnosis, TimelineRow]]] = {}
        for evidence, event in sorted(found, key=lambda f: (f[0].observed_at,
                                                             f[0].restart_count)):
            if timeline.has(evidence.identity) or any(
                    e.identity == evidence.identity for e, _ in plan.handled):
                self.counts["duplicate"] += 1
                continue
            try:
                diagnosis = diagnose(evidence, self.rules)
                row = _row(evidence, diagnosis)
                why_not = skip_reason(evidence, diagnosis, self.policy, now)
            except Exception as e:  # noqa: BLE001 - pure code on this event's content
                self.intake.reject(event, handling_problem("classifying the restart", e))
                continue
            plan.handled.append((evidence, diagnosis))
            fault = hardware_xid_event(evidence, diagnosis)
            if fault is not None:  # what quarantines the node listens to (node_fault.py)
                emit_event(**fault)
            if why_not:
                row.reported = f"skipped: {why_not}"
                plan.skipped.append(row)
                self.counts["skipped"] += 1
            else:
                by_cause.setdefault(diagnosis.cause, []).append((evidence, diagnosis, row))
        window = timedelta(minutes=self.policy.thread_window_minutes)
        for cause, items in by_cause.items():
            thread = timeline.thread_for(cause, now, window)
            channel = thread.channel if thread else route_channel(items[-1][0], self.policy)
            plan.groups.append(_Group(items, thread, channel))
        return plan

    def _timeline_url(self, timeline: Timeline) -> str | None:
        """The timeline's keyed artifact in the UI (`/artifacts/key/<key>`)."""
        return f"{self.ui_url}/artifacts/key/{timeline.key}" if self.ui_url else None

    def _report_url(self, report: asyncio.Task | None) -> str | None:
        """The UI route of a written report artifact (`/artifacts/artifact/<id>`), or None
        while it is being written (or if writing it failed)."""
        if report is None or not self.ui_url or not report.done() or report.cancelled() \
                or report.exception() is not None:
            return None
        return f"{self.ui_url}/artifacts/artifact/{report.result()}"

    def _links(self, timeline: Timeline, report: asyncio.Task | None) -> RestartLinks:
        """Links for a message now: the workload's timeline, and the restart's own report
        if it is written already."""
        return RestartLinks(flow_run_url=self.links.flow_run_url,
                            artifact_url=self._report_url(report),
                            timeline_url=self._timeline_url(timeline))

    async def _link_report(self, parent: _Parent, identity: str, report: asyncio.Task, *,
                           edit: bool) -> None:
        """Point `parent` at the report of the restart it shows once that is written; `edit`
        it at once (a new parent), else at its next edit (it has a new reply)."""
        with contextlib.suppress(Exception):  # a failed report is logged by `finish`
            await asyncio.shield(report)
        url = self._report_url(report)
        if url is None or parent.latest[0].identity != identity:
            return  # not written, or a later restart's report is the one to show
        parent.links = RestartLinks(flow_run_url=parent.links.flow_run_url, artifact_url=url,
                                    timeline_url=parent.links.timeline_url)
        if edit:
            await self.limits.update(1)
            await self._edit_parent(parent)

    async def _report(self, plan: _WorkloadPlan) -> None:
        timeline = plan.timeline
        for row in plan.skipped:
            timeline.add(row)
        for group in plan.groups:
            await self._post(timeline, group)
            for *_, row in group.items:
                timeline.add(row)
            self.counts["posted"] += len(group.items)
            # Recorded at once, in the background: this run's next batches work from its own
            # copy, and a write can wait seconds on a busy server. Only a run that dies in
            # those seconds leaves these for the next run to post again.
            self._saves.save(timeline.workload_key, timeline)
        if plan.skipped and not plan.groups:
            self._saves.save(timeline.workload_key, timeline)
        # The per-restart reports are history, not state: written in the background so the
        # next batch's Slack messages do not wait for them (`finish` waits). The reports
        # the messages are about were started as each message went out.
        for evidence, diagnosis in plan.handled:
            self._report_of(evidence, diagnosis)

    def _report_of(self, evidence: RestartEvidence, diagnosis: Diagnosis, *,
                   at_once: bool = False) -> asyncio.Task:
        """The task writing a restart's report (once per restart, also when a failed batch
        is tried again)."""
        task = self._reports.get(evidence.identity)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.create_task(self._write_report(evidence, diagnosis, at_once=at_once))
            self._reports[evidence.identity] = task
        return task

    async def _write_report(self, evidence: RestartEvidence, diagnosis: Diagnosis, *,
                            at_once: bool) -> Any:
        """One restart's report artifact; its id. Background ones go a few at a time, so
        they do not crowd out Slack's calls; one a message links to goes at once."""
        async with contextlib.nullcontext() if at_once else self._report_gate:
            links = RestartLinks(flow_run_url=self.links.flow_run_url,
                                 timeline_url=self._timeline_url(await self.timeline(
                                     evidence.workload_key)))
            return await acreate_markdown_artifact(
                markdown=restart_markdown(evidence, diagnosis, links),
                description=report_title(evidence, diagnosis))

    async def _post(self, timeline: Timeline, group: _Group) -> None:
        """One message for a (workload, cause) group: a reply in its thread, or a new parent.
        The batch has reserved its rate-limit slot."""
        restarts = [(evidence, diagnosis) for evidence, diagnosis, _ in group.items]
        latest_ev, latest_dx = restarts[-1]
        name = f"{latest_ev.workload.name}-{latest_dx.cause}"
        thread = group.thread
        links = self._links(timeline, self._reports.get(latest_ev.identity))
        message: slack.PostedMessage | None = None
        if thread is not None:
            message = slack.PostedMessage(thread.channel, thread.thread_ts)
            reply = reply_blocks(restarts, links=links)
            try:
                await post_to_slack(self.conn, thread.channel, reply.text, reply.blocks, name,
                                    thread_ts=thread.thread_ts)
            except THREAD_GONE as e:
                # The parent was deleted (or the channel archived): start a new thread.
                self.log.warning("thread %s in %s is gone (%s); posting a new parent",
                                 thread.thread_ts, thread.channel, e.code)
                message = None
            else:
                parent = self.parents.setdefault(
                    message.ts, _Parent(message, timeline, restarts[-1], links))
                parent.latest, parent.links = restarts[-1], links
                parent.replies += 1
                self._linking_later(parent, latest_dx, latest_ev, links, edit=False)
        if message is None:
            channel = route_channel(latest_ev, self.policy)
            new = parent_blocks(restarts, links=links, total_restarts=len(restarts))
            if thread is not None:  # a second message for this group: it needs its own slot
                await self.limits.post({channel: 1})
            message = await post_to_slack(self.conn, channel, new.text, new.blocks, name)
            parent = _Parent(message, timeline, restarts[-1], links,
                             edited_at=time.monotonic())
            self.parents[message.ts] = parent
            self._linking_later(parent, latest_dx, latest_ev, links, edit=True)
        for *_, row in group.items:
            row.channel, row.thread_ts, row.reported = message.channel, message.ts, "posted"

    def _linking_later(self, parent: _Parent, diagnosis: Diagnosis, latest: RestartEvidence,
                       links: RestartLinks, *, edit: bool) -> None:
        """The message is out: write the report it is about (at once, not behind the
        background ones) and link the parent to it when it is written."""
        report = self._report_of(latest, diagnosis, at_once=True)
        if links.artifact_url is None and self.ui_url:
            self._linking.append(asyncio.create_task(
                self._link_report(parent, latest.identity, report, edit=edit)))

    # --- a Job's own failure ------------------------------------------------------------------

    @property
    def waiting_job_failures(self) -> int:
        return len(self._waiting_jobs)

    async def handle_job_failures(self, failures: Sequence[tuple[JobFailure, Event]], *,
                                  final: bool = False) -> None:
        """Report Jobs that gave up, in their pods' threads; those that find no thread wait
        for one (`JOB_FAILURE_GRACE`) unless this is the run's last call (`final`)."""
        waiting, self._waiting_jobs = [*self._waiting_jobs, *failures], []
        now = _now()
        for at, (failure, event) in enumerate(waiting):
            try:
                await self._handle_job_failure(failure, event, now, final)
            except BaseException:
                self._waiting_jobs += waiting[at:]  # tried again by the next call
                raise

    async def _handle_job_failure(self, failure: JobFailure, event: Event, now: datetime,
                                  final: bool) -> None:
        timeline = await self.timeline(failure.workload_key)
        if timeline.has(failure.identity):
            self.counts["duplicate"] += 1
            return
        threads = self._job_threads(timeline, now)
        # The Job's last pod may be reported just after the Job: wait for its pods' failures
        # (a thread, and as many as the Job counts), a little, so the thread reads in order.
        if not final and now - failure.observed_at < JOB_FAILURE_GRACE and (
                not threads or _pod_failures_since(timeline, failure) < failure.failed_pods):
            self._waiting_jobs.append((failure, event))
            return
        links = RestartLinks(timeline_url=self._timeline_url(timeline))
        try:
            messages = (job_failure_blocks(failure, in_thread=True, links=links),
                        job_failure_blocks(failure, in_thread=False, links=links))
        except Exception as e:  # noqa: BLE001 - pure code on this event's content
            self.job_intake.reject(event, handling_problem("rendering the job failure", e))
            return
        await self._report_job_failure(failure, timeline, threads, now, *messages)

    def _job_threads(self, timeline: Timeline, now: datetime) -> list[TimelineRow]:
        """The open threads of the Job's pods' failures: the latest row of each."""
        window = timedelta(minutes=self.policy.thread_window_minutes)
        return [row for row in timeline.open_threads()
                if row.reported == "posted" and now - datetime.fromisoformat(row.time)
                <= window]

    async def _report_job_failure(self, failure: JobFailure, timeline: Timeline,
                                  threads: list[TimelineRow], now: datetime,
                                  reply: SlackMessage, parent: SlackMessage) -> None:
        why_not = job_skip_reason(failure, self.policy, now)
        if why_not:
            timeline.add(_job_row(failure, JOB_FAILED_CAUSE, f"skipped: {why_not}"))
            self.counts["skipped"] += 1
            self._saves.save(timeline.workload_key, timeline)
            return
        name = f"{failure.name}-job-failed"
        posted = 0
        if threads:
            await self.limits.post(Counter(row.channel for row in threads))
            for row in threads:
                try:
                    await post_to_slack(self.conn, row.channel, reply.text, reply.blocks, name,
                                        thread_ts=row.thread_ts)
                except THREAD_GONE:
                    continue
                job_row = _job_row(failure, row.cause, "job-failed")
                job_row.channel, job_row.thread_ts = row.channel, row.thread_ts
                timeline.add(job_row)
                posted += 1
        if not posted:  # no pod of it was reported (a deadline that struck a running pod)
            channel = route_channel(failure, self.policy)
            await self.limits.post({channel: 1})
            message = await post_to_slack(self.conn, channel, parent.text, parent.blocks, name)
            job_row = _job_row(failure, JOB_FAILED_CAUSE, "job-failed")
            job_row.channel, job_row.thread_ts = message.channel, message.ts
            timeline.add(job_row)
        self.counts["job-failed"] += 1
        self._saves.save(timeline.workload_key, timeline)

    async def update_parents(self, *, final: bool) -> None:
        """Edit the parents whose threads got replies: those not edited within
        `parent_update_seconds`, or all of them at the end of the run (`final`)."""
        due = [p for p in self.parents.values() if p.stale and (final or time.monotonic()
               - p.edited_at >= self.policy.parent_update_seconds)]
        if due:
            await self.limits.update(len(due))
            await asyncio.gather(*(self._edit_parent(parent) for parent in due))

    async def _edit_parent(self, parent: _Parent) -> None:
        since = _now() - timedelta(minutes=self.policy.summary_window_minutes)
        ev, dx = parent.latest
        replies = parent.replies  # a reply posted while this edit is on its way needs another
        blocks = parent_blocks([parent.latest], links=parent.links,
                               total_restarts=parent.timeline.count_since(dx.cause, since),
                               first_seen=_first_seen(parent.timeline, dx.cause, since))
        try:
            await update_in_slack(self.conn, parent.message, blocks.text, blocks.blocks,
                                  f"{ev.workload.name}-{dx.cause}")
        except THREAD_GONE as e:
            self.log.warning("parent %s is gone (%s); not edited", parent.message.ts, e.code)
        parent.edited_replies, parent.edited_at = replies, time.monotonic()

    async def check_recoveries(self, timelines: list[Timeline]) -> None:
        """Reply "recovered" in open threads whose workload has been Ready long enough."""
        now = _now()
        ready_for = timedelta(minutes=self.policy.recovered_after_minutes)
        for loaded in timelines:
            # This run's own copy when it has one: a later save must keep what it marks.
            timeline = self.timelines.setdefault(loaded.workload_key, loaded)
            namespace, kind, name = timeline.workload
            for row in timeline.open_threads():
                thread_rows = [r for r in timeline.rows if r.thread_ts == row.thread_ts]
                in_thread = [r for r in thread_rows if r.reported == "posted"]
                if not in_thread:
                    continue
                last = max(datetime.fromisoformat(r.time) for r in in_thread)
                since = await asyncio.to_thread(workload_ready_since, self.kube, namespace,
                                                kind, name, row.pod)
                if since is None or now - max(since, last) < ready_for:
                    continue
                message = recovered_blocks(
                    cluster=self.kube.cluster_name,
                    workload=Workload(kind=kind, name=name, namespace=namespace),
                    ready_minutes=(now - max(since, last)).total_seconds() / 60,
                    restarts=len(in_thread),
                    links=RestartLinks(timeline_url=self._timeline_url(timeline)))
                await self.limits.post({row.channel: 1})
                await post_to_slack(self.conn, row.channel, message.text, message.blocks,
                                    f"{name}-recovered", thread_ts=row.thread_ts)
                for r in thread_rows:
                    r.recovered_at = now.isoformat()
                self._saves.save(timeline.workload_key, timeline)
                self.counts["recovered"] += 1
        await self._saves.flush()


def _row(evidence: RestartEvidence, diagnosis: Diagnosis) -> TimelineRow:
    return TimelineRow(time=evidence.observed_at.isoformat(), identity=evidence.identity,
                       pod=evidence.pod, container=evidence.container,
                       container_kind=evidence.container_kind,
                       restart_count=evidence.restart_count, cause=diagnosis.cause,
                       confidence=round(diagnosis.confidence, 2), node=evidence.node,
                       exit=exit_summary(evidence), reported="")


def _pod_failures_since(timeline: Timeline, failure: JobFailure) -> int:
    """The failed pods (not restarts) of the workload recorded since the Job started."""
    since = failure.started_at
    return sum(1 for r in timeline.rows if ("/terminated-" in r.identity
                                            or "/pod-failed-" in r.identity)
               and (since is None or datetime.fromisoformat(r.time) >= since))


def _job_row(failure: JobFailure, cause: str, reported: str) -> TimelineRow:
    return TimelineRow(time=failure.observed_at.isoformat(), identity=failure.identity,
                       pod="", container="", container_kind="",
                       restart_count=failure.failed_pods, cause=cause, confidence=1.0,
                       node="", exit=job_failure_summary(failure), reported=reported)


def _first_seen(timeline: Timeline, cause: str, since: datetime) -> str | None:
    times = [r.time for r in timeline.rows if r.cause == cause
             and datetime.fromisoformat(r.time) >= since]
    return min(times) if times else None
