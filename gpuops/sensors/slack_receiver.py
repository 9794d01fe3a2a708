"""The Slack actions receiver: an Approve/Reject click resumes the waiting flow run, paused
or suspended alike (a suspended run is a Paused-type state named "Suspended").

slack-bolt verifies every request's signature and timestamp (forged or older than 5 min:
401). On top of that this receiver rejects replays (the same signed request twice), checks
the clicker against the policy's allow-list, and resumes the run only if it is still paused
on that very approval. It acks at once (Slack wants an answer within 3 s) and does the rest
after. HTTP mode serves Bolt's aiohttp app; Socket Mode connects out for clusters with no
ingress.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from aiohttp import web
from prefect.client.orchestration import get_client
from prefect.exceptions import NotPausedError, ObjectNotFound
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.tasks.approval import resume_approval
from gpuops.tasks.approval_blocks import (
    APPROVE_ACTION,
    REJECT_ACTION,
    decision_blocks,
    parse_button_value,
    verdict_text,
)

log = logging.getLogger("gpuops.sensors.slack")

ResumeFn = Callable[[UUID, dict[str, Any]], Awaitable[None]]


class ReplayGuard:
    """Remembers signatures seen within Slack's 5-minute window; a repeat is a replay."""

    def __init__(self, window_s: float = 600.0, max_entries: int = 100_000) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self._seen: OrderedDict[str, float] = OrderedDict()

    def first_time(self, signature: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        while self._seen and (next(iter(self._seen.values())) < now - self.window_s
                              or len(self._seen) > self.max_entries):
            self._seen.popitem(last=False)
        if signature in self._seen:
            return False
        self._seen[signature] = now
        return True


async def _paused_on(flow_run_id: UUID, key: str) -> tuple[bool, str]:
    """Is the run paused or suspended on this approval key? Also returns the state name for
    messages."""
    async with get_client() as client:
        try:
            run = await client.read_flow_run(flow_run_id)
        except ObjectNotFound:
            return False, "not found"
    state = run.state
    if state is None:
        return False, "unknown"
    if state.is_paused() and str(state.state_details.pause_key) == key:
        return True, state.name or "Paused"
    return False, state.name or state.type.value


def build_receiver(conn: SlackConnection, policy: ApprovalPolicy, *,
                   resume: ResumeFn | None = None) -> AsyncApp:
    client = AsyncWebClient(token=conn.bot_token.get_secret_value(),
                            **({"base_url": conn.base_url} if conn.base_url else {}))
    app = AsyncApp(client=client, signing_secret=conn.signing_secret.get_secret_value(),
                   process_before_response=False)
    replays = ReplayGuard()
    locks: dict[str, asyncio.Lock] = {}
    do_resume: ResumeFn = resume or resume_approval

    @app.middleware
    async def reject_replays(req: Any, resp: BoltResponse, next: Callable) -> Any:
        signature = req.headers.get("x-slack-signature", [""])[0]
        if signature and not replays.first_time(signature):
            log.warning("rejected a replayed Slack request")
            return BoltResponse(status=401, body="replayed request")
        return await next()

    async def allowed(user_id: str) -> bool:
        if user_id in policy.approvers:
            return True
        if policy.approver_group:
            resp = await client.usergroups_users_list(usergroup=policy.approver_group)
            return user_id in (resp.get("users") or [])
        return False

    @app.action(re.compile(f"^({APPROVE_ACTION}|{REJECT_ACTION})$"))
    async def on_click(ack: Callable, body: dict, action: dict,
                       context: AsyncBoltContext) -> None:
        await ack()
        user = body["user"]["id"]
        channel = body["channel"]["id"]
        message = body.get("message") or {}
        approved = action["action_id"] == APPROVE_ACTION

        async def tell(text: str) -> None:
            await client.chat_postEphemeral(channel=channel, user=user, text=text)

        try:
            run_id, key = parse_button_value(action["value"])
            flow_run_id = UUID(run_id)
        except (ValueError, KeyError):
            await tell("This button does not belong to a gpuops approval.")
            return
        if not await allowed(user):
            log.info("user %s is not allowed to approve run %s", user, run_id)
            await tell("You are not on the approvers list for this change; nothing was done.")
            return
        lock = locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            paused, state = await _paused_on(flow_run_id, key)
            if not paused:
                await tell(f"This approval is no longer waiting (the run is {state}); "
                           "nothing was changed.")
                return
            try:
                await do_resume(flow_run_id, {"approved": approved, "approver": user,
                                              "comment": "via Slack"})
            except NotPausedError:
                await tell("Someone else answered first; nothing was changed.")
                return
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        verdict = verdict_text(approved, user, when)
        await client.chat_update(channel=channel, ts=message.get("ts", ""), text=verdict,
                                 blocks=decision_blocks(message.get("blocks") or [], verdict))

    return app


async def serve_http(app: AsyncApp, host: str = "127.0.0.1", port: int = 3000,
                     path: str = "/slack/events") -> web.AppRunner:
    """Serve Bolt's aiohttp app on a chosen interface (Bolt's own start() binds 0.0.0.0)."""
    runner = web.AppRunner(app.web_app(path=path, port=port), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve_socket_mode(app: AsyncApp, app_token: str) -> None:
    """Socket Mode: Slack pushes interactions over a websocket we open (no ingress needed)."""
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    await AsyncSocketModeHandler(app, app_token).start_async()
