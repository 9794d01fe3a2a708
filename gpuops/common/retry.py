"""Retrying temporary errors: the delay a `TemporaryError` carries is the wait before the
next try (as kopf retries a `TemporaryError(delay=...)`), so the retry policy lives with the
error that knows it — a 429's Retry-After, a conflict's quick re-read, a throttled AWS call.
An error with no delay (a 5xx, a connection refused: the server gave no hint) is retried
with a doubling back-off. A `PermanentError`, or anything that is not a `TemporaryError`,
is never retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from gpuops.common.errors import TemporaryError

T = TypeVar("T")


def with_retries(fn: Callable[[], T], *, attempts: int = 6, max_delay: float = 30.0,
                 first_backoff: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> T:
    """Call `fn` until it returns, at most `attempts` times; re-raise the last error.

    `fn` must be safe to call again: a conflict is retried by re-reading the object."""
    backoff = first_backoff
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except TemporaryError as e:
            if attempt == attempts:
                raise
            if e.delay is None:
                delay, backoff = backoff, min(backoff * 2, max_delay)
            else:
                delay = e.delay
            sleep(min(delay, max_delay))
    raise AssertionError("unreachable")
