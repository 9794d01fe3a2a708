"""The Slack verbs gpuops needs, over slack-sdk's WebClient, rate limits honoured.

slack-sdk's `RateLimitErrorRetryHandler` sleeps for Retry-After and retries, so a 429 is
never an error here unless it persists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)

from gpuops.blocks.connections import SlackConnection


@dataclass(frozen=True)
class PostedMessage:
    channel: str
    ts: str


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
    resp = web_client(conn).chat_postMessage(**kwargs)
    return PostedMessage(resp["channel"], resp["ts"])


def update_message(conn: SlackConnection, message: PostedMessage, text: str,
                   blocks: list[dict]) -> None:
    web_client(conn).chat_update(channel=message.channel, ts=message.ts, text=text,
                                 blocks=blocks)
