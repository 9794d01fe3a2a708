"""Approval requests as data (pure): Block Kit for requests and decisions, the digest of
what was asked, and the record every request keeps: the message it was posted as and who
may decide it."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

SECTION_LIMIT = 2900  # Slack caps a section's text at 3,000 characters
APPROVE_ACTION = "gpuops_approve"
REJECT_ACTION = "gpuops_reject"
APPROVAL_KEY = re.compile(r"[A-Za-z0-9-]+")  # flow run input keys allow nothing else


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked to approve."""

    title: str
    summary: str  # what will change
    reason: str  # why
    plan: str = ""  # the plan or diff, as text
    cost_impact: str | None = None
    targets: tuple[str, ...] = field(default_factory=tuple)


def _truncate(text: str, limit: int = SECTION_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 20] + "\n… (truncated)"


def button_value(flow_run_id: str, key: str) -> str:
    return json.dumps({"flow_run_id": flow_run_id, "key": key}, separators=(",", ":"))


def parse_button_value(value: str) -> tuple[UUID, str]:
    """The flow run and approval key a button names; `ValueError` or `TypeError` saying
    what is wrong when the value is not one `button_value` made (extra fields are
    ignored)."""
    try:
        data = json.loads(value)
    except (TypeError, json.JSONDecodeError) as e:
        raise ValueError("the button value is not JSON") from e
    if not isinstance(data, dict):
        raise TypeError("the button value is not a JSON object")
    run_id, key = data.get("flow_run_id"), data.get("key")
    try:
        flow_run_id = UUID(run_id) if isinstance(run_id, str) else None
    except ValueError:
        flow_run_id = None
    if flow_run_id is None:
        raise ValueError("the button value's flow_run_id is not a UUID")
    if not isinstance(key, str) or not APPROVAL_KEY.fullmatch(key):
        raise ValueError("the button value's key is not an approval key")
    return flow_run_id, key


def request_blocks(request: ApprovalRequest, *, flow_run_id: str, key: str,
                   run_url: str | None, timeout_s: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text",
                                    "text": _truncate(f"Approval needed: {request.title}", 150)}},
        {"type": "section", "text": {"type": "mrkdwn",
                                     "text": _truncate(f"*What will change*\n{request.summary}")}},
        {"type": "section", "text": {"type": "mrkdwn",
                                     "text": _truncate(f"*Why*\n{request.reason}")}},
    ]
    if request.plan:
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": "*Plan*\n```" + _truncate(request.plan, 2800) + "```"}})
    context = [f"Waits {timeout_s // 60} min; no answer is a *no*."]
    if request.cost_impact:
        context.insert(0, f"Cost impact: *{request.cost_impact}*")
    if run_url:
        context.append(f"<{run_url}|Open the run in Prefect>")
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": t}
                                                   for t in context]})
    value = button_value(flow_run_id, key)
    blocks.append({"type": "actions", "block_id": "gpuops_approval", "elements": [
        {"type": "button", "action_id": APPROVE_ACTION, "style": "primary", "value": value,
         "text": {"type": "plain_text", "text": "Approve"},
         "confirm": {"title": {"type": "plain_text", "text": "Approve this change?"},
                     "text": {"type": "mrkdwn", "text": _truncate(request.summary, 300)},
                     "confirm": {"type": "plain_text", "text": "Approve"},
                     "deny": {"type": "plain_text", "text": "Cancel"}}},
        {"type": "button", "action_id": REJECT_ACTION, "style": "danger", "value": value,
         "text": {"type": "plain_text", "text": "Reject"}},
    ]})
    return blocks


def decision_blocks(request_blocks_: list[dict[str, Any]], verdict: str
                    ) -> list[dict[str, Any]]:
    """The original message with its buttons replaced by the decision."""
    kept = [b for b in request_blocks_ if b.get("type") != "actions"]
    return kept + [{"type": "section", "text": {"type": "mrkdwn", "text": verdict}}]


def verdict_text(approved: bool, approver: str, when: str, comment: str = "") -> str:
    who = f"<@{approver}>" if approver and approver.startswith(("U", "W")) else approver
    text = f"{'✅ *Approved*' if approved else '❌ *Rejected*'} by {who} at {when}"
    return text + (f": {comment}" if comment else "")


def timeout_text(timeout_s: int) -> str:
    return (f"⌛ *Not approved*: no answer within {timeout_s // 60} min. "
            "Nothing was applied.")


def starter_refused_text(user: str) -> str:
    return (f"<@{user}> started this run, and its runbook requires someone else to approve "
            "it: that Approve was not counted. Still waiting for another approver.")


def plan_changed_text(approver: str, when: str) -> str:
    who = f"<@{approver}>" if approver and approver.startswith(("U", "W")) else approver
    return (f"⚠️ *Not applied*: the plan changed while this waited, so the approval by "
            f"{who} no longer applies ({when}). Nothing was applied.")


def request_digest(request: ApprovalRequest) -> str:
    """A hash of what a person is asked to approve. `reason` is left out: it explains the
    change, it is not the change (and may carry times that differ on every run)."""
    asked = {"title": request.title, "summary": request.summary, "plan": request.plan,
             "cost_impact": request.cost_impact, "targets": list(request.targets)}
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Approvers:
    """Who may decide a request, as its run's policy said when it asked: Slack user IDs,
    a Slack user group (its members are read when someone clicks), and the name of the
    policy Block it came from, if any (re-read when someone clicks: a person removed from
    it since can no longer decide), and who may not approve it even so: whoever started
    the run, when its runbook requires a second person (`not_by`; they may still reject)."""

    users: tuple[str, ...] = ()
    group: str | None = None
    policy_block: str | None = None
    not_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"users": list(self.users), "group": self.group,
                "policy_block": self.policy_block, "not_by": self.not_by}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Approvers:
        users = data.get("users") or []
        if not isinstance(users, list):
            raise TypeError(f"approvers.users {users!r} is not a list")
        return cls(users=tuple(str(u) for u in users), group=data.get("group") or None,
                   policy_block=data.get("policy_block") or None,
                   not_by=data.get("not_by") or None)


@dataclass(frozen=True)
class AskedApproval:
    """The record a run keeps of a request it posted (written right after posting, before
    anyone can be waited for): the receiver checks a click against the message it was
    posted as and the approvers it names; a re-run after a suspension must not post again
    nor apply an answer given for a different plan; the sweeper must know when silence
    becomes a "no".

    `approvers` is None in a record written by a gpuops that did not record them: nobody
    can decide such a request from Slack (the receiver refuses; the Prefect UI still can).
    """

    channel: str
    ts: str
    blocks: tuple[dict[str, Any], ...]
    digest: str
    deadline: datetime  # aware; no answer by then is a "no"
    timeout_s: int
    approvers: Approvers | None = None

    def posted_as(self, channel: str, ts: str) -> bool:
        """Is this the request shown in that Slack message?"""
        return (self.channel, self.ts) == (channel, ts)

    def to_json(self) -> dict[str, Any]:
        data = {"channel": self.channel, "ts": self.ts, "blocks": list(self.blocks),
                "digest": self.digest, "deadline": self.deadline.isoformat(),
                "timeout_s": self.timeout_s}
        if self.approvers is not None:
            data["approvers"] = self.approvers.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AskedApproval:
        deadline = datetime.fromisoformat(data["deadline"])
        if deadline.tzinfo is None:
            raise ValueError(f"approval deadline {data['deadline']!r} has no time zone")
        approvers = data.get("approvers")
        return cls(channel=str(data["channel"]), ts=str(data["ts"]),
                   blocks=tuple(data.get("blocks") or ()), digest=str(data["digest"]),
                   deadline=deadline, timeout_s=int(data["timeout_s"]),
                   approvers=None if approvers is None else Approvers.from_json(approvers))
