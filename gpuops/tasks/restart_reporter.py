"""Report restarts: classify, post or thread in Slack, record the workload's timeline.

The restart-diagnostics flow drives a `RestartReporter` over the events of one run; the
Slack calls are Prefect tasks (retried, visible in the UI), the state lives in the
timeline artifacts (restart_history.py).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from prefect import get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact
from prefect.concurrency.asyncio import rate_limit
from prefect.runtime import flow_run as runtime_flow_run
from pydantic import ValidationError
from slack_sdk.errors import SlackApiError

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.tasks import slack
from gpuops.tasks.diagnose import Diagnosis, diagnose
from gpuops.tasks.evidence import RestartEvidence, Workload
from gpuops.tasks.kube import Kube
from gpuops.tasks.restart_filters import route_channel, skip_reason
from gpuops.tasks.restart_history import Timeline, TimelineRow, load_timeline, save_timeline
from gpuops.tasks.restart_recovery import workload_ready_since
from gpuops.tasks.restart_report import (
    RestartLinks,
    parent_blocks,
    recovered_blocks,
    reply_blocks,
    restart_markdown,
)
from gpuops.tasks.restart_rules import RuleSet

SLACK_RATE_LIMIT = "gpuops-slack-posts"
THREAD_GONE = {"message_not_found", "thread_not_found", "channel_not_found", "is_archived"}


def _now() -> datetime:
    return datetime.now(UTC)


async def ensure_slack_rate_limit(per_minute: int) -> None:
    """gpuops' own cap on Slack posts: a Prefect global rate limit, created on demand."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.upsert_global_concurrency_limit_by_name(
            SLACK_RATE_LIMIT, per_minute, slot_decay_per_second=per_minute / 60)


def _worth_retrying(task, task_run, state) -> bool:
    """Retry transport and server trouble, not Slack's definite answers (rate limits are
    already retried inside slack-sdk)."""
    error = state.result(raise_on_failure=False)
    return not (isinstance(error, SlackApiError) and error.response.get("error") != "ratelimited")


@task(retries=3, retry_delay_seconds=[1, 5, 15], retry_condition_fn=_worth_retrying,
      task_run_name="post-restart-{thread}")
def post_to_slack(conn: SlackConnection, channel: str, text: str, blocks: list[dict],
                  thread: str, thread_ts: str | None = None) -> slack.PostedMessage:
    return slack.post_message(conn, channel, text, blocks, thread_ts=thread_ts)


@task(retries=3, retry_delay_seconds=[1, 5, 15], retry_condition_fn=_worth_retrying,
      task_run_name="update-parent-{thread}")
def update_in_slack(conn: SlackConnection, message: slack.PostedMessage, text: str,
                    blocks: list[dict], thread: str) -> None:
    slack.update_message(conn, message, text, blocks)


class RestartReporter:
    """One run's work: per workload, classify, post or thread, and record the timeline."""

    def __init__(self, policy: RestartPolicy, rules: RuleSet, conn: SlackConnection,
                 kube: Kube) -> None:
        self.policy, self.rules, self.conn, self.kube = policy, rules, conn, kube
        self.log = get_run_logger()
        self.timelines: dict[str, Timeline] = {}
        self.counts: dict[str, int] = defaultdict(int)
        self.links = RestartLinks(flow_run_url=runtime_flow_run.ui_url)

    async def timeline(self, workload_key: str) -> Timeline:
        if workload_key not in self.timelines:
            self.timelines[workload_key] = await load_timeline(workload_key)
        return self.timelines[workload_key]

    async def handle(self, payload: dict, event_id: str) -> None:
        try:
            evidence = RestartEvidence.model_validate(payload)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            self.log.error("event %s rejected: invalid restart evidence: %s: %s", event_id,
                           where, first["msg"])
            self.counts["invalid"] += 1
            return
        timeline = await self.timeline(evidence.workload_key)
        if timeline.has(evidence.identity):
            self.counts["duplicate"] += 1
            return
        diagnosis = diagnose(evidence, self.rules)
        now = _now()
        row = TimelineRow(time=evidence.observed_at, identity=evidence.identity,
                          pod=evidence.pod, container=evidence.container,
                          container_kind=evidence.container_kind,
                          restart_count=evidence.restart_count, cause=diagnosis.cause,
                          confidence=round(diagnosis.confidence, 2), node=evidence.node,
                          exit=_exit(evidence), reported="")
        why_not = skip_reason(evidence, diagnosis, self.policy, now)
        if why_not:
            row.reported = f"skipped: {why_not}"
            self.counts["skipped"] += 1
        else:
            await self._post(evidence, diagnosis, timeline, row, now)
            self.counts["posted"] += 1
        timeline.add(row)
        # Record at once: a run that dies after posting must not post the same restart again.
        await save_timeline(timeline)
        await acreate_markdown_artifact(
            markdown=restart_markdown(evidence, diagnosis, self.links),
            description=f"Restart {evidence.identity}: {diagnosis.title}")

    async def _post(self, evidence: RestartEvidence, diagnosis: Diagnosis, timeline: Timeline,
                    row: TimelineRow, now: datetime) -> None:
        thread = timeline.thread_for(diagnosis.cause, now,
                                     timedelta(minutes=self.policy.thread_window_minutes))
        name = f"{evidence.workload.name}-{diagnosis.cause}"
        await rate_limit(SLACK_RATE_LIMIT, strict=True)
        if thread is None:
            message = parent_blocks([(evidence, diagnosis)], links=self.links, total_restarts=1)
            posted = post_to_slack(self.conn, route_channel(evidence, self.policy),
                                   message.text, message.blocks, name)
            row.channel, row.thread_ts = posted.channel, posted.ts
        else:
            row.channel, row.thread_ts = thread.channel, thread.thread_ts
            reply = reply_blocks(evidence, diagnosis, links=self.links)
            try:
                post_to_slack(self.conn, row.channel, reply.text, reply.blocks, name,
                              thread_ts=row.thread_ts)
            except SlackApiError as e:
                if e.response.get("error") not in THREAD_GONE:
                    raise
                # The parent was deleted (or the channel archived): start a new thread.
                self.log.warning("thread %s in %s is gone (%s); posting a new parent",
                                 row.thread_ts, row.channel, e.response.get("error"))
                message = parent_blocks([(evidence, diagnosis)], links=self.links,
                                        total_restarts=1)
                posted = post_to_slack(self.conn, route_channel(evidence, self.policy),
                                       message.text, message.blocks, name)
                row.channel, row.thread_ts = posted.channel, posted.ts
                row.reported = "posted"
                return
            since = now - timedelta(minutes=self.policy.summary_window_minutes)
            parent = parent_blocks([(evidence, diagnosis)], links=self.links,
                                   total_restarts=timeline.count_since(diagnosis.cause, since) + 1,
                                   first_seen=_first_seen(timeline, diagnosis.cause, since))
            await rate_limit(SLACK_RATE_LIMIT, strict=True)
            update_in_slack(self.conn, slack.PostedMessage(row.channel, row.thread_ts),
                            parent.text, parent.blocks, name)
        row.reported = "posted"

    async def check_recoveries(self, timelines: list[Timeline]) -> None:
        """Reply "recovered" in open threads whose workload has been Ready long enough."""
        now = _now()
        ready_for = timedelta(minutes=self.policy.recovered_after_minutes)
        for timeline in timelines:
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
                post_to_slack(self.conn, row.channel, message.text, message.blocks,
                              f"{name}-recovered", thread_ts=row.thread_ts)
                for r in in_thread:
                    r.recovered_at = now.isoformat()
                await save_timeline(timeline)
                self.counts["recovered"] += 1


def _exit(evidence: RestartEvidence) -> str:
    term = evidence.last_state.terminated
    if term is None:
        return evidence.last_state.waiting_reason or evidence.state.waiting_reason
    return f"{term.reason or 'Terminated'} ({term.exit_code})"


def _first_seen(timeline: Timeline, cause: str, since: datetime) -> str | None:
    times = [r.time for r in timeline.rows if r.cause == cause
             and datetime.fromisoformat(r.time) >= since]
    return min(times) if times else None
