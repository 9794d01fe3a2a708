"""The Slack verbs gpuops needs, over slack-sdk's WebClient, rate limits honoured.

slack-sdk's `RateLimitErrorRetryHandler` sleeps for Retry-After and retries, so a 429 is
never an error here unless it persists. Slack's error answers are mapped to the Slack classes
of `gpuops.common.errors` (`slack_error`), chained `from` the SDK's: callers catch a kind
(a thread that is gone, trouble worth retrying), never an error string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)

from gpuops.blocks.connections import SlackConnection
from gpuops.common.errors import (
    SlackArchived,
    SlackError,
    SlackNotFound,
    SlackRefused,
    SlackThrottled,
    SlackUnavailable,
)

NOT_FOUND = frozenset({"message_not_found", "thread_not_found", "channel_not_found"})
UNAVAILABLE = frozenset({"internal_error", "fatal_error", "service_unavailable",
                         "request_timeout"})  # Slack's own trouble: a later try may not get it


@dataclass(frozen=True)
class PostedMessage:
    channel: str
    ts: str


def slack_error(e: SlackApiError, method: str = "") -> SlackError:
    """The gpuops error for one of Slack's error answers (its `error` field)."""
    code = str(e.response.get("error") or "")
    message = f"Slack {method or 'call'} failed: {code or e}"
    if code in NOT_FOUND:
        return SlackNotFound(message, code=code, method=method)
    if code == "is_archived":
        return SlackArchived(message, code=code, method=method)
    if code == "ratelimited":
        retry_after = (getattr(e.response, "headers", None) or {}).get("Retry-After", "1")
        if isinstance(retry_after, list):  # slack-sdk keeps a header's values as a list
            retry_after = retry_after[0] if retry_after else "1"
        return SlackThrottled(message, code=code, method=method, retry_after=float(retry_after))
    if code in UNAVAILABLE:
        return SlackUnavailable(message, code=code, method=method)
    return SlackRefused(message, code=code, method=method)


def web_client(conn: SlackConnection) -> WebClient:
    kwargs: dict[str, Any] = {"token": conn.bot_token.get_secret_value()}
    if conn.base_url:
        kwargs["base_url"] = conn.base_url
    client = WebClient(**kwargs)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=5))
    client.retry_handlers.append(ConnectionErrorRetryHandler(max_retry_count=3))
    return client


def post_message(conn: SlackConnection, channel: str, text: str, blocks: list[dict],
                 *, thread_ts: str | None = None) -> PostedMessage:
    kwargs: dict[str, Any] = {"channel": channel, "text": text, "blocks": blocks,
                              "unfurl_links": False}
    if thread_ts:
        kwargs["thread_ts"] = thread_ts
    try:
        resp = web_client(conn).chat_postMessage(**kwargs)
    except SlackApiError as e:
        raise slack_error(e, "chat.postMessage") from e
    return PostedMessage(resp["channel"], resp["ts"])


def update_message(conn: SlackConnection, message: PostedMessage, text: str,
                   blocks: list[dict]) -> None:
    try:
        web_client(conn).chat_update(channel=message.channel, ts=message.ts, text=text,
                                     blocks=blocks)
    except SlackApiError as e:
        raise slack_error(e, "chat.update") from e
