"""Approvals: one input model, one way to ask, whether the answer comes from Slack or the UI.

The flow run posts a Block Kit message with Approve/Reject buttons, then pauses with
`wait_for_input=Approval`. The Slack receiver (sensors/slack_receiver.py) or a person in
the Prefect UI resumes it with an `Approval`. A timeout is a "no": the flow enforces its
own deadline (`anyio.fail_after`) a little before the server's pause expiry, resumes itself
with a rejection and ends cleanly, instead of the server failing the run.
"""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
from prefect import task
from prefect.context import FlowRunContext
from prefect.events import emit_event
from prefect.exceptions import NotPausedError
from prefect.flow_runs import aresume_flow_run, pause_flow_run
from prefect.input import RunInput
from prefect.input.run_input import keyset_from_base_key
from prefect.runtime import flow_run as runtime_flow_run
from pydantic import Field

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.redact import redact_text
from gpuops.tasks import slack
from gpuops.tasks.approval_blocks import (
    ApprovalRequest,
    decision_blocks,
    request_blocks,
    timeout_text,
    verdict_text,
)

TIMEOUT_APPROVER = "timeout"


class Approval(RunInput):
    """The answer to an approval request (the Prefect UI shows this as the resume form)."""

    approved: bool = Field(False, description="Approve the change?")
    approver: str = Field("", description="Who decided: a Slack user ID, or your name.")
    comment: str = Field("", description="Why (optional).")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@task(retries=3, retry_delay_seconds=2, task_run_name="post-approval-request")
def post_approval_request(conn: SlackConnection, channel: str, title: str,
                          blocks: list[dict]) -> slack.PostedMessage:
    return slack.post_message(conn, channel, f"Approval needed: {title}", blocks)


@task(retries=3, retry_delay_seconds=2, task_run_name="record-approval-decision")
def record_decision(conn: SlackConnection, message: slack.PostedMessage, blocks: list[dict],
                    verdict: str) -> None:
    slack.update_message(conn, message, verdict, decision_blocks(blocks, verdict))


def _ui_description(request: ApprovalRequest) -> str:
    parts = [f"## {request.title}", f"**What will change**\n\n{request.summary}",
             f"**Why**\n\n{request.reason}"]
    if request.cost_impact:
        parts.append(f"**Cost impact:** {request.cost_impact}")
    if request.plan:
        parts.append(f"```\n{request.plan}\n```")
    parts.append("Set *approved* and your name, then resume. No answer is a no.")
    return "\n\n".join(parts)


async def request_approval(request: ApprovalRequest, *, policy: ApprovalPolicy,
                           slack_conn: SlackConnection, key: str = "approval") -> Approval:
    """Ask for approval in Slack and in the UI; wait; return the decision (never raises on
    rejection or timeout: the caller decides what a "no" means)."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise RuntimeError("request_approval must be called inside a flow run")
    flow_run_id = str(context.flow_run.id)
    secrets = slack_conn.secrets()
    request = ApprovalRequest(
        title=redact_text(request.title, secrets), summary=redact_text(request.summary, secrets),
        reason=redact_text(request.reason, secrets), plan=redact_text(request.plan, secrets),
        cost_impact=request.cost_impact, targets=request.targets)
    blocks = request_blocks(request, flow_run_id=flow_run_id, key=key,
                            run_url=runtime_flow_run.ui_url, timeout_s=policy.timeout_s)
    message = post_approval_request(slack_conn, policy.channel, request.title, blocks)
    resource = {"prefect.resource.id": f"prefect.flow-run.{flow_run_id}",
                "gpuops.approval-key": key}
    emit_event("gpuops.approval.requested", resource=resource,
               payload={"title": request.title, "targets": list(request.targets),
                        "channel": message.channel, "ts": message.ts})
    form = Approval.with_initial_data(description=_ui_description(request), approved=False)
    try:
        with anyio.fail_after(policy.timeout_s):
            approval = await pause_flow_run(
                wait_for_input=form, key=key, poll_interval=policy.poll_interval_s,
                timeout=policy.timeout_s + policy.expiry_grace_s)
        approval = Approval(approved=approval.approved, approver=approval.approver,
                            comment=approval.comment)
        verdict = verdict_text(approval.approved, approval.approver or "someone in the UI",
                               _now(), approval.comment)
    except TimeoutError:
        approval = await _close_on_timeout(flow_run_id, key, policy)
        verdict = (timeout_text(policy.timeout_s) if approval.approver == TIMEOUT_APPROVER
                   else verdict_text(approval.approved, approval.approver, _now(),
                                     approval.comment))
    record_decision(slack_conn, message, blocks, verdict)
    outcome = ("timed-out" if approval.approver == TIMEOUT_APPROVER
               else "granted" if approval.approved else "rejected")
    emit_event(f"gpuops.approval.{outcome}", resource=resource,
               payload={"approver": approval.approver, "comment": approval.comment,
                        "title": request.title})
    return approval


async def _close_on_timeout(flow_run_id: str, key: str, policy: ApprovalPolicy) -> Approval:
    """Resume our own paused run with a "no"; if someone answered at the same instant,
    their answer stands."""
    timed_out = Approval(approved=False, approver=TIMEOUT_APPROVER,
                         comment=f"no answer within {policy.timeout_s} s")
    try:
        await aresume_flow_run(flow_run_id, run_input=timed_out.model_dump(
            include={"approved", "approver", "comment"}))
        return timed_out
    except NotPausedError:
        answered = await Approval.aload(keyset_from_base_key(f"paused-{key}"))
        return Approval(approved=answered.approved, approver=answered.approver,
                        comment=answered.comment)
