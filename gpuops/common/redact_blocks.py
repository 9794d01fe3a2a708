"""Private-key blocks in text: PEM of every kind (RSA, EC, DSA, OPENSSH, ENCRYPTED, PKCS#8, SSH2,
PGP PRIVATE KEY BLOCK) and PuTTY `.ppk` files, whole or cut by log truncation.

A block is found by its markers, not by one regular expression over the text: a BEGIN with no
END would make a lazy `.*?` scan to the end of the text from every BEGIN (quadratic on a
hostile log). Here the END markers are found once, each BEGIN looks up the next END with a
bisection, and a cut block (no END, or no BEGIN) is followed line by line, so the cost is
linear in the text. Lines may be real newlines or the `\\n` escapes of a JSON string (a
service-account key inside JSON).
"""

from __future__ import annotations

import bisect
import re

MAX_BLOCK_CHARS = 128 * 1024  # a PGP key with subkeys is tens of KiB; an RSA-8192 PEM ~6 KiB
MAX_CUT_LINES = 512

_KIND = r"(?:[A-Z0-9]+ ){0,4}PRIVATE KEY(?: BLOCK)?"
_BEGIN = re.compile(r"-{4,5} ?BEGIN " + _KIND + r" ?-{4,5}")
_END = re.compile(r"-{4,5} ?END " + _KIND + r" ?-{4,5}")
# One line of a key body: base64, a PEM/PGP header (Proc-Type, DEK-Info, Version, Comment),
# or a PGP checksum line (`=AbCd`).
_BODY_LINE = re.compile(r"[ \t]*(?:[A-Za-z0-9+/]{8,}={0,2}|=[A-Za-z0-9+/]{4}|"
                        r"(?:Proc-Type|DEK-Info|Version|Comment|Hash|Charset): ?[^\n\\]{0,200})"
                        r"[ \t]*")
_BODY_PREFIX = re.compile(r"[ \t]*[A-Za-z0-9+/]{8,}={0,2}")  # a line cut by a quote or the end
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_NEWLINE = re.compile(r"\r?\n|(?:\\r)?\\n")
_PUTTY_PRIVATE = re.compile(r"Private-Lines: ?\d{1,4}[ \t]*(?:\r?\n|(?:\\r)?\\n)")
_PUTTY_MAC = re.compile(r"(Private-MAC: ?)[0-9A-Fa-f]{16,}")


def _line_end(text: str, start: int) -> tuple[int, int]:
    """(end of the line starting at `start`, start of the next line or -1)."""
    m = _NEWLINE.search(text, start)
    return (len(text), -1) if m is None else (m.start(), m.end())


def _body_end(text: str, start: int) -> int:
    """Where the key body that starts at `start` ends: after its last body line."""
    end = pos = start
    blank = 0
    for _ in range(MAX_CUT_LINES):
        line_end, next_start = _line_end(text, pos)
        if _BODY_LINE.fullmatch(text, pos, line_end):
            end, blank = line_end, 0
        elif pos == line_end and blank == 0 and pos != start:  # PGP: blank line after headers
            blank = 1
        else:
            cut = _BODY_PREFIX.match(text, pos, line_end)
            return cut.end() if cut else end
        if next_start < 0:
            return end
        pos = next_start
    return end


def _tail_start(text: str, end_marker: int, floor: int) -> int:
    """Where the body that ends at an END marker with no BEGIN starts: the first of the
    consecutive body lines just before it (never before `floor`, so the windows of
    successive markers do not overlap and the scan stays linear)."""
    lo = max(floor, end_marker - MAX_BLOCK_CHARS)
    starts, ends = [lo], []
    for m in _NEWLINE.finditer(text, lo, end_marker):
        ends.append(m.start())
        starts.append(m.end())
    ends.append(end_marker)
    start = end_marker
    for i in range(len(starts) - 1, -1, -1):
        a, b = starts[i], ends[i]
        if i == len(starts) - 1 and not text[a:b].strip(" \t"):
            continue  # the END marker begins its own line
        if _BODY_LINE.fullmatch(text, a, b):
            start = a
            continue
        # `"key": "MIIE...`: the body after the quote (scanned from the end: linear)
        line = text[a:b].rstrip(" \t")
        core = line.rstrip("=")
        body = len(core) - len(core.rstrip(_B64))
        if body >= 8:
            start = a + len(core) - body
        break
    return start


def mask_key_blocks(text: str, mask: str) -> str:
    """Replace every private-key block (and what a truncated log kept of one) by `mask`."""
    if "PRIVATE KEY" not in text and "Private-" not in text:
        return text
    spans: list[tuple[int, int]] = []
    ends = list(_END.finditer(text))
    end_starts = [m.start() for m in ends]
    used_ends: set[int] = set()
    covered = 0
    for begin in _BEGIN.finditer(text):
        if begin.start() < covered:
            continue
        i = bisect.bisect_left(end_starts, begin.end())
        if i < len(ends) and ends[i].start() - begin.end() <= MAX_BLOCK_CHARS:
            stop = ends[i].end()
            used_ends.add(i)
        else:
            _, next_start = _line_end(text, begin.end())
            stop = _body_end(text, next_start) if next_start >= 0 else begin.end()
            stop = max(stop, begin.end())
        spans.append((begin.start(), stop))
        covered = stop
    # Tails whose BEGIN the log no longer holds. BEGIN spans are sorted and disjoint; a tail
    # ends at its own END marker, so it never holds a later one.
    tails: list[tuple[int, int]] = []
    floor = 0
    for i, end in enumerate(ends):
        if i not in used_ends:
            before = bisect.bisect_right(spans, (end.start(), len(text) + 1)) - 1
            if before < 0 or spans[before][1] <= end.start():
                lower = max(floor, spans[before][1] if before >= 0 else 0)
                tails.append((_tail_start(text, end.start(), lower), end.end()))
        floor = end.end()
    spans += tails
    for m in _PUTTY_PRIVATE.finditer(text):
        spans.append((m.end(), _body_end(text, m.end())))
    if not spans:
        return _PUTTY_MAC.sub(r"\1" + mask, text) if "Private-MAC" in text else text
    spans.sort()
    out, last = [], 0
    for a, b in spans:
        if b <= last:
            continue
        a = max(a, last)
        out.append(text[last:a])
        out.append(mask)
        last = b
    out.append(text[last:])
    masked = "".join(out)
    return _PUTTY_MAC.sub(r"\1" + mask, masked) if "Private-MAC" in masked else masked
