"""A local fake of the Slack Web API, so gpuops and its tests talk Slack's real HTTP protocol.

`slack_sdk.WebClient(token=..., base_url="http://127.0.0.1:PORT/api/")` works against it
unchanged: the same methods, HTTP verbs, bodies (JSON, form or query string), `ok: false` error
codes and HTTP 429 with `Retry-After`. It records every call and message so a test or a person
can see what gpuops posted (`GET /_fake/messages`, `GET /_fake/calls`), and it can be told to
rate-limit a method (`POST /_fake/ratelimit`) or fail it (`POST /_fake/fail`) to exercise
retry handling.

A person reads it as a small Slack at `/`: channels, threads, messages rendered from their
Block Kit, and buttons that send a signed `block_actions` click to the real receiver as a
local user (`slackfake_web`).

Run it with `python -m gpuops.deployments.slackfake --port P`, or in-process with
`await start_slack_fake(host, port)`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from gpuops.common.settings import SlackFakeSettings, get_settings
from gpuops.deployments.slackfake_state import (
    BOT_ID,
    BOT_USER_ID,
    CONFIG,
    DEFAULT_LOCAL_USER,
    STATE,
    TEAM_ID,
    Failure,
    InteractionConfig,
    RateLimit,
    SlackError,
    SlackFakeState,
    public_message,
)
from gpuops.deployments.slackfake_web import add_page_routes

Args = dict[str, Any]
Handler = Callable[[SlackFakeState, Args, web.Request], dict[str, Any]]


def _required(args: Args, name: str, error: str = "invalid_arguments") -> str:
    value = args.get(name)
    if value in (None, ""):
        raise SlackError(error)
    return str(value)


def _json_field(args: Args, name: str) -> Any:
    """Block Kit and friends arrive as JSON values in JSON bodies but as strings in forms."""
    value = args.get(name)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise SlackError(f"invalid_{name}") from e
    return value


def _origin(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _new_message(state: SlackFakeState, args: Args, channel: str) -> dict[str, Any]:
    thread_ts = args.get("thread_ts") or None
    return state.new_message(
        channel, text=args.get("text") or "", blocks=_json_field(args, "blocks"),
        attachments=_json_field(args, "attachments"), metadata=_json_field(args, "metadata"),
        thread_ts=str(thread_ts) if thread_ts else None,
        reply_broadcast=str(args.get("reply_broadcast", "")).lower() in ("true", "1"))


def auth_test(state: SlackFakeState, args: Args, request: web.Request) -> dict[str, Any]:
    return {"ok": True, "url": f"{_origin(request)}/", "team": "gpuops-fake", "user": "gpuops",
            "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID}


def chat_post_message(state: SlackFakeState, args: Args, request: web.Request) -> dict[str, Any]:
    channel = _required(args, "channel", "channel_not_found")
    if not (args.get("text") or args.get("blocks") or args.get("attachments")):
        raise SlackError("no_text")
    message = _new_message(state, args, channel)
    state.add_message(message)
    return {"ok": True, "channel": channel, "ts": message["ts"], "message": public_message(message)}


def chat_update(state: SlackFakeState, args: Args, request: web.Request) -> dict[str, Any]:
    channel = _required(args, "channel", "channel_not_found")
    message = state.find_message(channel, _required(args, "ts", "message_not_found"))
    state.update_message(message, {
        name: args[name] if name == "text" else _json_field(args, name)
        for name in ("text", "blocks", "attachments", "metadata") if name in args})
    return {"ok": True, "channel": channel, "ts": message["ts"], "text": message["text"],
            "message": public_message(message)}


def chat_post_ephemeral(state: SlackFakeState, args: Args, request: web.Request) -> dict[str, Any]:
    channel = _required(args, "channel", "channel_not_found")
    message = _new_message(state, args, channel)
    message["ephemeral_to"] = _required(args, "user", "user_not_in_channel")
    state.add_message(message)
    return {"ok": True, "message_ts": message["ts"]}


def chat_get_permalink(state: SlackFakeState, args: Args, request: web.Request) -> dict[str, Any]:
    channel = _required(args, "channel", "channel_not_found")
    message = state.find_message(channel, _required(args, "message_ts", "message_not_found"))
    link = f"{_origin(request)}/archives/{channel}/p{message['ts'].replace('.', '')}"
    if message["thread_ts"] and message["thread_ts"] != message["ts"]:
        link += f"?thread_ts={message['thread_ts']}&cid={channel}"
    return {"ok": True, "channel": channel, "permalink": link}


def _limited(messages: list[dict[str, Any]], args: Args) -> tuple[list[dict[str, Any]], bool]:
    limit = int(args.get("limit") or 100)
    return [public_message(m) for m in messages[:limit]], len(messages) > limit


def conversations_replies(
    state: SlackFakeState, args: Args, request: web.Request
) -> dict[str, Any]:
    channel = _required(args, "channel", "channel_not_found")
    ts = _required(args, "ts", "thread_not_found")
    try:
        parent = state.find_message(channel, ts)
    except SlackError as e:
        raise SlackError("thread_not_found") from e
    replies = [
        m for m in state.channel_messages(channel) if m["thread_ts"] == ts and m is not parent
    ]
    messages, has_more = _limited([parent, *sorted(replies, key=lambda m: m["ts"])], args)
    return {"ok": True, "messages": messages, "has_more": has_more}


def conversations_history(
    state: SlackFakeState, args: Args, request: web.Request
) -> dict[str, Any]:
    channel = _required(args, "channel", "channel_not_found")
    oldest, latest = float(args.get("oldest") or 0), float(args.get("latest") or "inf")
    top_level = [
        m for m in state.channel_messages(channel)
        if (m["thread_ts"] in (None, m["ts"]) or m["reply_broadcast"])
        and oldest <= float(m["ts"]) <= latest
    ]
    messages, has_more = _limited(sorted(top_level, key=lambda m: m["ts"], reverse=True), args)
    return {"ok": True, "messages": messages, "has_more": has_more}


def files_get_upload_url_external(
    state: SlackFakeState, args: Args, request: web.Request
) -> dict[str, Any]:
    filename = _required(args, "filename")
    file_id = state.new_file_id()
    state.files[file_id] = {"id": file_id, "name": filename, "title": filename,
                            "size": int(_required(args, "length")), "content": None}
    return {"ok": True, "file_id": file_id,
            "upload_url": f"{_origin(request)}/_fake/upload/{file_id}"}


def _public_file(file: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in file.items() if k != "content"}


def files_complete_upload_external(
    state: SlackFakeState, args: Args, request: web.Request
) -> dict[str, Any]:
    wanted = _json_field(args, "files")
    if not isinstance(wanted, list) or not wanted:
        raise SlackError("invalid_arguments")
    done = []
    for item in wanted:
        file = state.files.get(str(item.get("id")))
        if file is None or file["content"] is None:
            raise SlackError("file_not_found")
        file["title"] = item.get("title") or file["name"]
        done.append(file)
    targets = str(args.get("channel_id") or args.get("channels") or "")
    channels = [c for c in targets.split(",") if c]
    for channel in channels:
        message = _new_message(state, {**args, "text": args.get("initial_comment") or ""}, channel)
        message["files"] = [dict(f) for f in done]  # keeps content: visible in /_fake/messages
        state.add_message(message)
    return {"ok": True, "files": [_public_file(f) for f in done]}


def files_info(state: SlackFakeState, args: Args, request: web.Request) -> dict[str, Any]:
    file = state.files.get(_required(args, "file", "file_not_found"))
    if file is None:
        raise SlackError("file_not_found")
    return {"ok": True, "file": _public_file(file)}


def users_info(state: SlackFakeState, args: Args, request: web.Request) -> dict[str, Any]:
    user_id = _required(args, "user", "user_not_found")
    name = f"user-{user_id.lower()}"
    return {"ok": True, "user": {
        "id": user_id, "team_id": TEAM_ID, "name": name, "real_name": name, "deleted": False,
        "is_bot": user_id == BOT_USER_ID,
        "profile": {"display_name": name, "real_name": name, "email": f"{name}@example.com"},
    }}


def usergroups_users_list(
    state: SlackFakeState, args: Args, request: web.Request
) -> dict[str, Any]:
    group = _required(args, "usergroup", "no_such_subteam")
    if group not in state.usergroups:
        raise SlackError("no_such_subteam")
    return {"ok": True, "users": list(state.usergroups[group])}


METHODS: dict[str, Handler] = {
    "auth.test": auth_test,
    "chat.postMessage": chat_post_message,
    "chat.update": chat_update,
    "chat.postEphemeral": chat_post_ephemeral,
    "chat.getPermalink": chat_get_permalink,
    "conversations.replies": conversations_replies,
    "conversations.history": conversations_history,
    "files.getUploadURLExternal": files_get_upload_url_external,
    "files.completeUploadExternal": files_complete_upload_external,
    "files.info": files_info,
    "users.info": users_info,
    "usergroups.users.list": usergroups_users_list,
}

async def _request_args(request: web.Request) -> Args:
    """Query string, then a JSON or form body: slack_sdk uses all three depending on method."""
    args: Args = dict(request.query)
    if request.content_type == "application/json":
        body = await request.text()
        if body.strip():
            parsed = json.loads(body)
            if not isinstance(parsed, dict):
                raise SlackError("invalid_json")
            args.update(parsed)
    elif request.can_read_body:
        form = await request.post()
        args.update({k: v for k, v in form.items() if isinstance(v, str)})
    return args


def _token(request: web.Request, args: Args) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer ") and header[7:].strip():
        return header[7:].strip()
    return args.pop("token", None) or None  # Slack also takes the token as a parameter


async def handle_api_call(request: web.Request) -> web.Response:
    state = request.app[STATE]
    method = request.match_info["method"]
    try:
        args = await _request_args(request)
    except (SlackError, json.JSONDecodeError):
        return web.json_response({"ok": False, "error": "invalid_json"})
    token = _token(request, args)
    call: dict[str, Any] = {"method": method, "args": args, "at": time.time(), "status": 200}
    state.calls.append(call)
    if token is None:
        call["error"] = "not_authed"
        return web.json_response({"ok": False, "error": "not_authed"})
    limit = state.ratelimits.get(method)
    if limit is not None and limit.remaining > 0:
        limit.remaining -= 1
        call.update(status=429, error="ratelimited")
        return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                 headers={"Retry-After": str(limit.retry_after_s)})
    failure = state.failures.get(method)
    handler = METHODS.get(method)
    try:
        if failure is not None and failure.remaining > 0:
            failure.remaining -= 1
            raise SlackError(failure.error)
        if handler is None:
            raise SlackError("unknown_method")
        return web.json_response(handler(state, args, request))
    except SlackError as e:
        call["error"] = e.code
        return web.json_response({"ok": False, "error": e.code})


async def handle_upload(request: web.Request) -> web.Response:
    """The `upload_url` of files.getUploadURLExternal: the file's bytes are POSTed here."""
    file = request.app[STATE].files.get(request.match_info["file_id"])
    if file is None:
        return web.Response(status=404, text="unknown file id")
    data = await request.read()
    file.update(content=data.decode("utf-8", errors="replace"), size=len(data))
    return web.Response(text=f"OK - {len(data)}")


async def list_messages(request: web.Request) -> web.Response:
    """Every message posted, replies and ephemerals included, with its update history."""
    channel = request.query.get("channel")
    messages = [m for m in request.app[STATE].messages if channel in (None, m["channel"])]
    return web.json_response({"messages": messages})


async def list_calls(request: web.Request) -> web.Response:
    method = request.query.get("method")
    calls = [c for c in request.app[STATE].calls if method in (None, c["method"])]
    return web.json_response({"calls": calls})


async def reset(request: web.Request) -> web.Response:
    request.app[STATE].clear()
    return web.json_response({"ok": True})


async def set_ratelimit(request: web.Request) -> web.Response:
    """`{"method": "chat.postMessage", "count": N, "retry_after": S}`: the next N calls get 429."""
    body = await request.json()
    if body.get("method") not in METHODS:
        return web.json_response(
            {"ok": False, "error": f"unknown method {body.get('method')!r}"}, status=400
        )
    request.app[STATE].ratelimits[body["method"]] = RateLimit(
        remaining=int(body.get("count", 1)), retry_after_s=int(body.get("retry_after", 1))
    )
    return web.json_response({"ok": True})


async def set_failure(request: web.Request) -> web.Response:
    """`{"method": "chat.postMessage", "count": N, "error": "internal_error"}`: the next N
    calls answer `ok: false` with that error."""
    body = await request.json()
    if body.get("method") not in METHODS:
        return web.json_response(
            {"ok": False, "error": f"unknown method {body.get('method')!r}"}, status=400
        )
    request.app[STATE].failures[body["method"]] = Failure(
        remaining=int(body.get("count", 1)), error=str(body.get("error", "internal_error")))
    return web.json_response({"ok": True})


async def set_usergroup(request: web.Request) -> web.Response:
    """`{"usergroup": "S123", "users": ["U1", ...]}`: what usergroups.users.list answers."""
    body = await request.json()
    request.app[STATE].usergroups[str(body["usergroup"])] = [str(u) for u in body["users"]]
    return web.json_response({"ok": True})


def build_app(config: InteractionConfig | None = None) -> web.Application:
    app = web.Application()
    app[STATE] = SlackFakeState()
    app[CONFIG] = config or InteractionConfig()
    app.router.add_route("*", "/api/{method}", handle_api_call)
    app.router.add_post("/_fake/upload/{file_id}", handle_upload)
    app.router.add_get("/_fake/messages", list_messages)
    app.router.add_get("/_fake/calls", list_calls)
    app.router.add_post("/_fake/reset", reset)
    app.router.add_post("/_fake/ratelimit", set_ratelimit)
    app.router.add_post("/_fake/fail", set_failure)
    app.router.add_post("/_fake/usergroups", set_usergroup)
    add_page_routes(app)
    return app


def _secret(value: str | SecretStr | None) -> SecretStr | None:
    if isinstance(value, str):
        return SecretStr(value) if value else None
    return value


async def start_slack_fake(host: str = "127.0.0.1", port: int = 0, *,
                           signing_secret: str | SecretStr | None = None,
                           interactions_url: str | None = None,
                           local_user: str = DEFAULT_LOCAL_USER) -> tuple[web.AppRunner, str]:
    """Serve the fake on the running loop; returns the runner (`await runner.cleanup()` to
    stop) and the `base_url` for `slack_sdk.WebClient`. With a signing secret and the
    receiver's URL, the page's buttons send signed clicks there as `local_user`."""
    config = InteractionConfig(signing_secret=_secret(signing_secret),
                               interactions_url=interactions_url or None, local_user=local_user)
    runner = web.AppRunner(build_app(config), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_port = runner.addresses[0][1]
    return runner, f"http://{host}:{bound_port}/api/"




def interaction_config(argv: list[str] | None = None) -> tuple[argparse.Namespace,
                                                               InteractionConfig]:
    """Command-line flags over `GPUOPS_SLACK_*` variables. The secret is read from a file or
    the environment, never from a flag: a command line is visible to every local user."""
    settings = get_settings(SlackFakeSettings)
    parser = argparse.ArgumentParser(description="Local fake of the Slack Web API, with a page")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--signing-secret-file", type=Path,
                        help="file holding the receiver's signing secret "
                             "(default: $GPUOPS_SLACK_SIGNING_SECRET)")
    parser.add_argument("--interactions-url", default=settings.interactions_url,
                        help="where the page sends clicks (default: "
                             "$GPUOPS_SLACK_INTERACTIONS_URL)")
    parser.add_argument("--local-user", default=settings.local_user,
                        help=f"Slack user id the page clicks as (default: "
                             f"$GPUOPS_SLACK_LOCAL_USER or {DEFAULT_LOCAL_USER})")
    options = parser.parse_args(argv)
    secret = settings.signing_secret
    if options.signing_secret_file:
        try:
            secret = _secret(options.signing_secret_file.read_text().strip())
        except OSError as e:
            parser.error(f"--signing-secret-file {str(options.signing_secret_file)!r}: "
                         f"{e.strerror}")
    try:
        config = InteractionConfig(signing_secret=secret,
                                   interactions_url=options.interactions_url or None,
                                   local_user=options.local_user)
    except ValueError as e:
        parser.error(str(e))
    return options, config


def main(argv: list[str] | None = None) -> None:
    options, config = interaction_config(argv)
    origin = f"http://{options.host}:{options.port}"

    def announce(_: str) -> None:
        print(f"slack fake serving at {origin}/api/", flush=True)
        clicks = (f"clicks go to {config.interactions_url} as {config.local_user}"
                  if config.why_disabled is None else "buttons disabled (no receiver)")
        print(f"slack page at {origin}/ ({clicks})", flush=True)

    web.run_app(build_app(config), host=options.host, port=options.port, access_log=None,
                print=announce)


if __name__ == "__main__":
    main()
