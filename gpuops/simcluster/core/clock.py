"""The simulated cluster's clock: real time by default, faster for benchmarks, and able to jump.

Every controller compares timestamps against `clock.now()` instead of counting ticks, so a
jump (`advance`) is as good as waiting: tests skip a provisioning lag without sleeping.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime


class VirtualClock:
    def __init__(self, speed: float = 1.0, start: datetime | None = None) -> None:
        if speed <= 0:
            raise ValueError(f"clock speed must be > 0, got {speed!r}")
        self._speed = speed
        self._anchor_real = time.monotonic()
        self._anchor_virtual = (start or datetime.now(UTC)).timestamp()

    @property
    def speed(self) -> float:
        return self._speed

    def time(self) -> float:
        """Virtual seconds since the epoch."""
        return self._anchor_virtual + (time.monotonic() - self._anchor_real) * self._speed

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)

    def set_speed(self, speed: float) -> None:
        if speed <= 0:
            raise ValueError(f"clock speed must be > 0, got {speed!r}")
        self._anchor_virtual = self.time()
        self._anchor_real = time.monotonic()
        self._speed = speed

    def advance(self, seconds: float) -> None:
        """Jump the virtual clock forward (never backward)."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._anchor_virtual += seconds

    async def sleep(self, virtual_seconds: float, *, min_real: float = 0.005) -> None:
        await asyncio.sleep(max(min_real, virtual_seconds / self._speed))


def rfc3339(ts: float | datetime) -> str:
    if isinstance(ts, (int, float)):
        ts = datetime.fromtimestamp(ts, UTC)
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()
