"""The kubelet's restart and image-pull back-off, as `k8s.io/client-go/util/flowcontrol` does it.

Kept apart from the kubelet so the schedule (10 s doubling to 5 min, reset once the last
restart is more than 10 min old) can be unit-tested and read in one place. The kubelet asks
two questions when a container has exited: how long must it still wait (`delay_before_restart`),
and, once it restarts, what the entry becomes (`after_restart`). The first crash restarts at
once; the second waits 10 s, then 20 s, 40 s ... 5 min, exactly like a real node.
"""

from __future__ import annotations

from dataclasses import dataclass

INITIAL_S = 10.0
CAP_S = 300.0


@dataclass(frozen=True)
class BackoffEntry:
    """One (pod, container) back-off: the current delay and when it was last bumped."""

    delay: float
    last_update: float


def _expired(event_time: float, entry: BackoffEntry, cap: float) -> bool:
    # flowcontrol.hasExpired: an entry older than twice the cap is forgotten.
    return event_time - entry.last_update > 2 * cap


def delay_before_restart(entry: BackoffEntry | None, finished_at: float, *,
                         cap: float = CAP_S) -> float:
    """Seconds after `finished_at` before the container may start again (0: at once)."""
    if entry is None or _expired(finished_at, entry, cap):
        return 0.0
    return entry.delay


def after_restart(entry: BackoffEntry | None, finished_at: float, now: float, *,
                  initial: float = INITIAL_S, cap: float = CAP_S) -> BackoffEntry:
    """The entry once the container has been restarted at `now` (flowcontrol.Backoff.Next)."""
    if entry is None or _expired(finished_at, entry, cap):
        return BackoffEntry(initial, now)
    return BackoffEntry(min(entry.delay * 2, cap), now)


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (`10s`, `1m20s`, `5m0s`), as in kubelet text."""
    if seconds < 1 and seconds > 0:
        return f"{round(seconds * 1000)}ms"
    total = round(seconds, 3)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    sec_text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{sec_text}"
    if minutes:
        return f"{int(minutes)}m{sec_text}"
    return sec_text
