"""Telling people how a rollout went: a Slack message when it is rolled back (thin I/O).

The message says which gate failed with the numbers (`report.verdict_text`), redacted of the
connection's own secrets. A message that cannot be posted is logged, never raised: the
rollback it reports has already happened and must not look failed for want of Slack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from prefect import get_run_logger

from gpuops.blocks.connections import SlackConnection
from gpuops.common.errors import SlackError
from gpuops.common.redact import redact_text
from gpuops.tasks.clients import slack

SECTION_LIMIT = 2900


def slack_notifier(conn: SlackConnection, channel: str) -> Callable[[str], Awaitable[None]]:
    async def notify(text: str) -> None:
        text = redact_text(text, conn.secrets())
        head, _, rest = text.partition("\n")
        blocks: list[dict] = [{"type": "section", "text": {"type": "mrkdwn",
                                                           "text": head[:SECTION_LIMIT]}}]
        if rest.strip():
            blocks.append({"type": "section", "text": {
                "type": "mrkdwn", "text": "```" + rest[: SECTION_LIMIT - 6] + "```"}})
        try:
            await asyncio.to_thread(slack.post_message, conn, channel, head[:3000], blocks)
        except SlackError as e:
            get_run_logger().warning("could not post the rollout message to %s: %s",
                                     channel, e)

    return notify
