"""The Slack fake's page as HTML (pure): channels, threads and messages as a person reads them.

Messages are the fake's own records (with `channel`, `updates`, `ephemeral_to`). A channel
`#ops` and `ops` are one channel, as in Slack. Each message shows its latest version
(marked "edited"), rendered from its Block Kit blocks or, without blocks, from its text;
replies sit under their parent; ephemeral messages are marked with whom they are for.
Nothing that came from a message reaches the page unescaped.
"""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuops.deployments.slackfake_assets import CSS, JS
from gpuops.deployments.slackfake_mrkdwn import mrkdwn_to_html, plain_to_html
from gpuops.deployments.slackfake_state import BOT_USER_ID

FILE_PREVIEW_LINES = 40
CLICKS_SHOWN = 3
_COLOR = re.compile(r"^#?[0-9a-fA-F]{6}$")
_NAMED_COLORS = {"good": "#2eb67d", "warning": "#ecb22e", "danger": "#e01e5a"}

Message = dict[str, Any]


@dataclass(frozen=True)
class PageContext:
    """What every page shows besides messages."""

    local_user: str
    why_disabled: str | None  # None: buttons send clicks
    interactions_url: str | None
    revision: int
    script_nonce: str = ""  # the page's Content-Security-Policy lets only this script run


@dataclass(frozen=True)
class ChannelSummary:
    name: str  # without the leading '#'
    messages: int
    threads: int
    awaiting: int  # messages that still show buttons
    last_ts: str


@dataclass
class Thread:
    parent: Message
    replies: list[Message] = field(default_factory=list)


def channel_name(channel: str) -> str:
    """`#ops` and `ops` name one channel."""
    return channel.lstrip("#") or channel


def channel_path(name: str) -> str:
    return "/channels/" + urllib.parse.quote(name, safe="")


def message_anchor(ts: str) -> str:
    return "m-" + ts.replace(".", "-")


def _has_buttons(message: Message) -> bool:
    return any(isinstance(b, dict) and b.get("type") == "actions"
               for b in message.get("blocks") or [])


def summarize_channels(messages: list[Message]) -> list[ChannelSummary]:
    names = sorted({channel_name(m["channel"]) for m in messages if not m.get("ephemeral_to")})
    summaries = []
    for name in names:
        ours = [m for m in messages
                if channel_name(m["channel"]) == name and not m.get("ephemeral_to")]
        summaries.append(ChannelSummary(
            name=name, messages=len(ours),
            threads=sum(1 for t in threads_of(ours, name) if t.replies),
            awaiting=sum(1 for m in ours if _has_buttons(m)),
            last_ts=max(ours, key=lambda m: float(m["ts"]))["ts"]))
    return summaries


def threads_of(messages: Iterable[Message], name: str) -> list[Thread]:
    """The channel's messages in order, each reply under its parent. A reply whose parent is
    unknown stands on its own."""
    ours = sorted((m for m in messages if channel_name(m["channel"]) == name),
                  key=lambda m: float(m["ts"]))
    by_ts: dict[str, Thread] = {}
    threads: list[Thread] = []
    for m in ours:
        parent = m.get("thread_ts")
        if parent and parent != m["ts"] and parent in by_ts:
            by_ts[parent].replies.append(m)
            continue
        thread = Thread(parent=m)
        threads.append(thread)
        if not m.get("ephemeral_to"):
            by_ts[m["ts"]] = thread
    return threads


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _time(ts: str) -> str:
    try:
        when = datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError):
        return ""
    return (f'<time datetime="{when.isoformat()}" title="{when:%Y-%m-%d %H:%M:%S} UTC">'
            f"{when:%H:%M:%S}</time>")


def _text_object(obj: Any) -> str:
    if isinstance(obj, str):
        return mrkdwn_to_html(obj)
    if not isinstance(obj, dict):
        return ""
    if obj.get("type") == "plain_text":
        return plain_to_html(obj.get("text", ""))
    return mrkdwn_to_html(obj.get("text", ""))


def _plain(obj: Any) -> str:
    """A text object's words, for attributes and dialogs (escaped by the caller)."""
    return str(obj.get("text", "")) if isinstance(obj, dict) else str(obj or "")


def _link(url: Any, label: str) -> str:
    if isinstance(url, str) and url.lower().startswith(("http://", "https://")):
        return (f'<a href="{_e(url)}" target="_blank" rel="noopener noreferrer">'
                f"{label}</a>")
    return label


def _button(element: dict, *, enabled: bool, why_disabled: str | None) -> str:
    label = _text_object(element.get("text"))
    style = element.get("style") if element.get("style") in ("primary", "danger") else ""
    if element.get("url"):
        return _link(element["url"], f'<span class="btn {style}">{label}</span>')
    confirm = element.get("confirm")
    confirm_attr = ""
    if isinstance(confirm, dict):
        question = "\n\n".join(t for t in (_plain(confirm.get("title")),
                                           _plain(confirm.get("text"))) if t)
        confirm_attr = f' data-confirm="{_e(question)}"'
    disabled = "" if enabled else f' disabled title="{_e(why_disabled or "")}"'
    return (f'<button type="submit" class="btn {style}" name="action_id" '
            f'value="{_e(element.get("action_id", ""))}"{confirm_attr}{disabled}>'
            f"{label}</button>")


def _actions(block: dict, message: Message, ctx: PageContext) -> str:
    enabled = ctx.why_disabled is None
    parts = []
    for element in block.get("elements") or []:
        if isinstance(element, dict) and element.get("type") == "button":
            parts.append(_button(element, enabled=enabled, why_disabled=ctx.why_disabled))
        elif isinstance(element, dict):
            parts.append(f'<span class="unknown">[{_e(element.get("type", "?"))}]</span>')
    note = "" if enabled else f'<span class="disabled-note">{_e(ctx.why_disabled)}</span>'
    return ('<form class="actions" method="post" action="/_fake/interact">'
            f'<input type="hidden" name="channel" value="{_e(message["channel"])}">'
            f'<input type="hidden" name="ts" value="{_e(message["ts"])}">'
            + "".join(parts) + note + '<span class="click-status" role="status"></span></form>')


def _section(block: dict, message: Message, ctx: PageContext) -> str:
    out = ['<div class="b-section">']
    if block.get("text"):
        out.append(f'<div class="b-text">{_text_object(block["text"])}</div>')
    fields = [f for f in block.get("fields") or [] if isinstance(f, (dict, str))]
    if fields:
        out.append('<div class="fields">' + "".join(
            f"<div>{_text_object(f)}</div>" for f in fields) + "</div>")
    accessory = block.get("accessory")
    if isinstance(accessory, dict) and accessory.get("type") == "button":
        out.append(_actions({"elements": [accessory]}, message, ctx))
    elif isinstance(accessory, dict) and accessory.get("type") == "image":
        out.append(_link(accessory.get("image_url"),
                         f'[image: {_e(accessory.get("alt_text", ""))}]'))
    out.append("</div>")
    return "".join(out)


def _context(block: dict) -> str:
    items = []
    for element in block.get("elements") or []:
        if isinstance(element, dict) and element.get("type") == "image":
            items.append(f'<span>[{_e(element.get("alt_text", "image"))}]</span>')
        else:
            items.append(f"<span>{_text_object(element)}</span>")
    return '<div class="b-context">' + "".join(items) + "</div>"


def render_block(block: Any, message: Message, ctx: PageContext) -> str:
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "header":
        return f'<div class="b-header">{_text_object(block.get("text"))}</div>'
    if kind == "section":
        return _section(block, message, ctx)
    if kind == "context":
        return _context(block)
    if kind == "divider":
        return "<hr>"
    if kind == "actions":
        return _actions(block, message, ctx)
    if kind == "image":
        title = _text_object(block.get("title")) or _e(block.get("alt_text", "image"))
        return f'<div class="b-image">{_link(block.get("image_url"), f"[image: {title}]")}</div>'
    return f'<div class="unknown">[a {_e(kind)} block, not shown here]</div>'


def _attachment(attachment: Any, message: Message, ctx: PageContext) -> str:
    if not isinstance(attachment, dict):
        return ""
    color = str(attachment.get("color", ""))
    color = _NAMED_COLORS.get(color, color if _COLOR.match(color) else "#dddddd")
    color = color if color.startswith("#") else f"#{color}"
    body = [f'<div class="b-text">{mrkdwn_to_html(attachment[k])}</div>'
            for k in ("pretext", "title", "text") if attachment.get(k)]
    body += [render_block(b, message, ctx) for b in attachment.get("blocks") or []]
    return f'<div class="attachment" style="--bar: {color}">' + "".join(body) + "</div>"


def _files(message: Message) -> str:
    files = [f for f in message.get("files") or [] if isinstance(f, dict)]
    if not files:
        return ""
    items = []
    for f in files:
        content = f.get("content")
        preview = ""
        if isinstance(content, str) and content:
            lines = content.splitlines()
            shown = "\n".join(lines[:FILE_PREVIEW_LINES])
            more = (f"\n… ({len(lines) - FILE_PREVIEW_LINES} more lines)"
                    if len(lines) > FILE_PREVIEW_LINES else "")
            preview = (f"<details><summary>preview</summary><pre>{_e(shown + more)}</pre>"
                       "</details>")
        items.append(
            f'<li>File <a href="/_fake/files/{urllib.parse.quote(str(f.get("id", "")))}">'
            f'{_e(f.get("title") or f.get("name"))}</a> '
            f'<span class="unknown">{_e(f.get("name", ""))}, {_e(f.get("size", "?"))} bytes'
            f"</span>{preview}</li>")
    return '<ul class="files">' + "".join(items) + "</ul>"


def _clicks(clicks: list[dict[str, Any]]) -> str:
    if not clicks:
        return ""
    items = []
    for c in clicks[-CLICKS_SHOWN:]:
        status = c.get("status")
        answered = (f"the receiver answered HTTP {status}" if status is not None
                    else f"not delivered: {c.get('error')}")
        bad = "" if status is not None and 200 <= status < 300 else ' class="bad"'
        items.append(f"<li{bad}>{_time(c.get('ts_clicked', ''))} {_e(c.get('user'))} clicked "
                     f"<b>{_e(c.get('label') or c.get('action_id'))}</b> — {_e(answered)}</li>")
    return '<ul class="clicks">' + "".join(items) + "</ul>"


def _who(message: Message) -> str:
    user = message.get("user") or ""
    if user == BOT_USER_ID or message.get("bot_id"):
        return '<span class="who">gpuops</span><span class="app-badge">APP</span>'
    return f'<span class="who">@{_e(user or "someone")}</span>'


def render_message(message: Message, ctx: PageContext,
                   clicks: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    header = [_who(message), _time(message["ts"])]
    updates = message.get("updates") or []
    if updates:
        header.append(f'<span class="edited" title="edited {len(updates)}×">(edited)</span>')
    if message.get("reply_broadcast"):
        header.append('<span class="edited">also sent to the channel</span>')
    ephemeral_to = message.get("ephemeral_to")
    if ephemeral_to:
        whom = "you" if ephemeral_to == ctx.local_user else f"@{ephemeral_to}"
        header.append(f'<span class="ephemeral-note">Only visible to {_e(whom)}</span>')
    blocks = [b for b in message.get("blocks") or [] if isinstance(b, dict)]
    body = ("".join(render_block(b, message, ctx) for b in blocks) if blocks
            else f'<div class="b-text">{mrkdwn_to_html(message.get("text") or "")}</div>')
    body += "".join(_attachment(a, message, ctx) for a in message.get("attachments") or [])
    kind = "msg ephemeral" if ephemeral_to else "msg"
    return (f'<article class="{kind}" id="{message_anchor(message["ts"])}" '
            f'data-ts="{_e(message["ts"])}"><header>{" ".join(header)}</header>'
            f"{body}{_files(message)}"
            f"{_clicks(clicks.get((message['channel'], message['ts']), []))}</article>")


def _thread(thread: Thread, ctx: PageContext,
            clicks: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    out = render_message(thread.parent, ctx, clicks)
    if thread.replies:
        count = len(thread.replies)
        out += (f'<details class="thread" open data-id="t-{_e(thread.parent["ts"])}">'
                f"<summary>{count} repl{'y' if count == 1 else 'ies'}</summary>"
                + "".join(render_message(r, ctx, clicks) for r in thread.replies)
                + "</details>")
    return out


def _sidebar(channels: list[ChannelSummary], ctx: PageContext, current: str | None) -> str:
    items = []
    for c in channels:
        here = ' class="current"' if c.name == current else ""
        badge = (f'<span class="count awaiting" title="{c.awaiting} awaiting a click">'
                 f"{c.awaiting}</span>" if c.awaiting
                 else f'<span class="count">{c.messages}</span>')
        items.append(f'<li><a href="{_e(channel_path(c.name))}"{here}>'
                     f"<span># {_e(c.name)}</span>{badge}</a></li>")
    return ('<nav class="sidebar"><a class="brand" href="/">gpuops · local Slack</a>'
            f'<ul>{"".join(items)}</ul>'
            f'<p class="you">You are <b>@{_e(ctx.local_user)}</b></p></nav>')


def _banner(ctx: PageContext) -> str:
    if ctx.why_disabled:
        return f'<p class="banner">{_e(ctx.why_disabled)}</p>'
    return (f'<p class="banner on">Buttons send a signed Slack click to '
            f"<code>{_e(ctx.interactions_url)}</code> as <b>@{_e(ctx.local_user)}</b>.</p>")


def _page(title: str, main: str, channels: list[ChannelSummary], ctx: PageContext,
          current: str | None = None) -> str:
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)} · gpuops local Slack</title><style>{CSS}</style></head>"
            f'<body data-revision="{ctx.revision}"><div class="app" id="content">'
            f"{_sidebar(channels, ctx, current)}<main>{main}</main></div>"
            f'<script nonce="{_e(ctx.script_nonce)}">{JS}</script></body></html>')


def channel_list_page(messages: list[Message], ctx: PageContext) -> str:
    channels = summarize_channels(messages)
    if channels:
        rows = "".join(
            f'<tr><td><a href="{_e(channel_path(c.name))}"># {_e(c.name)}</a></td>'
            f"<td>{c.messages}</td><td>{c.threads}</td><td>{c.awaiting}</td>"
            f"<td>{_time(c.last_ts)}</td></tr>" for c in channels)
        listing = ('<table class="channels"><tr><th>channel</th><th>messages</th>'
                   "<th>threads</th><th>awaiting a click</th><th>last message</th></tr>"
                   f"{rows}</table>")
    else:
        listing = ('<p class="empty">No messages yet. gpuops posts here: restart reports, '
                   "approval requests, recoveries.</p>")
    main = ("<h1>Channels</h1>" + _banner(ctx) + listing
            + '<p class="unknown">The same messages as JSON: <a href="/_fake/messages">'
              "/_fake/messages</a>.</p>")
    return _page("Channels", main, channels, ctx)


def channel_page(messages: list[Message], name: str, ctx: PageContext,
                 clicks: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    threads = threads_of(messages, name)
    body = ("".join(_thread(t, ctx, clicks) for t in threads) if threads
            else '<p class="empty">No messages in this channel yet.</p>')
    main = f"<h1># {_e(name)}</h1>{_banner(ctx)}{body}"
    return _page(f"#{name}", main, summarize_channels(messages), ctx, current=name)
