"""Slack's mrkdwn as safe HTML (pure), for the Slack fake's page.

Everything from a message is HTML-escaped; only the markup this module adds is HTML.
Code spans and blocks, links and mentions are cut out first (their contents are not
formatted), then `*bold*`, `_italics_` and `~strike~` are marked up on the escaped rest. Slack
escapes `&`, `<` and `>` in message text as entities: they are decoded before escaping again,
so `&lt;` reads as `<`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_CODE_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_ANGLE = re.compile(r"<([^<>\n]+)>")
_SLOT = re.compile("\x00(\\d+)\x00")


def _emphasis(marker: str) -> re.Pattern[str]:
    m = re.escape(marker)
    # Slack's rule: the marker opens after a non-word character and closes before one.
    return re.compile(rf"(?<![\w{m}]){m}(?=\S)([^{m}\n]*?\S){m}(?![\w{m}])")


_STYLES = ((_emphasis("*"), "b"), (_emphasis("_"), "i"), (_emphasis("~"), "s"))


def slack_unescape(text: str) -> str:
    """Slack's three entities back to characters (`&amp;` last, so `&amp;lt;` stays `&lt;`)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _text(raw: str) -> str:
    return html.escape(slack_unescape(raw))


def plain_to_html(text: str) -> str:
    """A plain_text object: escaped, line breaks kept."""
    return html.escape(str(text)).replace("\n", "<br>")


def _angle(content: str) -> str:
    """`<...>`: a link, a user/channel mention or a special mention."""
    target, _, label = content.partition("|")
    if target.startswith("@"):
        return f'<span class="mention">@{_text(label or target[1:])}</span>'
    if target.startswith("#"):
        return f'<span class="mention">#{_text(label or target[1:])}</span>'
    if target.startswith("!"):
        name = target[1:].split("^", 1)[0]
        shown = label or (f"@{name}" if name in ("here", "channel", "everyone") else name)
        return f'<span class="mention">{_text(shown)}</span>'
    url = slack_unescape(target)
    if not url.lower().startswith(_SAFE_SCHEMES):  # no javascript: or data: links
        return _text(label or target)
    return (f'<a href="{html.escape(url, quote=True)}" target="_blank" '
            f'rel="noopener noreferrer">{_text(label or target)}</a>')


def mrkdwn_to_html(text: str) -> str:
    """A mrkdwn text as HTML: the formatting Slack shows, nothing from `text` as markup."""
    slots: list[str] = []

    def cut(pattern: re.Pattern[str], render: Callable[[str], str], source: str) -> str:
        def keep(match: re.Match[str]) -> str:
            slots.append(render(match.group(1)))
            return f"\x00{len(slots) - 1}\x00"
        return pattern.sub(keep, source)

    rest = str(text).replace("\x00", "")
    rest = cut(_CODE_BLOCK, lambda c: f"<pre>{_text(c.strip(chr(10)))}</pre>", rest)
    rest = cut(_CODE_SPAN, lambda c: f"<code>{_text(c)}</code>", rest)
    rest = cut(_ANGLE, _angle, rest)
    marked = _text(rest)
    for pattern, tag in _STYLES:
        marked = pattern.sub(rf"<{tag}>\1</{tag}>", marked)
    marked = marked.replace("\n", "<br>")
    return _SLOT.sub(lambda m: slots[int(m.group(1))], marked)
