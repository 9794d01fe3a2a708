"""The Slack fake's page and its buttons, over HTTP.

`GET /` lists channels, `GET /channels/<name>` shows one. A button posts its form to
`POST /_fake/interact`; the fake builds the `block_actions` payload Slack would send for a
click by the local user, signs it with the signing secret and POSTs it to the receiver, then
records what the receiver answered (shown under the message). The receiver answers the click
through the Web API (chat.update, chat.postEphemeral) or the click's `response_url`
(`POST /_fake/respond/<token>`); either way the page shows the result on its next refresh.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import aiohttp
from aiohttp import web

from gpuops.deployments.slackfake_interaction import (
    Clicker,
    NoSuchButton,
    block_actions_payload,
    find_button,
    form_body,
    signed_headers,
    with_block_ids,
)
from gpuops.deployments.slackfake_page import (
    PageContext,
    channel_list_page,
    channel_name,
    channel_page,
    channel_path,
    message_anchor,
)
from gpuops.deployments.slackfake_state import (
    CONFIG,
    STATE,
    InteractionConfig,
    SlackError,
    SlackFakeState,
    public_message,
)

RECEIVER_TIMEOUT_S = 10.0  # Slack itself gives up after 3 s; be lenient with a busy machine
_KEPT_REPLY_CHARS = 300


def _context(state: SlackFakeState, config: InteractionConfig) -> PageContext:
    return PageContext(local_user=config.local_user, why_disabled=config.why_disabled,
                       interactions_url=config.interactions_url, revision=state.revision,
                       script_nonce=secrets.token_urlsafe(12))


def _html(body: str, ctx: PageContext) -> web.Response:
    return web.Response(text=body, content_type="text/html", headers={
        "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
        # Escaping keeps message text out of the markup; this is the second wall: only the
        # page's own script (by nonce) runs, and nothing loads from elsewhere.
        "Content-Security-Policy": f"default-src 'self'; style-src 'unsafe-inline'; "
                                   f"script-src 'nonce-{ctx.script_nonce}'; img-src 'self'"})


async def index(request: web.Request) -> web.Response:
    state = request.app[STATE]
    ctx = _context(state, request.app[CONFIG])
    return _html(channel_list_page(state.messages, ctx), ctx)


async def channel(request: web.Request) -> web.Response:
    state = request.app[STATE]
    clicks: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for click in state.interactions:
        clicks.setdefault((click["channel"], click["ts"]), []).append(click)
    ctx = _context(state, request.app[CONFIG])
    return _html(channel_page(state.messages, channel_name(request.match_info["name"]), ctx,
                              clicks), ctx)


async def no_favicon(request: web.Request) -> web.Response:
    return web.Response(status=204)


async def revision(request: web.Request) -> web.Response:
    return web.json_response({"revision": request.app[STATE].revision})


async def list_interactions(request: web.Request) -> web.Response:
    """Every click the page sent and what the receiver answered."""
    return web.json_response({"interactions": request.app[STATE].interactions})


async def file_content(request: web.Request) -> web.Response:
    file = request.app[STATE].files.get(request.match_info["file_id"])
    if file is None or file.get("content") is None:
        return web.Response(status=404, text="no such file (or its upload never completed)")
    return web.Response(text=file["content"], content_type="text/plain",
                        headers={"X-Content-Type-Options": "nosniff"})


async def _deliver(url: str, body: bytes, headers: dict[str, str]
                   ) -> tuple[int | None, str | None, str]:
    """POST the signed click; (HTTP status, why it was not delivered, the start of the reply)."""
    try:
        async with aiohttp.ClientSession(
                trust_env=False, timeout=aiohttp.ClientTimeout(total=RECEIVER_TIMEOUT_S)
        ) as session, session.post(url, data=body, headers=headers) as response:
            return response.status, None, (await response.text())[:_KEPT_REPLY_CHARS]
    except (aiohttp.ClientError, TimeoutError) as e:
        return None, f"could not reach the receiver at {url}: {type(e).__name__} {e}", ""


def _button_label(message: dict[str, Any], action_id: str) -> str:
    try:
        _, button = find_button(with_block_ids(message.get("blocks") or [], message["ts"]),
                                action_id)
    except NoSuchButton:
        return action_id
    text = button.get("text")
    return str(text.get("text", action_id)) if isinstance(text, dict) else action_id


async def interact(request: web.Request) -> web.Response:
    """A click on a page button: `channel`, `ts` and `action_id` form fields. Answers JSON to
    the page's script (`Accept: application/json`), else redirects back to the message."""
    state, config = request.app[STATE], request.app[CONFIG]
    form = await request.post()
    channel_id, ts, action_id = (str(form.get(k) or "") for k in ("channel", "ts", "action_id"))
    wants_json = "application/json" in request.headers.get("Accept", "")

    def answer(http_status: int, summary: str, **extra: Any) -> web.Response:
        if wants_json:
            return web.json_response({"ok": http_status < 300, "summary": summary, **extra},
                                     status=http_status)
        if http_status >= 300:
            return web.Response(status=http_status, text=summary)
        raise web.HTTPSeeOther(f"{channel_path(channel_name(channel_id))}#{message_anchor(ts)}")

    if config.why_disabled or config.signing_secret is None or not config.interactions_url:
        return answer(409, config.why_disabled or "interactions are off")
    if not (channel_id and ts and action_id):
        return answer(400, "a click needs the form fields `channel`, `ts` and `action_id`")
    try:
        message = state.find_any_message(channel_id, ts)
    except SlackError:
        return answer(404, f"no message {ts!r} in channel {channel_id!r}")
    user = config.local_user
    clicker = Clicker(
        user_id=user, trigger_id=f"{int(time.time())}.{secrets.randbelow(10**12)}."
                                 f"{secrets.token_hex(16)}",
        action_ts=f"{time.time():.6f}",
        response_url=f"{request.scheme}://{request.host}/_fake/respond/"
                     f"{state.new_response_url(channel_id, ts, user)}")
    try:
        payload = block_actions_payload(public_message(message), channel=channel_id,
                                        action_id=action_id, clicker=clicker,
                                        is_ephemeral=bool(message["ephemeral_to"]))
    except NoSuchButton:
        return answer(409, f"the message has no {action_id!r} button any more "
                           "(it was answered or updated): reload the page")
    body = form_body(payload)
    headers = signed_headers(config.signing_secret.get_secret_value(), int(time.time()), body)
    status, error, reply = await _deliver(config.interactions_url, body, headers)
    label = _button_label(message, action_id)
    state.record_interaction({"channel": channel_id, "ts": ts, "action_id": action_id,
                              "label": label, "user": user, "ts_clicked": clicker.action_ts,
                              "status": status, "error": error, "reply": reply})
    summary = (f"{label} sent as @{user}: the receiver answered HTTP {status}"
               if status is not None else str(error))
    return answer(200, summary, status=status, error=error)


async def respond(request: web.Request) -> web.Response:
    """A click's `response_url`: JSON with text/blocks and `replace_original`,
    `delete_original` or `response_type` ("ephemeral", the default, or "in_channel")."""
    state = request.app[STATE]
    target = state.response_urls.get(request.match_info["token"])
    if target is None or target.uses_left <= 0:
        return web.json_response({"ok": False, "error": "used_url"}, status=404)
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"ok": False, "error": "invalid_json"}, status=400)
    if not isinstance(body, dict):
        return web.json_response({"ok": False, "error": "invalid_json"}, status=400)
    target.uses_left -= 1
    try:
        original = state.find_any_message(target.channel, target.ts)
    except SlackError:
        original = None
    if body.get("delete_original") and original is not None:
        state.delete_message(original)
    elif body.get("replace_original") and original is not None:
        state.update_message(original, {k: body[k] for k in ("text", "blocks", "attachments")
                                        if k in body})
    else:
        in_channel = body.get("response_type") == "in_channel"
        state.add_message(state.new_message(
            target.channel, text=str(body.get("text") or ""), blocks=body.get("blocks"),
            attachments=body.get("attachments"), thread_ts=body.get("thread_ts"),
            ephemeral_to=None if in_channel else target.user))
    return web.json_response({"ok": True})


def add_page_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/channels/{name}", channel)
    app.router.add_get("/favicon.ico", no_favicon)
    app.router.add_get("/_fake/revision", revision)
    app.router.add_get("/_fake/interactions", list_interactions)
    app.router.add_get("/_fake/files/{file_id}", file_content)
    app.router.add_post("/_fake/interact", interact)
    app.router.add_post("/_fake/respond/{token}", respond)
