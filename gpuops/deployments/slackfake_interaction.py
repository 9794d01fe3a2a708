"""A button click as Slack sends it (pure): the `block_actions` payload, form-encoded and
signed with the app's signing secret, so the real receiver cannot tell the fake from Slack.

Slack signs `v0:{timestamp}:{body}` with HMAC-SHA256 and sends `v0=<hex>` in
`X-Slack-Signature`, the timestamp in `X-Slack-Request-Timestamp`; the body is
`payload=<JSON>` as `application/x-www-form-urlencoded`.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from gpuops.deployments.slackfake_state import APP_ID, TEAM_DOMAIN, TEAM_ID


class NoSuchButton(LookupError):
    """The message has no button with that action_id (any more: an answer removes them)."""


@dataclass(frozen=True)
class Clicker:
    """Who clicks, and the click's own identifiers (fresh for every click)."""

    user_id: str
    trigger_id: str
    action_ts: str
    response_url: str


def user_name(user_id: str) -> str:
    """The name the fake gives a user id (the same as its users.info answers)."""
    return f"user-{user_id.lower()}"


def _generated_block_id(ts: str, index: int) -> str:
    """Slack gives every block without a block_id a generated one; ours is stable per block."""
    return hashlib.sha256(f"{ts}/{index}".encode()).hexdigest()[:5]


def with_block_ids(blocks: list[Any], ts: str) -> list[dict[str, Any]]:
    """A copy of `blocks` in which every block has a block_id, as Slack shows a message."""
    shown = []
    for index, block in enumerate(b for b in blocks if isinstance(b, dict)):
        block = copy.deepcopy(block)
        block.setdefault("block_id", _generated_block_id(ts, index))
        shown.append(block)
    return shown


def find_button(blocks: list[dict[str, Any]], action_id: str) -> tuple[dict, dict]:
    """The (block, button) a click on `action_id` comes from: an actions block's element or
    a section's accessory."""
    for block in blocks:
        candidates = (block.get("elements") if block.get("type") == "actions"
                      else [block.get("accessory")])
        for element in candidates or []:
            if (isinstance(element, dict) and element.get("type") == "button"
                    and element.get("action_id") == action_id):
                return block, element
    raise NoSuchButton(action_id)


def block_actions_payload(message: dict[str, Any], *, channel: str, action_id: str,
                          clicker: Clicker, is_ephemeral: bool = False) -> dict[str, Any]:
    """The payload Slack sends when `clicker` presses the button `action_id` of `message`
    (a message as the Web API shows it: ts, text, blocks...). Raises NoSuchButton."""
    blocks = with_block_ids(message.get("blocks") or [], message["ts"])
    block, button = find_button(blocks, action_id)
    action = {"action_id": action_id, "block_id": block["block_id"], "type": "button",
              "text": button.get("text"), "action_ts": clicker.action_ts}
    for optional in ("value", "style"):
        if optional in button:
            action[optional] = button[optional]
    name = user_name(clicker.user_id)
    return {
        "type": "block_actions",
        "user": {"id": clicker.user_id, "username": name, "name": name, "team_id": TEAM_ID},
        "api_app_id": APP_ID,
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel,
                      "is_ephemeral": is_ephemeral},
        "trigger_id": clicker.trigger_id,
        "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": channel.lstrip("#")},
        "message": {**message, "team": TEAM_ID, "blocks": blocks},
        "state": {"values": {}},
        "response_url": clicker.response_url,
        "actions": [action],
    }


def form_body(payload: dict[str, Any]) -> bytes:
    """`payload=<JSON>`, form-encoded, as Slack posts interactions."""
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256)
    return "v0=" + digest.hexdigest()


def signed_headers(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": str(timestamp),
            "X-Slack-Signature": signature(secret, timestamp, body)}
