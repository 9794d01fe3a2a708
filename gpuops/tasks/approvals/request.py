"""Approvals: one input model, one way to ask, whether the answer comes from Slack or the UI.

The flow run posts a Block Kit message with Approve/Reject buttons, then writes the
request's record (tasks/approvals/record.py): the message it was posted as and who may
decide, as its policy says at that moment. Only then does it wait, with
`wait_for_input=Approval`. The Slack receiver (sensors/slack_receiver.py) checks a click
against that record and resumes the run with an `Approval`; a person in the Prefect UI
resumes it with the same form (a name is required). A timeout is a "no" either way:

- Short waits pause (`pause_flow_run`): the process stays, enforces its own deadline
  (`anyio.fail_after`) a little before the server's pause expiry, resumes itself with a
  rejection and ends cleanly, instead of the server failing the run.
- Waits longer than the policy's `suspend_after_s` suspend (`suspend_flow_run`): the process
  exits and the run starts again from the top when answered. The re-run finds the record
  (on the server, so a re-run on another worker finds it): it posts nothing twice, and an
  approval given for a plan that has since changed is not applied. No process waits, so
  the approval sweeper (sensors/approval_sweeper.py) resumes overdue runs with the same
  timeout "no". Prefect's ERROR line for a suspension is logged at INFO
  (tasks/approvals/suspension_log.py).

The decision is then written into the request's Slack message. A request can outlive that
message (Slack was reset since it asked, e.g. a restarted local fake): the decision is
still recorded in the run, a warning names the message, and a "yes" is not applied, since
the approval trail it belongs to is gone; the run ends NotApproved and says to ask again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import anyio
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.responses import SetStateStatus
from prefect.context import FlowRunContext
from prefect.events import emit_event
from prefect.exceptions import FlowPauseTimeout, NotPausedError
from prefect.flow_runs import asuspend_flow_run, pause_flow_run
from prefect.input import RunInput
from prefect.input.run_input import keyset_from_base_key
from prefect.runtime import flow_run as runtime_flow_run
from pydantic import ConfigDict, Field

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import SlackNotFound
from gpuops.common.events import event_name, flow_run_resource
from gpuops.common.redact import redact_text
from gpuops.tasks.approvals.block_kit import (
    APPROVAL_KEY,
    ApprovalRequest,
    Approvers,
    AskedApproval,
    decision_blocks,
    plan_changed_text,
    request_blocks,
    request_digest,
    timeout_text,
    verdict_text,
)
from gpuops.tasks.approvals.record import (
    asked_input_key,
    keep_asked_approval,
    read_asked_approval,
)
from gpuops.tasks.approvals.suspension_log import log_suspensions_as_info
from gpuops.tasks.clients import slack

TIMEOUT_APPROVER = "timeout"
GPUOPS_APPROVER = "gpuops"  # gpuops itself did not apply a "yes" (plan changed, message gone)


Decision = tuple["Approval", str, str]  # the answer, the event's outcome, the Slack verdict


class Approval(RunInput):
    """The answer to an approval request (the Prefect UI shows this as the resume form)."""

    approved: bool = Field(False, description="Approve the change?")
    approver: str = Field(min_length=1, pattern=r"\S", description="Your name (required): "
                          "who decided. From Slack, the user ID of the person who clicked.")
    comment: str = Field("", description="Why (optional; shown in Slack and in the run's "
                         "state).")


def approval_form(not_by: str | None = None) -> type[Approval]:
    """The resume form; with `not_by`, one the server refuses when that person approves
    (the run started by them must be approved by someone else; they may still reject).
    Prefect validates a resume against the form's JSON Schema, so a refused answer leaves
    the run waiting. The UI's name is typed, not vouched for: Prefect OSS has no user
    identity; Slack's clicker is (the receiver refuses the starter's click first)."""
    if not not_by:
        return Approval

    def forbid(schema: dict[str, Any]) -> None:
        schema["if"] = {"properties": {"approved": {"const": True}}, "required": ["approved"]}
        schema["then"] = {"properties": {"approver": {"not": {"const": not_by}}}}
        approver = schema["properties"]["approver"]
        approver["description"] += f" Not {not_by}, who started the run: its runbook " \
            "requires someone else to approve it."

    return type("Approval", (Approval,), {"__module__": __name__,
                                          "model_config": ConfigDict(json_schema_extra=forbid)})


def timed_out(timeout_s: int) -> Approval:
    return Approval(approved=False, approver=TIMEOUT_APPROVER,
                    comment=f"no answer within {timeout_s} s")


def not_approved_message(approval: Approval) -> str:
    """The state message of a run whose change was not approved: who said no, and why."""
    if approval.approver == TIMEOUT_APPROVER:
        return f"Not approved: {approval.comment} (timeout); nothing was applied."
    if approval.approver == GPUOPS_APPROVER:
        return f"Not applied: {approval.comment}; nothing was applied."
    who = (f"by {approval.approver}" if approval.approver.strip()
           else "in the Prefect UI (no name given)")
    why = f": {approval.comment}" if approval.comment else ""
    return f"Rejected {who}{why}; nothing was applied."


async def resume_approval(flow_run_id: UUID, answer: dict[str, Any]) -> None:
    """Resume a run waiting on an approval (paused or suspended). Raises `NotPausedError`
    when it no longer waits, also when someone else resumed it a moment before (the
    server's answer then is ABORT, which `aresume_flow_run` lets pass silently)."""
    async with get_client() as client:
        result = await client.resume_flow_run(flow_run_id, run_input=answer)
    reason = getattr(result.details, "reason", "") or ""
    if result.status == SetStateStatus.ABORT:
        raise NotPausedError(f"flow run {flow_run_id} is not waiting: {reason}")
    if result.status == SetStateStatus.REJECT:
        if result.state is not None and result.state.is_failed():
            raise FlowPauseTimeout(f"flow run {flow_run_id} can no longer be resumed")
        raise RuntimeError(f"flow run {flow_run_id} refused the answer: {reason}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@task(retries=3, retry_delay_seconds=2, task_run_name="post-approval-request",
      cache_policy=NO_CACHE)
def post_approval_request(conn: SlackConnection, channel: str, title: str,
                          blocks: list[dict]) -> slack.PostedMessage:
    return slack.post_message(conn, channel, f"Approval needed: {title}", blocks)


@task(retries=3, retry_delay_seconds=2, task_run_name="record-approval-decision",
      cache_policy=NO_CACHE)
def record_decision(conn: SlackConnection, message: slack.PostedMessage, blocks: list[dict],
                    verdict: str) -> bool:
    """Show the decision in the request's message; False when that message is gone."""
    try:
        slack.update_message(conn, message, verdict, decision_blocks(blocks, verdict))
    except SlackNotFound as e:
        get_run_logger().warning(
            "the approval request's Slack message (channel %s, ts %s) no longer exists (%s): "
            "the decision is recorded in this run only", message.channel, message.ts, e.code)
        return False
    return True


def _ui_description(request: ApprovalRequest) -> str:
    parts = [f"## {request.title}", f"**What will change**\n\n{request.summary}",
             f"**Why**\n\n{request.reason}"]
    if request.cost_impact:
        parts.append(f"**Cost impact:** {request.cost_impact}")
    if request.plan:
        parts.append(f"```\n{request.plan}\n```")
    parts.append("Set *approved* and your name, then resume. No answer is a no.")
    return "\n\n".join(parts)


def _redacted(request: ApprovalRequest, secrets: list[str]) -> ApprovalRequest:
    return ApprovalRequest(
        title=redact_text(request.title, secrets), summary=redact_text(request.summary, secrets),
        reason=redact_text(request.reason, secrets), plan=redact_text(request.plan, secrets),
        cost_impact=request.cost_impact, targets=request.targets)


async def request_approval(request: ApprovalRequest, *, policy: ApprovalPolicy,
                           slack_conn: SlackConnection, key: str = "approval",
                           not_by: str | None = None) -> Approval:
    """Ask for approval in Slack and in the UI; wait; return the decision (never raises on
    rejection or timeout: the caller decides what a "no" means, `not_approved_message`
    says it). A suspending wait exits the process the first time (Prefect's `Pause`
    signal) and returns on the re-run. `not_by`: who may not approve (the run's starter,
    when a second person must); their Approve is refused and the wait goes on."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise RuntimeError("request_approval must be called inside a flow run")
    if not APPROVAL_KEY.fullmatch(key):
        raise ValueError(f"approval key {key!r} may hold only letters, digits and dashes")
    flow_run_id = context.flow_run.id
    request = _redacted(request, slack_conn.secrets())
    digest = request_digest(request)
    deployed = context.flow_run.deployment_id is not None
    # A re-run after a suspension carries on as one, even if the policy changed meanwhile.
    asked = await _asked_before(flow_run_id, key) if deployed else None
    suspend = asked is not None or policy.timeout_s > policy.suspend_after_s
    if suspend and not deployed:
        get_run_logger().info("approval %r waits up to %d s, but only runs of a deployment "
                              "can be suspended: pausing instead (this process waits)",
                              key, policy.timeout_s)
        suspend = False
    resource = flow_run_resource(flow_run_id, **{"gpuops.approval-key": key})
    if asked is None:
        asked = _ask(request, digest, policy=policy, slack_conn=slack_conn,
                     flow_run_id=str(flow_run_id), key=key, not_by=not_by)
        await keep_asked_approval(flow_run_id, key, asked)  # before anyone can be waited for
        emit_event(event_name("approval", "requested"), resource=resource,
                   payload={"title": request.title, "targets": list(request.targets),
                            "channel": asked.channel, "ts": asked.ts})
    form = approval_form(not_by).with_initial_data(description=_ui_description(request),
                                                   approved=False)
    if suspend:
        decision = await _wait_suspended(form, key, policy, asked, digest)
    else:
        decision = await _wait_paused(form, str(flow_run_id), key, policy)
    approval, outcome = _shown_in_slack(slack_conn, asked, decision)
    emit_event(event_name("approval", outcome), resource=resource,
               payload={"approver": approval.approver, "comment": approval.comment,
                        "title": request.title})
    return approval


def _shown_in_slack(slack_conn: SlackConnection, asked: AskedApproval,
                    decision: Decision) -> tuple[Approval, str]:
    """Write the decision into the request's message; a "yes" whose message is gone is
    not applied (see the module docstring)."""
    approval, outcome, verdict = decision
    shown = record_decision(slack_conn, slack.PostedMessage(asked.channel, asked.ts),
                            list(asked.blocks), verdict)
    if shown or not approval.approved:
        return approval, outcome
    return Approval(approved=False, approver=GPUOPS_APPROVER, comment=(
        f"the approval by {approval.approver} was not applied: the request's Slack message "
        f"(channel {asked.channel}, ts {asked.ts}) no longer exists (Slack was reset since "
        "the run asked, e.g. a restarted local Slack fake); start a new run to ask again")
    ), "message-gone"


def _ask(request: ApprovalRequest, digest: str, *, policy: ApprovalPolicy,
         slack_conn: SlackConnection, flow_run_id: str, key: str,
         not_by: str | None = None) -> AskedApproval:
    blocks = request_blocks(request, flow_run_id=flow_run_id, key=key,
                            run_url=runtime_flow_run.ui_url, timeout_s=policy.timeout_s)
    message = post_approval_request(slack_conn, policy.channel, request.title, blocks)
    return AskedApproval(channel=message.channel, ts=message.ts, blocks=tuple(blocks),
                         digest=digest, timeout_s=policy.timeout_s,
                         deadline=datetime.now(UTC) + timedelta(seconds=policy.timeout_s),
                         approvers=Approvers(users=tuple(policy.approvers),
                                             group=policy.approver_group,
                                             policy_block=policy.saved_as,
                                             not_by=not_by))


async def _asked_before(flow_run_id: UUID, key: str) -> AskedApproval | None:
    """The request this run posted before it suspended, if this is the re-run of that
    attempt. A fired pause key says so; a new attempt (flow retry) clears the keys and asks
    again."""
    async with get_client() as client:
        run = await client.read_flow_run(flow_run_id)
    if key not in (run.empirical_policy.pause_keys or set()):
        return None
    asked = await read_asked_approval(flow_run_id, key)
    if asked is None:
        raise RuntimeError(f"approval {key!r} of flow run {flow_run_id} was already asked "
                           f"in this attempt, but its request record "
                           f"{asked_input_key(key)!r} is missing; nothing was applied. Use "
                           "one key per approval in a flow, or start a new run to ask again.")
    return asked


def _as_plain(answer: Approval) -> Approval:
    return Approval(approved=answer.approved, approver=answer.approver, comment=answer.comment)


def _decided(approval: Approval, timeout_s: int) -> Decision:
    if approval.approver == TIMEOUT_APPROVER:
        return approval, "timed-out", timeout_text(timeout_s)
    verdict = verdict_text(approval.approved, approval.approver or "someone in the UI",
                           _now(), approval.comment)
    return approval, "granted" if approval.approved else "rejected", verdict


async def _wait_suspended(form: type[Approval], key: str, policy: ApprovalPolicy,
                          asked: AskedApproval, digest: str) -> Decision:
    log_suspensions_as_info()
    approval = _as_plain(await asuspend_flow_run(
        wait_for_input=form, key=key, timeout=policy.timeout_s + policy.expiry_grace_s))
    if approval.approved and asked.digest != digest:
        # The cluster changed while the run was suspended: the approval was for another
        # plan. Not applying is safer and simpler than asking again (which could repeat
        # without end on a busy cluster); the next run plans afresh and asks about that.
        # A "no" stands as given: it is a "no" for either plan.
        get_run_logger().warning("approval %r by %s was for a different plan; not applying",
                                 key, approval.approver)
        return (Approval(approved=False, approver=GPUOPS_APPROVER,
                         comment=f"the plan changed while waiting; the approval by "
                                 f"{approval.approver} was for the plan as it was"),
                "plan-changed", plan_changed_text(approval.approver, _now()))
    return _decided(approval, asked.timeout_s)


async def _wait_paused(form: type[Approval], flow_run_id: str, key: str,
                       policy: ApprovalPolicy) -> Decision:
    try:
        with anyio.fail_after(policy.timeout_s):
            approval = _as_plain(await pause_flow_run(
                wait_for_input=form,  # type: ignore[arg-type]  # Prefect's overloads miss a RunInput
                key=key, poll_interval=policy.poll_interval_s,
                timeout=policy.timeout_s + policy.expiry_grace_s))
    except TimeoutError:
        approval = await _close_on_timeout(flow_run_id, key, policy)
    return _decided(approval, policy.timeout_s)


async def _close_on_timeout(flow_run_id: str, key: str, policy: ApprovalPolicy) -> Approval:
    """Resume our own paused run with a "no"; if someone answered at the same instant,
    their answer stands."""
    answer = timed_out(policy.timeout_s)
    try:
        await resume_approval(UUID(flow_run_id), answer.model_dump(
            include={"approved", "approver", "comment"}))
        return answer
    except NotPausedError:
        answered = await Approval.aload(keyset_from_base_key(f"paused-{key}"))
        return _as_plain(answered)
