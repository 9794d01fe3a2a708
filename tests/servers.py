"""Run asyncio servers (Slack fake, Bolt receiver) on a background loop for synchronous tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._cleanups: list[Callable[[], Awaitable[Any]]] = []

    def run(self, coro: Awaitable[T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def on_stop(self, cleanup: Callable[[], Awaitable[Any]]) -> None:
        self._cleanups.append(cleanup)

    def stop(self) -> None:
        for cleanup in reversed(self._cleanups):
            self.run(cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
