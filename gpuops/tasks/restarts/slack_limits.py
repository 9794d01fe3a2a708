"""gpuops' own caps on Slack calls: Prefect global concurrency limits used as rate limits.

New messages are limited per channel (Slack allows about one a second per channel), parent
edits overall (Tier 3). The limits are created on first use with the policy's rates; the
Prefect UI shows how full each is.

Taking slots is Prefect's `rate_limit`, with two differences for a busy SQLite server (the
dev default). Its slot increment reads, then writes, in a deferred transaction, so on SQLite
it fails with 503 "database is locked" whenever one of the server's own writers (event
persister, task-run recorder) commits in between; in a restart storm that goes on for
seconds at a time. Prefect's client waits 2, 4, 8, 16 s before trying again, which was most
of a Slack message's latency in a storm. So:
- `take_slots` retries a 503 within 0.3 s;
- `SlackLimits` keeps the same leaky-bucket arithmetic locally for this run's own takes. When
  the server has stayed locked for `SERVER_WAIT`, a take that fits this run's own bucket goes
  ahead and is recorded on the server in the background (`finish` waits for the records).
  Only one restart-diagnostics run is active at a time, so its own takes are what fills
  these limits (a new run's bucket starts empty: at a handover, a locked server can let the
  last minute's budget through once more); a server that answers "full" (423) is always
  waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import httpx
from prefect.client.orchestration import PrefectClient, get_client
from prefect.concurrency.asyncio import rate_limit
from prefect.exceptions import ObjectAlreadyExists

from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.common.prefect_api import send_once
from gpuops.tasks.restarts.history import slug

log = logging.getLogger("gpuops.slack_limits")

SLACK_POSTS = "gpuops-slack-posts"  # one limit per channel: SLACK_POSTS-<channel>
SLACK_UPDATES = "gpuops-slack-updates"
LOCKED_RETRY_FOR = 60.0  # seconds of quick 503 retries before giving up
SERVER_WAIT = 0.5  # seconds of 503s before a take that fits this run's own bucket goes ahead


async def take_slots(names: list[str], slots: int, client: PrefectClient | None = None,
                     *, locked_for: float = LOCKED_RETRY_FOR) -> bool:
    """Occupy `slots` slots of each rate limit in `names` (which must exist), waiting while
    they are full (423: for the server's Retry-After). A 503 is retried within 0.3 s;
    False if the server still answered 503 after `locked_for` seconds (nothing
    taken). Any other answer, or a second dropped connection, goes to Prefect's
    `rate_limit`, which retries in its own way or raises a clear error."""
    async with contextlib.AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(get_client())
        body = {"names": names, "slots": slots, "mode": "rate_limit"}
        locked_until = None
        dropped = 0
        for attempt in itertools.count():
            try:
                # Sent once: Prefect's client would sleep 2**n s on a 503 before returning it.
                response = await send_once(client, "POST", "/v2/concurrency_limits/increment",
                                           json=body)
            except httpx.TransportError:
                dropped += 1  # a kept-alive connection the server just closed: once more
                if dropped > 1:
                    break
                continue
            if response.status_code == 200 and response.json():
                return True
            if response.status_code == 423:
                await asyncio.sleep(float(response.headers.get("Retry-After", 1)))
                continue
            if response.status_code != 503:
                break
            locked_until = locked_until or time.monotonic() + locked_for
            if time.monotonic() >= locked_until:
                return False
            await asyncio.sleep(min(0.2, 0.02 * 2 ** attempt) * random.uniform(0.5, 1.5))
    await rate_limit(names, occupy=slots, strict=True)
    return True


@dataclass
class LeakyBucket:
    """A Prefect rate limit's arithmetic: `capacity` slots, freed at `per_second`."""

    capacity: float
    per_second: float
    level: float = 0.0
    at: float = field(default_factory=time.monotonic)

    def _drain(self, now: float) -> None:
        self.level = max(0.0, self.level - (now - self.at) * self.per_second)
        self.at = now

    def fits(self, slots: int, now: float) -> bool:
        self._drain(now)
        return self.level + slots <= self.capacity

    def charge(self, slots: int, now: float) -> None:
        self._drain(now)
        self.level += slots


class SlackLimits:
    """Per run: the policy's Slack rate limits, created once, and slots taken from them."""

    def __init__(self, policy: RestartPolicy, logger: logging.Logger | logging.LoggerAdapter
                 = log, take: Callable[..., Awaitable[bool]] = take_slots) -> None:
        self.policy, self.log, self._server_take = policy, logger, take
        self._ready = asyncio.Lock()
        self._own: dict[str, LeakyBucket] = {}  # this run's takes, per limit it has ensured
        self._records: list[asyncio.Task] = []  # takes not yet recorded on the server

    async def _ensure(self, names: Sequence[str], per_minute: int) -> None:
        async with self._ready:  # workloads handled at once share the limits
            missing = [n for n in names if n not in self._own]
            if not missing:
                return
            async with get_client() as client:
                for name in missing:
                    with contextlib.suppress(ObjectAlreadyExists):  # another run made it
                        await client.upsert_global_concurrency_limit_by_name(
                            name, per_minute, slot_decay_per_second=per_minute / 60)
            for name in missing:
                self._own[name] = LeakyBucket(per_minute, per_minute / 60)

    async def _take(self, slots: dict[str, int], per_minute: int) -> None:
        """Occupy `slots[name]` slots of each limit. Limits that need the same number go in
        one request: one write on the Prefect server instead of one per channel."""
        await self._ensure(sorted(slots), per_minute)
        by_count: dict[int, list[str]] = defaultdict(list)
        for name, count in slots.items():
            by_count[count].append(name)

        async def take(count: int, names: list[str]) -> None:
            while count > 0:  # Prefect refuses more slots at once than the limit
                await self._take_now(sorted(names), min(count, per_minute))
                count -= per_minute
        # At once: on a locked server each waits up to SERVER_WAIT, not their sum.
        await asyncio.gather(*(take(count, names) for count, names in by_count.items()))

    async def _take_now(self, names: list[str], slots: int) -> None:
        own = [self._own[name] for name in names]
        while not await self._server_take(names, slots, locked_for=SERVER_WAIT):
            if all(bucket.fits(slots, time.monotonic()) for bucket in own):
                self._records.append(asyncio.create_task(self._record(names, slots)))
                break
        for bucket in own:
            bucket.charge(slots, time.monotonic())

    async def _record(self, names: list[str], slots: int) -> None:
        if not await self._server_take(names, slots):
            self.log.warning("Prefect stayed locked: %d slot(s) of %s taken but not recorded",
                             slots, names)

    async def post(self, messages: dict[str, int]) -> None:
        """Take the slots for `messages[channel]` new messages in each channel."""
        await self._take({f"{SLACK_POSTS}-{slug(c)}": n for c, n in messages.items() if n > 0},
                         self.policy.slack_posts_per_minute_per_channel)

    async def update(self, edits: int = 1) -> None:
        await self._take({SLACK_UPDATES: edits}, self.policy.slack_updates_per_minute)

    async def finish(self) -> None:
        """Wait until the takes made while the server was locked are recorded on it."""
        if self._records:
            self.log.info("%d rate-limit take(s) went ahead of a locked Prefect database",
                          len(self._records))
        await asyncio.gather(*self._records)
        self._records.clear()
