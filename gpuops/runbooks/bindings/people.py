"""People: post to Slack, ask for approval.

An approval shows the run's dry-run plan (`StepContext.plan`) and the targets it changes; the
approvals layer binds the answer to that plan (a changed plan needs a new approval), and,
when the runbook requires a second person, refuses an Approve by whoever started the run. In a dry
run nobody is asked: the prediction is a "yes", so the plan shows what would follow one.
"""

from __future__ import annotations

import asyncio

from gpuops.common.redact import redact_text
from gpuops.runbooks.bindings import Prediction, predicts, runs
from gpuops.runbooks.catalog import ApprovalArgs, ApprovalOutput, SlackPostArgs, SlackPosted
from gpuops.runbooks.context import StepContext
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import request_approval
from gpuops.tasks.clients import slack

DRY_RUN_TS = "dry-run"


@runs("slack-post")
async def slack_post(ctx: StepContext, args: SlackPostArgs) -> SlackPosted:
    conn = ctx.need_slack()
    text = redact_text(args.text, conn.secrets())
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    posted = await asyncio.to_thread(slack.post_message, conn, args.channel, text, blocks)
    return SlackPosted(channel=posted.channel, ts=posted.ts)


@predicts("slack-post")
async def predict_slack_post(ctx: StepContext, args: SlackPostArgs) -> Prediction:
    first = args.text.splitlines()[0] if args.text else ""
    return Prediction(SlackPosted(channel=args.channel, ts=DRY_RUN_TS),
                      (f"post to {args.channel}: {first[:120]}",))


def approval_key(runbook: str, step: str) -> str:
    """A flow run input key per runbook and step (letters, digits and dashes only): a
    runbook run by another asks in the same flow run, under its own key."""
    return f"approval-{runbook}-{step.replace('_', '-')}"


@runs("request-approval")
async def ask_approval(ctx: StepContext, args: ApprovalArgs) -> ApprovalOutput:
    if ctx.policy is None:
        raise RuntimeError("request-approval needs an approval policy and the run has none")
    not_by = ctx.started_by if ctx.separate_approver else None
    reason = args.reason or f"runbook {ctx.runbook}"
    if not_by:  # the reason is not part of the digest: the plan stays what binds
        reason += f"\nStarted by {not_by}; someone else must approve."
    request = ApprovalRequest(title=args.title, summary=args.summary, reason=reason,
                              plan=ctx.plan, targets=ctx.targets)
    answer = await request_approval(request, policy=ctx.policy, slack_conn=ctx.need_slack(),
                                    key=approval_key(ctx.runbook, ctx.step), not_by=not_by)
    return ApprovalOutput(approved=answer.approved, approver=answer.approver,
                          comment=answer.comment)


@predicts("request-approval")
async def predict_approval(ctx: StepContext, args: ApprovalArgs) -> Prediction:
    return Prediction(ApprovalOutput(approved=True, approver="(dry run: assumed yes)"),
                      (f"ask for approval: {args.title}",))
