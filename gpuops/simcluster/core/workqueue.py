"""The work loop the workload controllers and the kubelet share, shaped like client-go's
workqueue.

Store listeners mark the keys a change touches (dirty set, deduplicated); timers wake a key at
a virtual time (minReadySeconds, progress deadlines, Job back-off, TTLs); the loop syncs each
dirty key once. Nothing rescans the whole store on a tick, and an idle loop costs a few
wake-ups a second. Timers compare against the virtual clock, so `clock.advance` fires them.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Hashable
from typing import Generic, TypeVar

from . import errors
from .clock import VirtualClock
from .store import Store

log = logging.getLogger("gpuops.simcluster.controllers")


K = TypeVar("K", bound=Hashable)  # what one sync is about: a (namespace, name), a node...


class ControllerLoop(Generic[K]):
    name = "controller"
    idle_check_s = 0.2  # real seconds between looks at the virtual clock while idle
    batch_delay_s = 0.003  # real seconds to let a burst of changes collect before syncing
    retry_after_s = 5.0  # virtual seconds before retrying a key whose sync failed...
    retry_cap_s = 300.0  # ...doubling with each failure in a row, up to this

    def __init__(self, store: Store, clock: VirtualClock) -> None:
        self.store = store
        self.clock = clock
        self._dirty: dict[K, None] = {}
        self._timers: list[tuple[float, int, K]] = []
        self._timer_at: dict[K, float] = {}
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._failing: dict[K, tuple[str, int]] = {}  # key -> (error, failures in a row)

    # --- queueing ------------------------------------------------------------------------------

    def enqueue(self, key: K) -> None:
        if key not in self._dirty:
            self._dirty[key] = None
            self._wake.set()

    def enqueue_at(self, when: float, key: K) -> None:
        """Sync `key` again at virtual time `when` (the earliest pending request wins)."""
        pending = self._timer_at.get(key)
        if pending is not None and pending <= when:
            return
        self._timer_at[key] = when
        heapq.heappush(self._timers, (when, next(self._seq), key))

    def enqueue_after(self, seconds: float, key: K) -> None:
        self.enqueue_at(self.clock.time() + seconds, key)

    # --- the loop ------------------------------------------------------------------------------

    def sync(self, key: K) -> None:  # pragma: no cover - every controller overrides it
        raise NotImplementedError

    async def run(self) -> None:
        while True:
            await self._wait()
            await self.drain()

    async def drain(self) -> None:
        """Sync every key that is dirty or whose timer is due."""
        self._collect_due()
        while self._dirty:
            batch = list(self._dirty)
            self._dirty.clear()
            for i, key in enumerate(batch):
                self._sync_one(key)
                if i % 100 == 99:
                    await asyncio.sleep(0)  # let the API server answer between big batches
            await asyncio.sleep(0)  # and between rounds, should syncs keep re-dirtying keys

    def _sync_one(self, key: K) -> None:
        try:
            self.sync(key)
        except errors.ApiError as e:
            if e.code == 404:
                self._failing.pop(key, None)
                return  # the object went away under us; its deletion event re-queued what matters
            self._failed(key, f"{e.code} {e.message}", crashed=False)
        except Exception as e:  # noqa: BLE001 - one key's bug must not stop the loop
            self._failed(key, f"{type(e).__name__}: {e}", crashed=True)
        else:
            failed = self._failing.pop(key, None)
            if failed is not None:
                log.info("%s: sync of %s works again after %d failure(s)", self.name, key,
                         failed[1])

    def _failed(self, key: K, error: str, *, crashed: bool) -> None:
        """Retry with a doubling delay; log a key's failure once, not at every retry (again
        only when the error changes), so one bad object neither floods the log nor fails
        unseen."""
        previous = self._failing.get(key)
        failures = 1 if previous is None else previous[1] + 1
        self._failing[key] = (error, failures)
        delay = min(self.retry_after_s * 2 ** min(failures - 1, 16), self.retry_cap_s)
        if previous is None or previous[0] != error:
            log.log(logging.ERROR if crashed else logging.WARNING,
                    "%s: sync of %s %s: %s; retrying with back-off (up to every %gs), not "
                    "logged again until the error changes", self.name, key,
                    "crashed" if crashed else "failed", error, self.retry_cap_s,
                    exc_info=crashed)
        self.enqueue_after(delay, key)

    def _collect_due(self) -> None:
        now = self.clock.time()
        while self._timers and self._timers[0][0] <= now:
            when, _, key = heapq.heappop(self._timers)
            if self._timer_at.get(key) == when:
                del self._timer_at[key]
                self._dirty[key] = None

    async def _wait(self) -> None:
        if not self._dirty:
            timeout = self.idle_check_s
            if self._timers:
                until = (self._timers[0][0] - self.clock.time()) / self.clock.speed
                timeout = max(0.0, min(timeout, until))
            self._wake.clear()
            if timeout > 0:
                # Not asyncio.wait_for: on 3.11 it can swallow a cancel that arrives as the
                # event fires, and the loop then outlives cluster.stop().
                try:
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                except TimeoutError:
                    pass
        await asyncio.sleep(self.batch_delay_s)
