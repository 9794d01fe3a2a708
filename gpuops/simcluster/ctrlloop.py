"""The work loop every workload controller shares, shaped like client-go's workqueue.

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
from typing import TYPE_CHECKING

from . import errors

if TYPE_CHECKING:
    from .server import SimCluster

log = logging.getLogger("gpuops.simcluster.controllers")


class ControllerLoop:
    name = "controller"
    idle_check_s = 0.2  # real seconds between looks at the virtual clock while idle
    batch_delay_s = 0.003  # real seconds to let a burst of changes collect before syncing
    retry_after_s = 5.0  # virtual seconds before retrying a key whose sync failed

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.clock = cluster.clock
        self._dirty: dict[Hashable, None] = {}
        self._timers: list[tuple[float, int, Hashable]] = []
        self._timer_at: dict[Hashable, float] = {}
        self._seq = itertools.count()
        self._wake = asyncio.Event()

    # --- queueing ------------------------------------------------------------------------------

    def enqueue(self, key: Hashable) -> None:
        if key not in self._dirty:
            self._dirty[key] = None
            self._wake.set()

    def enqueue_at(self, when: float, key: Hashable) -> None:
        """Sync `key` again at virtual time `when` (the earliest pending request wins)."""
        pending = self._timer_at.get(key)
        if pending is not None and pending <= when:
            return
        self._timer_at[key] = when
        heapq.heappush(self._timers, (when, next(self._seq), key))

    def enqueue_after(self, seconds: float, key: Hashable) -> None:
        self.enqueue_at(self.clock.time() + seconds, key)

    # --- the loop ------------------------------------------------------------------------------

    def sync(self, key: Hashable) -> None:  # pragma: no cover - every controller overrides it
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

    def _sync_one(self, key: Hashable) -> None:
        try:
            self.sync(key)
        except errors.ApiError as e:
            if e.code == 404:
                return  # the object went away under us; its deletion event re-queued what matters
            log.warning("%s: sync of %s failed: %s %s", self.name, key, e.code, e.message)
            self.enqueue_after(self.retry_after_s, key)
        except Exception:
            log.exception("%s: sync of %s crashed; retrying in %ss", self.name, key,
                          self.retry_after_s)
            self.enqueue_after(self.retry_after_s, key)

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
