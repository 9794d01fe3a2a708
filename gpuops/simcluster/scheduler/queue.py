"""kube-scheduler's scheduling queue: which pending pod is tried next, and when one is again.

Pods wait in one of three places, as in kube-scheduler: active (priority order, then oldest
first), back-off (1 s after the first failed attempt, doubling to 10 s, virtual time) and
unschedulable (until a change could help them, or 5 minutes at most). The scheduler moves a
pod back with `requeue` when a change helps it (its queueing hints); this module keeps the
order and the timers.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from .filters import PodInfo, PodKey

INITIAL_BACKOFF_S = 1.0  # kube-scheduler's podInitialBackoffSeconds
MAX_BACKOFF_S = 10.0  # podMaxBackoffSeconds
UNSCHEDULABLE_MAX_WAIT_S = 300.0  # podMaxInUnschedulablePodsDuration
FLUSH_PERIOD_S = 30.0  # how often that wait is checked

ACTIVE, BACKOFF, UNSCHEDULABLE, IN_FLIGHT, GONE = "active", "backoff", "unschedulable", \
    "in-flight", "gone"


def backoff_s(attempts: int) -> float:
    """1 s after the first failed attempt, doubling, at most 10 s."""
    if attempts <= 0:
        return 0.0
    return min(INITIAL_BACKOFF_S * 2 ** (attempts - 1), MAX_BACKOFF_S)


@dataclass(eq=False)
class QueuedPod:
    info: PodInfo
    queued_at: float  # orders pods of equal priority, oldest first
    attempts: int = 0
    last_attempt: float = 0.0
    state: str = ACTIVE
    backoff_until: float = 0.0


class SchedulingQueue:
    def __init__(self, now: float, wake: Callable[[], None]) -> None:
        """`wake()` is called when a pod becomes active (the scheduler may be idle)."""
        self._wake = wake
        self._entries: dict[PodKey, QueuedPod] = {}  # pending pods this scheduler owns
        self._active: list[tuple[int, float, int, PodKey]] = []  # heap
        self._backoff: list[tuple[float, int, PodKey]] = []  # heap
        self._unschedulable: set[PodKey] = set()
        self._seq = itertools.count()
        self._last_flush = now

    # --- membership ----------------------------------------------------------------------------

    def get(self, key: PodKey) -> QueuedPod | None:
        return self._entries.get(key)

    def add(self, entry: QueuedPod) -> None:
        self._entries[entry.info.key] = entry

    def remove(self, key: PodKey) -> QueuedPod | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.state = GONE
            self._unschedulable.discard(key)
        return entry

    def entries(self) -> list[QueuedPod]:
        return list(self._entries.values())

    def unschedulable(self) -> list[QueuedPod]:
        return [self._entries[key] for key in self._unschedulable]

    # --- moving pods ---------------------------------------------------------------------------

    def activate(self, entry: QueuedPod) -> None:
        if entry.state == IN_FLIGHT:
            return
        self._unschedulable.discard(entry.info.key)
        entry.state = ACTIVE
        heapq.heappush(self._active, (-entry.info.priority, entry.queued_at, next(self._seq),
                                      entry.info.key))
        self._wake()

    def requeue(self, entry: QueuedPod, now: float) -> None:
        """Back to the queue after a change: now if its back-off is over, else when it is."""
        until = entry.last_attempt + backoff_s(entry.attempts)
        if until <= now:
            self.activate(entry)
            return
        self._unschedulable.discard(entry.info.key)
        entry.state, entry.backoff_until = BACKOFF, until
        heapq.heappush(self._backoff, (until, next(self._seq), entry.info.key))

    def mark_unschedulable(self, entry: QueuedPod) -> None:
        entry.state = UNSCHEDULABLE
        self._unschedulable.add(entry.info.key)

    def release_due(self, now: float) -> None:
        """Unschedulable pods past the longest wait, and pods whose back-off is over, go
        back to active."""
        if now - self._last_flush >= FLUSH_PERIOD_S:
            self._last_flush = now
            for key in [k for k in self._unschedulable
                        if now - self._entries[k].last_attempt >= UNSCHEDULABLE_MAX_WAIT_S]:
                self.requeue(self._entries[key], now)
        while self._backoff and self._backoff[0][0] <= now:
            until, _, key = heapq.heappop(self._backoff)
            entry = self._entries.get(key)
            if entry is not None and entry.state == BACKOFF and entry.backoff_until == until:
                self.activate(entry)

    def pop(self) -> QueuedPod | None:
        """The next active pod to try, in priority then age order."""
        while self._active:
            _, _, _, key = heapq.heappop(self._active)
            entry = self._entries.get(key)
            if entry is not None and entry.state == ACTIVE:
                return entry
        return None

    # --- reading -------------------------------------------------------------------------------

    def has_active(self) -> bool:
        return bool(self._active)

    def has_unschedulable(self) -> bool:
        return bool(self._unschedulable)

    def next_backoff_at(self) -> float | None:
        return self._backoff[0][0] if self._backoff else None
