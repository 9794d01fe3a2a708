"""Save state in the background, the latest version of each key, one save at a time."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable
from typing import Any


class LatestSaver:
    """`save(key, value)` returns at once; `write(value)` runs in the background, one at a
    time per key. A save asked for while one is on its way runs once more afterwards with
    the latest value, so a burst of saves costs two writes, not one each. `flush()` waits
    for every write and raises the first error any of them raised.

    Why: on a busy Prefect server every write waits for the others (seconds on SQLite in a
    storm), and state that only the next run reads need not hold up the work in between.
    """

    def __init__(self, write: Callable[[Any], Awaitable[object]]) -> None:
        self._write = write
        self._latest: dict[Hashable, Any] = {}
        self._asked: Counter[Hashable] = Counter()  # saves asked for, per key
        self._written: Counter[Hashable] = Counter()  # of those, how many a write covered
        self._writers: dict[Hashable, asyncio.Task[None]] = {}
        self._errors: list[BaseException] = []

    def save(self, key: Hashable, value: Any) -> None:
        """Save `value` (a mutable object is written as it is when its turn comes)."""
        self._latest[key] = value
        self._asked[key] += 1
        writer = self._writers.get(key)
        if writer is None or writer.done():
            self._writers[key] = asyncio.create_task(self._run(key))

    async def _run(self, key: Hashable) -> None:
        while self._written[key] < self._asked[key]:
            asked = self._asked[key]
            try:
                await self._write(self._latest[key])
            except Exception as e:  # noqa: BLE001 - kept for flush(); later saves may still land
                self._errors.append(e)
                return
            self._written[key] = asked

    async def flush(self) -> None:
        while any(not w.done() for w in self._writers.values()):
            await asyncio.gather(*self._writers.values())
        if self._errors:
            error, self._errors = self._errors[0], []
            raise error
