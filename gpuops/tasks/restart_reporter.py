"""Report restarts: classify, post or thread in Slack, record the workload's timeline.

The restart-diagnostics flow hands a `RestartReporter` each batch of new restart events.
Per (workload, cause) a batch costs one Slack message: a new parent, or one threaded reply
listing the batch's restarts. Parents are edited with the running count at most every
`parent_update_seconds`, and once more at the end of the run. Workloads are handled
concurrently; every Slack call is a Prefect task (retried, visible in the UI) held to gpuops'
own rate limits (slack_limits.py).
The state lives in the timeline artifacts (restart_history.py), saved in the background
right after each post.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.events import Event
from prefect.runtime import flow_run as runtime_flow_run
from slack_sdk.errors import SlackApiError

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.common.latest import LatestSaver
from gpuops.tasks import slack
from gpuops.tasks.diagnose import Diagnosis, diagnose
from gpuops.tasks.event_intake import EventIntake, handling_problem
from gpuops.tasks.evidence import RestartEvidence, Workload
from gpuops.tasks.kube import Kube
from gpuops.tasks.restart_filters import route_channel, skip_reason
from gpuops.tasks.restart_history import (
    Timeline,
    TimelineRow,
    load_timeline,
    save_timeline,
)
from gpuops.tasks.restart_recovery import workload_ready_since
from gpuops.tasks.restart_report import (
    Restart,
    RestartLinks,
    parent_blocks,
    recovered_blocks,
    reply_blocks,
    restart_markdown,
)
from gpuops.tasks.restart_rules import RuleSet
from gpuops.tasks.slack_limits import SlackLimits

SLACK_TROUBLE = {"ratelimited", "internal_error", "fatal_error", "service_unavailable",
                 "request_timeout"}  # Slack's errors that a later try may not get
THREAD_GONE = {"message_not_found", "thread_not_found", "channel_not_found", "is_archived"}
WORKLOADS_AT_ONCE = 8  # workloads of one batch handled concurrently
REPORTS_AT_ONCE = 4  # restart report artifacts written concurrently, in the background


def _now() -> datetime:
    return datetime.now(UTC)


def _worth_retrying(task, task_run, state) -> bool:
    """Retry transport and server trouble, not Slack's definite answers. Prefect calls this
    synchronously, also for async tasks, where a plain `state.result()` is a coroutine."""
    error = state.result(raise_on_failure=False, _sync=True)
    return not isinstance(error, SlackApiError) or error.response.get("error") in SLACK_TROUBLE


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
                 kube: Kube, intake: EventIntake[RestartEvidence]) -> None:
        self.policy, self.rules, self.conn, self.kube = policy, rules, conn, kube
        self.intake = intake  # where a restart that cannot be handled is rejected
        self.log = get_run_logger()
        self.limits = SlackLimits(policy, self.log)
        self.timelines: dict[str, Timeline] = {}
        self.parents: dict[str, _Parent] = {}  # thread ts -> parent
        self.counts: dict[str, int] = defaultdict(int)
        self.links = RestartLinks(flow_run_url=runtime_flow_run.ui_url)
        self._background: list[asyncio.Task] = []
        self._edits: asyncio.Task | None = None
        self._report_gate = asyncio.Semaphore(REPORTS_AT_ONCE)
        self._saves = LatestSaver(save_timeline)  # workload key -> its timeline

    async def finish(self) -> None:
        """Bring every edited thread's parent up to date, wait for the timelines to be saved
        (raising if one was not), the restart reports and the rate-limit records."""
        if self._edits is not None:
            await self._edits
        await self.update_parents(final=True)
        await self._saves.flush()
        await self.limits.finish()
        results = await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
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
        # next batch's Slack messages do not wait for them (`finish` waits).
        self._background.extend(asyncio.create_task(self._write_report(evidence, diagnosis))
                                for evidence, diagnosis in plan.handled)

    async def _write_report(self, evidence: RestartEvidence, diagnosis: Diagnosis) -> None:
        async with self._report_gate:  # a few at a time: they must not crowd out Slack's
            await acreate_markdown_artifact(
                markdown=restart_markdown(evidence, diagnosis, self.links),
                description=f"Restart {evidence.identity}: {diagnosis.title}")

    async def _post(self, timeline: Timeline, group: _Group) -> None:
        """One message for a (workload, cause) group: a reply in its thread, or a new parent.
        The batch has reserved its rate-limit slot."""
        restarts = [(evidence, diagnosis) for evidence, diagnosis, _ in group.items]
        latest_ev, latest_dx = restarts[-1]
        name = f"{latest_ev.workload.name}-{latest_dx.cause}"
        thread = group.thread
        message: slack.PostedMessage | None = None
        if thread is not None:
            message = slack.PostedMessage(thread.channel, thread.thread_ts)
            reply = reply_blocks(restarts, links=self.links)
            try:
                await post_to_slack(self.conn, thread.channel, reply.text, reply.blocks, name,
                                    thread_ts=thread.thread_ts)
            except SlackApiError as e:
                if e.response.get("error") not in THREAD_GONE:
                    raise
                # The parent was deleted (or the channel archived): start a new thread.
                self.log.warning("thread %s in %s is gone (%s); posting a new parent",
                                 thread.thread_ts, thread.channel, e.response.get("error"))
                message = None
            else:
                parent = self.parents.setdefault(
                    message.ts, _Parent(message, timeline, restarts[-1]))
                parent.latest = restarts[-1]
                parent.replies += 1
        if message is None:
            channel = route_channel(latest_ev, self.policy)
            new = parent_blocks(restarts, links=self.links, total_restarts=len(restarts))
            if thread is not None:  # a second message for this group: it needs its own slot
                await self.limits.post({channel: 1})
            message = await post_to_slack(self.conn, channel, new.text, new.blocks, name)
            self.parents[message.ts] = _Parent(message, timeline, restarts[-1],
                                               edited_at=time.monotonic())
        for *_, row in group.items:
            row.channel, row.thread_ts, row.reported = message.channel, message.ts, "posted"

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
        blocks = parent_blocks([parent.latest], links=self.links,
                               total_restarts=parent.timeline.count_since(dx.cause, since),
                               first_seen=_first_seen(parent.timeline, dx.cause, since))
        try:
            await update_in_slack(self.conn, parent.message, blocks.text, blocks.blocks,
                                  f"{ev.workload.name}-{dx.cause}")
        except SlackApiError as e:
            if e.response.get("error") not in THREAD_GONE:
                raise
            self.log.warning("parent %s is gone (%s); not edited", parent.message.ts,
                             e.response.get("error"))
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
                in_thread = [r for r in timeline.rows if r.thread_ts == row.thread_ts]
                last = max(datetime.fromisoformat(r.time) for r in in_thread)
                since = await asyncio.to_thread(workload_ready_since, self.kube, namespace,
                                                kind, name, row.pod)
                if since is None or now - max(since, last) < ready_for:
                    continue
                message = recovered_blocks(
                    cluster=self.kube.cluster_name,
                    workload=Workload(kind=kind, name=name, namespace=namespace),
                    ready_minutes=(now - max(since, last)).total_seconds() / 60,
                    restarts=len(in_thread), links=self.links)
                await self.limits.post({row.channel: 1})
                await post_to_slack(self.conn, row.channel, message.text, message.blocks,
                                    f"{name}-recovered", thread_ts=row.thread_ts)
                for r in in_thread:
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
                       exit=_exit(evidence), reported="")


def _exit(evidence: RestartEvidence) -> str:
    term = evidence.last_state.terminated
    if term is None:
        return evidence.last_state.waiting_reason or evidence.state.waiting_reason
    return f"{term.reason or 'Terminated'} ({term.exit_code})"


def _first_seen(timeline: Timeline, cause: str, since: datetime) -> str | None:
    times = [r.time for r in timeline.rows if r.cause == cause
             and datetime.fromisoformat(r.time) >= since]
    return min(times) if times else None
