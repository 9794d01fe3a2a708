"""The Slack actions receiver: an Approve/Reject click resumes the waiting flow run, paused
or suspended alike (a suspended run is a Paused-type state named "Suspended").

At the HTTP door, before Bolt sees a byte: a request must be signed with the Slack app's
signing secret and fresh (else 401), not a replay of one already seen (401), and a click on
a gpuops button (else 400, one log line). The receiver refuses to start without a signing
secret: there is no default one.

Who may decide comes from the request, never from the receiver: the run recorded, when it
asked, the message it posted and its policy's approvers (tasks/approvals/record.py). A click
counts only if that record exists, was posted as the very message clicked (channel + ts,
so a button naming another run is refused), and names the clicker, directly or through
the Slack user group (read at click time); if the request names its policy Block, the
Block as it is now must admit the clicker too. A record from a gpuops that did not record
approvers admits nobody. Refusals change nothing and tell the clicker why (ephemeral); an
Approve by whoever started the run, when its runbook requires someone else, is refused in
the request's thread for all to see, and the request keeps waiting.
Then the run is resumed only if it is still paused on that very approval.

Bolt acks at once (Slack wants an answer within 3 s) and the rest happens after. HTTP mode
serves the door on aiohttp; Socket Mode connects out for clusters with no ingress.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

from aiohttp import web
from prefect.client.orchestration import get_client
from prefect.exceptions import NotPausedError, ObjectNotFound
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import ConfigError
from gpuops.sensors.slack_interaction import (
    Click,
    MalformedInteraction,
    parse_click_payload,
    parse_click_request,
)
from gpuops.tasks.approvals.block_kit import (
    APPROVE_ACTION,
    REJECT_ACTION,
    Approvers,
    AskedApproval,
    decision_blocks,
    starter_refused_text,
    verdict_text,
)
from gpuops.tasks.approvals.record import read_asked_approval
from gpuops.tasks.approvals.request import resume_approval

log = logging.getLogger("gpuops.sensors.slack")

ResumeFn = Callable[[UUID, dict[str, Any]], Awaitable[None]]
SIGNING_SECRET_SETTING = "GPUOPS_SLACK_SIGNING_SECRET"
SIGNATURE_MAX_AGE_S = 300  # Slack's rule: an older request may be a replay


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


class Refused(Exception):
    """A click that changes nothing; the message tells the person who clicked why."""


class RefusedInThread(Refused):
    """A refusal everyone in the request's thread should see."""


def signing_secret_of(conn: SlackConnection) -> str:
    """The secret every request must be signed with; a `ConfigError` naming the setting
    when there is none."""
    secret = conn.signing_secret.get_secret_value() if conn.signing_secret else ""
    if secret:
        return secret
    where = ("the local Slack fake: `gpuops up` generates one per install and passes it "
             "to both" if conn.uses_local_fake else "your Slack app's Signing Secret "
             "(api.slack.com/apps → your app → Basic Information → App Credentials)")
    raise ConfigError(SIGNING_SECRET_SETTING, "is not set, and the Slack receiver verifies "
                      "every click with it (there is no default). Set it, or the Slack "
                      f"connection Block's `signing_secret`, to the secret of {where}.")


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


async def _current_policy(name: str) -> ApprovalPolicy:
    try:
        return await ApprovalPolicy.aload(name)
    except (ValueError, RuntimeError, ObjectNotFound) as e:  # missing, or fails validation
        log.warning("approval policy Block %r could not be loaded: %s", name, type(e).__name__)
        raise Refused(f"This request's approval policy Block {name!r} no longer exists or "
                      "is invalid, so nobody can decide it from Slack; nothing was done.") from e


class SlackReceiver:
    """The Bolt app that answers clicks, and the HTTP door in front of it."""

    def __init__(self, conn: SlackConnection, *, resume: ResumeFn | None = None) -> None:
        secret = signing_secret_of(conn)
        self._secret = secret.encode()
        self.client = AsyncWebClient(token=conn.bot_token.get_secret_value(),
                                     **cast(dict[str, Any], {"base_url": conn.base_url}
                                            if conn.base_url else {}))
        self.bolt = AsyncApp(client=self.client, signing_secret=secret,
                             process_before_response=False)
        self._replays = ReplayGuard()
        self._locks: dict[UUID, asyncio.Lock] = {}
        self._resume: ResumeFn = resume or resume_approval
        self.bolt.action(re.compile(f"^({APPROVE_ACTION}|{REJECT_ACTION})$"))(self._on_click)

    # --- the HTTP door ---------------------------------------------------------------------

    async def handle_http(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        timestamp = request.headers.get("X-Slack-Request-Timestamp")
        signature = request.headers.get("X-Slack-Signature", "")
        if not self._signed(body, timestamp, signature):
            log.warning("refused a Slack request with a missing, wrong or stale signature")
            return web.Response(status=401, text="invalid signature")
        if not self._replays.first_time(signature):
            log.warning("refused a replayed Slack request")
            return web.Response(status=401, text="replayed request")
        try:
            parse_click_request(body, request.content_type)
        except MalformedInteraction as e:
            log.warning("refused a malformed Slack interaction: %s", e)
            return web.Response(status=400, text=f"not a gpuops approval click: {e}")
        bolt_request = AsyncBoltRequest(body=body.decode(), query=request.query_string,
                                        headers=dict(request.headers))
        return await to_aiohttp_response(await self.bolt.async_dispatch(bolt_request))

    def _signed(self, body: bytes, timestamp: str | None, signature: str) -> bool:
        """Slack's v0 signature over the raw bytes (slack_sdk's verifier decodes the body
        first, so a signed body that is not UTF-8 would look forged instead of malformed)."""
        try:
            fresh = abs(time.time() - int(timestamp or "")) <= SIGNATURE_MAX_AGE_S
        except ValueError:  # no timestamp, or not a number
            return False
        expected = "v0=" + hmac.new(self._secret, f"v0:{timestamp}:".encode() + body,
                                    hashlib.sha256).hexdigest()
        return fresh and hmac.compare_digest(expected, signature)

    def web_app(self, path: str = "/slack/events") -> web.Application:
        app = web.Application()
        app.router.add_post(path, self.handle_http)
        return app

    # --- a click ---------------------------------------------------------------------------

    async def _on_click(self, ack: Callable[[], Awaitable[None]], body: dict) -> None:
        await ack()
        try:
            click = parse_click_payload(body)
        except MalformedInteraction as e:  # Socket Mode has no door in front
            log.warning("ignored a malformed Slack interaction: %s", e)
            return
        try:
            asked = await self._checked_request(click)
            verdict = await self._decide(click)
        except RefusedInThread as refusal:
            await self._reply(click, str(refusal))
            return
        except Refused as refusal:
            await self._tell(click, str(refusal))
            return
        await self._show(asked, verdict)

    async def _checked_request(self, click: Click) -> AskedApproval:
        """The request's record, if the click may decide it; else `Refused`."""
        try:
            asked = await read_asked_approval(click.flow_run_id, click.key)
        except (KeyError, TypeError, ValueError) as e:
            log.warning("flow run %s: unreadable approval record %r: %s", click.flow_run_id,
                        click.key, e)
            raise Refused("This approval request's record is unreadable; nothing was done. "
                          "Answer it in the Prefect UI.") from e
        if asked is None:
            raise Refused("gpuops has no record of this approval request, so nobody can "
                          "decide it from Slack; nothing was done. If it was posted a moment "
                          "ago, try again in a few seconds.")
        if not asked.posted_as(click.channel, click.message_ts):
            log.warning("refused a click by %s in message %s/%s: its button names approval "
                        "%r of flow run %s, which was posted as %s/%s", click.user,
                        click.channel, click.message_ts, click.key, click.flow_run_id,
                        asked.channel, asked.ts)
            raise Refused("This button does not belong to the message it is in; nothing "
                          "was done.")
        if asked.approvers is None:
            raise Refused("This request was made by an older gpuops that did not record "
                          "its approvers, so nobody can decide it from Slack; nothing was "
                          "done. Answer it in the Prefect UI.")
        await self._require_admitted(asked.approvers, click.user)
        if asked.approvers.policy_block:
            policy = await _current_policy(asked.approvers.policy_block)
            await self._require_admitted(Approvers(users=tuple(policy.approvers),
                                                   group=policy.approver_group), click.user)
        if click.approved and click.user == asked.approvers.not_by:
            log.info("flow run %s: refused an Approve by %s, who started the run",
                     click.flow_run_id, click.user)
            raise RefusedInThread(starter_refused_text(click.user))
        return asked

    async def _require_admitted(self, approvers: Approvers, user: str) -> None:
        if not approvers.users and not approvers.group:
            raise Refused("This request's approval policy names no Slack approvers, so it "
                          "can only be answered in the Prefect UI; nothing was done.")
        if user in approvers.users:
            return
        if approvers.group and user in await self._group_members(approvers.group):
            return
        log.info("user %s is not an approver of this request", user)
        raise Refused("You are not on the approvers list for this change; nothing was done.")

    async def _group_members(self, group: str) -> set[str]:
        try:
            resp = await self.client.usergroups_users_list(usergroup=group)
        except SlackApiError as e:  # an unreadable group admits nobody
            log.warning("could not read Slack user group %s: %s", group,
                        e.response.get("error"))
            return set()
        return set(resp.get("users") or [])

    async def _decide(self, click: Click) -> str:
        """Resume the run with the click's answer; the verdict to show in the message."""
        async with self._locks.setdefault(click.flow_run_id, asyncio.Lock()):
            paused, state = await _paused_on(click.flow_run_id, click.key)
            if not paused:
                raise Refused(f"This approval is no longer waiting (the run is {state}); "
                              "nothing was changed.")
            try:
                await self._resume(click.flow_run_id, {"approved": click.approved,
                                                       "approver": click.user,
                                                       "comment": "via Slack"})
            except NotPausedError as e:
                raise Refused("Someone else answered first; nothing was changed.") from e
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        return verdict_text(click.approved, click.user, when)

    async def _tell(self, click: Click, text: str) -> None:
        try:
            await self.client.chat_postEphemeral(channel=click.channel, user=click.user,
                                                 text=text)
        except SlackApiError as e:
            log.warning("could not tell %s in %s why nothing was done (%s): %s", click.user,
                        click.channel, e.response.get("error"), text)

    async def _reply(self, click: Click, text: str) -> None:
        try:
            await self.client.chat_postMessage(channel=click.channel,
                                               thread_ts=click.message_ts, text=text)
        except SlackApiError as e:
            log.warning("could not reply in thread %s/%s (%s): %s", click.channel,
                        click.message_ts, e.response.get("error"), text)

    async def _show(self, asked: AskedApproval, verdict: str) -> None:
        """Show the decision at once (the run writes it too, when it carries on)."""
        try:
            await self.client.chat_update(channel=asked.channel, ts=asked.ts, text=verdict,
                                          blocks=decision_blocks(list(asked.blocks), verdict))
        except SlackApiError as e:
            log.warning("could not show the decision in Slack message %s/%s (%s); the run "
                        "has it", asked.channel, asked.ts, e.response.get("error"))


def build_receiver(conn: SlackConnection, *, resume: ResumeFn | None = None) -> SlackReceiver:
    """The receiver for this Slack connection (`ConfigError` without a signing secret)."""
    return SlackReceiver(conn, resume=resume)


async def serve_http(receiver: SlackReceiver, host: str = "127.0.0.1", port: int = 3000,
                     path: str = "/slack/events") -> web.AppRunner:
    """Serve the receiver's door on a chosen interface (Bolt's own start() binds 0.0.0.0)."""
    runner = web.AppRunner(receiver.web_app(path), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def serve_socket_mode(receiver: SlackReceiver, app_token: str) -> None:
    """Socket Mode: Slack pushes interactions over a websocket we open (no ingress needed)."""
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    await AsyncSocketModeHandler(receiver.bolt, app_token).start_async()
