"""What a click on a gpuops approval button says, parsed at the receiver's door (pure).

Slack posts an interaction as a form with one field, `payload`, holding JSON. gpuops' only
interactions are its Approve/Reject buttons: a `block_actions` payload with one button
action whose value `button_value` made. Anything else is a `MalformedInteraction` whose
message says what is wrong (the receiver answers it with HTTP 400 and one log line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs
from uuid import UUID

from gpuops.tasks.approvals.block_kit import APPROVE_ACTION, REJECT_ACTION, parse_button_value

FORM = "application/x-www-form-urlencoded"


class MalformedInteraction(ValueError):
    """A request that is not a click on a gpuops approval button."""


@dataclass(frozen=True)
class Click:
    """Who clicked which button, in which message, for which flow run and approval key."""

    user: str
    channel: str
    message_ts: str
    approved: bool
    flow_run_id: UUID
    key: str


def parse_click_request(body: bytes, content_type: str) -> Click:
    """A click from the HTTP body Slack posts (form-encoded, one `payload` field)."""
    if content_type != FORM:
        raise MalformedInteraction(f"the content type is {content_type or 'missing'!r}, "
                                   f"not {FORM!r}")
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, errors="strict")
    except (UnicodeDecodeError, ValueError) as e:
        raise MalformedInteraction("the body is not a UTF-8 form") from e
    payloads = form.get("payload") or []
    if len(payloads) != 1:
        raise MalformedInteraction("the form has no single `payload` field")
    try:
        payload = json.loads(payloads[0])
    except json.JSONDecodeError as e:
        raise MalformedInteraction("`payload` is not JSON") from e
    return parse_click_payload(payload)


def parse_click_payload(payload: Any) -> Click:
    """A click from the interaction payload (HTTP and Socket Mode alike)."""
    if not isinstance(payload, dict):
        raise MalformedInteraction("`payload` is not a JSON object")
    if payload.get("type") != "block_actions":
        raise MalformedInteraction(f"the interaction type {payload.get('type')!r} is not "
                                   "'block_actions'")
    actions = payload.get("actions")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        raise MalformedInteraction("`actions` is not a list of one action")
    action = actions[0]
    if action.get("type") != "button" or action.get("action_id") not in (APPROVE_ACTION,
                                                                       REJECT_ACTION):
        raise MalformedInteraction(f"the action {action.get('action_id')!r} "
                                   f"({action.get('type')!r}) is not a gpuops approval button")
    try:
        flow_run_id, key = parse_button_value(cast(str, action.get("value")))  # else TypeError
    except (TypeError, ValueError) as e:
        raise MalformedInteraction(str(e)) from e
    return Click(user=_text_at(payload, "user", "id"), channel=_text_at(payload, "channel", "id"),
                 message_ts=_text_at(payload, "message", "ts"),
                 approved=action["action_id"] == APPROVE_ACTION, flow_run_id=flow_run_id,
                 key=key)


def _text_at(payload: dict[str, Any], name: str, field: str) -> str:
    part = payload.get(name)
    value = part.get(field) if isinstance(part, dict) else None
    if not isinstance(value, str) or not value:
        raise MalformedInteraction(f"`{name}.{field}` is missing")
    return value
