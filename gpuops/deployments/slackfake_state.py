"""What the Slack fake remembers and how it is configured, shared by its Web API handlers
(`slackfake`) and its web page (`slackfake_web`)."""

from __future__ import annotations

import itertools
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from gpuops.common.settings import DEFAULT_LOCAL_SLACK_USER

TEAM_ID = "T0GPUOPS"
TEAM_DOMAIN = "gpuops-fake"
BOT_USER_ID = "U0GPUOPSBOT"
BOT_ID = "B0GPUOPSBOT"
APP_ID = "A0GPUOPS"
DEFAULT_LOCAL_USER = DEFAULT_LOCAL_SLACK_USER

# Fields kept only for inspection through /_fake/messages, not part of Slack's message shape.
_INTERNAL_FIELDS = ("channel", "updates", "ephemeral_to")
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
RESPONSE_URL_USES = 5  # Slack accepts up to five responses per response_url


class SlackError(Exception):
    """An `ok: false` answer; `code` is Slack's error string (`message_not_found`, ...)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class RateLimit:
    remaining: int
    retry_after_s: int


@dataclass
class Failure:
    remaining: int
    error: str


@dataclass(frozen=True)
class InteractionConfig:
    """Where the page's buttons send their clicks, signed as Slack signs them, and as whom.

    Without a signing secret and an interactions URL the page shows its buttons disabled."""

    signing_secret: SecretStr | None = None
    interactions_url: str | None = None
    local_user: str = DEFAULT_LOCAL_USER

    def __post_init__(self) -> None:
        if not _USER_ID.match(self.local_user):
            raise ValueError(
                f"local_user {self.local_user!r} is not a Slack user id: use one like "
                f"`{DEFAULT_LOCAL_USER}` (U or W, then capital letters and digits)")
        if self.interactions_url and not self.interactions_url.startswith(
                ("http://", "https://")):
            raise ValueError(
                f"interactions_url {self.interactions_url!r} is not an http(s) URL: give the "
                "receiver's address, e.g. `http://127.0.0.1:3000/slack/events`")

    @property
    def why_disabled(self) -> str | None:
        """None when clicks can be sent; otherwise what is missing, for the page."""
        missing = [name for name, value in (
            ("a signing secret (GPUOPS_SLACK_SIGNING_SECRET)", self.signing_secret),
            ("an interactions URL (GPUOPS_SLACK_INTERACTIONS_URL)", self.interactions_url),
        ) if not value]
        if not missing:
            return None
        return ("Buttons are disabled: this Slack fake was started without "
                + " and ".join(missing) + ", so it has no receiver to send a signed click to.")


@dataclass
class ResponseUrl:
    """A click's `response_url`: the app may answer the click through it a few times."""

    channel: str
    ts: str
    user: str
    uses_left: int = RESPONSE_URL_USES


@dataclass
class SlackFakeState:
    """Everything the fake remembers; `POST /_fake/reset` clears it."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    usergroups: dict[str, list[str]] = field(default_factory=dict)
    ratelimits: dict[str, RateLimit] = field(default_factory=dict)
    failures: dict[str, Failure] = field(default_factory=dict)
    interactions: list[dict[str, Any]] = field(default_factory=list)
    response_urls: dict[str, ResponseUrl] = field(default_factory=dict)
    # Bumped on every change a person would see, so the page knows when to refresh.
    revision: int = 0
    _last_ts_us: int = 0
    _file_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def next_ts(self) -> str:
        """A Slack timestamp (`seconds.micros`) from the wall clock, strictly increasing."""
        now_us = max(int(time.time() * 1_000_000), self._last_ts_us + 1)
        self._last_ts_us = now_us
        return f"{now_us // 1_000_000}.{now_us % 1_000_000:06d}"

    def new_file_id(self) -> str:
        return f"F{next(self._file_ids):08d}"

    def clear(self) -> None:
        """Forget messages, calls, files and limits; timestamps keep increasing across resets."""
        for recorded in (self.messages, self.calls, self.files, self.usergroups, self.ratelimits,
                         self.failures, self.interactions, self.response_urls):
            recorded.clear()
        self.revision += 1

    def find_message(self, channel: str, ts: str) -> dict[str, Any]:
        for message in self.messages:
            if message["channel"] == channel and message["ts"] == ts and not message[
                "ephemeral_to"
            ]:
                return message
        raise SlackError("message_not_found")

    def find_any_message(self, channel: str, ts: str) -> dict[str, Any]:
        """Like `find_message`, but an ephemeral message counts too (it can carry buttons)."""
        try:
            return self.find_message(channel, ts)
        except SlackError:
            for message in self.messages:
                if message["channel"] == channel and message["ts"] == ts:
                    return message
            raise

    def channel_messages(self, channel: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["channel"] == channel and not m["ephemeral_to"]]

    def new_message(self, channel: str, *, text: str, blocks: Any = None,
                    attachments: Any = None, metadata: Any = None, thread_ts: str | None = None,
                    reply_broadcast: bool = False, ephemeral_to: str | None = None
                    ) -> dict[str, Any]:
        """A message from the bot, not yet added (`add_message`)."""
        return {
            "type": "message",
            "channel": channel,
            "ts": self.next_ts(),
            "thread_ts": thread_ts,
            "user": BOT_USER_ID,
            "bot_id": BOT_ID,
            "text": text,
            "blocks": blocks,
            "attachments": attachments,
            "metadata": metadata,
            "reply_broadcast": reply_broadcast or None,
            "files": [],
            "updates": [],
            "ephemeral_to": ephemeral_to,
        }

    def add_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.revision += 1
        if message["thread_ts"] and not message["ephemeral_to"]:
            try:
                parent = self.find_message(message["channel"], message["thread_ts"])
            except SlackError:
                return  # Slack accepts a reply to a thread it cannot show; so do we
            parent["thread_ts"] = parent["ts"]
            parent["reply_count"] = parent.get("reply_count", 0) + 1
            parent["latest_reply"] = message["ts"]

    def update_message(self, message: dict[str, Any], changes: dict[str, Any],
                       editor: str = BOT_USER_ID) -> None:
        """Replace some of text/blocks/attachments/metadata, keeping the old version."""
        message["updates"].append({
            "text": message["text"], "blocks": message["blocks"],
            "attachments": message["attachments"], "replaced_at": self.next_ts(),
        })
        for name in ("text", "blocks", "attachments", "metadata"):
            if name in changes:
                message[name] = changes[name]
        message["edited"] = {"user": editor, "ts": message["updates"][-1]["replaced_at"]}
        self.revision += 1

    def delete_message(self, message: dict[str, Any]) -> None:
        self.messages.remove(message)
        self.revision += 1

    def record_interaction(self, interaction: dict[str, Any]) -> None:
        self.interactions.append(interaction)
        self.revision += 1

    def new_response_url(self, channel: str, ts: str, user: str) -> str:
        """A fresh token for a click's response_url (unguessable, as Slack's are)."""
        token = secrets.token_urlsafe(16)
        self.response_urls[token] = ResponseUrl(channel=channel, ts=ts, user=user)
        return token


def public_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as Slack's API shows it: no inspection-only fields, no empty optionals."""
    return {k: v for k, v in message.items() if k not in _INTERNAL_FIELDS and v not in (None, [])}


STATE = web.AppKey("state", SlackFakeState)
CONFIG = web.AppKey("interaction_config", InteractionConfig)
