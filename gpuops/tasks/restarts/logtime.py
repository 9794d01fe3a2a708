"""When a log line was written, from the timestamps the software prints (pure).

Container logs rarely carry the runtime's timestamps, but most ML software stamps its own
lines: Python logging (`2025-06-01 09:59:40,112`), ISO 8601 (`2025-06-01T09:59:40Z`), vLLM
(`INFO 06-01 09:59:41`), glog and PyTorch's c10 logging (`[E601 09:59:58.220114`,
`W0601 09:59:58.110000`). The last two have no year: it is the termination's (the year
before, should that put the line after the termination).

A line without a stamp of its own was written no later than the next stamped line: that
bound is what `written_by` gives, so a traceback printed after the last stamped line has no
known time (it may be the crash itself) while one followed by stamped lines is dated.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,]\d+)?"
                  r"(Z|[+-]\d{2}:?\d{2})?")
_MONTH_DAY = re.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (\d{2})-(\d{2}) "
                        r"(\d{2}):(\d{2}):(\d{2})\b")
_GLOG = re.compile(r"(?:^|[\[\s:])[IWEF](\d{3,4}) (\d{2}):(\d{2}):(\d{2})(?:\.\d+)?\b")
_SEARCH_CHARS = 120  # stamps are at the start of a line (after a launcher's prefix)


def _offset(text: str | None) -> timedelta:
    if not text or text == "Z":
        return timedelta(0)
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))


def _no_year(ref: datetime, month: int, day: int, h: int, m: int, s: int) -> datetime | None:
    try:
        at = datetime(ref.year, month, day, h, m, s, tzinfo=UTC)
    except ValueError:
        return None
    return at.replace(year=ref.year - 1) if at - ref > timedelta(days=1) else at


def line_time(line: str, ref: datetime) -> datetime | None:
    """The time stamped on `line` (UTC; a stamp without an offset is taken as UTC)."""
    head = line[:_SEARCH_CHARS]
    if found := _ISO.search(head):
        y, mo, d, h, mi, s = (int(g) for g in found.groups()[:6])
        try:
            return datetime(y, mo, d, h, mi, s, tzinfo=UTC) - _offset(found.group(7))
        except ValueError:
            return None
    if found := _MONTH_DAY.search(head):
        mo, d, h, mi, s = (int(g) for g in found.groups())
        return _no_year(ref, mo, d, h, mi, s)
    if found := _GLOG.search(head):
        month_day, h, mi, s = found.group(1), *(int(g) for g in found.groups()[1:])
        return _no_year(ref, int(month_day[:-2]), int(month_day[-2:]), h, mi, s)
    return None


def written_by(lines: list[str], ref: datetime) -> list[datetime | None]:
    """For each line, the latest time it can have been written: its own stamp, else the
    next stamped line's, else None (nothing after it says when)."""
    out: list[datetime | None] = [None] * len(lines)
    bound: datetime | None = None
    for i in range(len(lines) - 1, -1, -1):
        own = line_time(lines[i], ref)
        if own is not None:
            bound = own
        out[i] = bound
    return out
