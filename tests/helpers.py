"""Small helpers shared by tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
             message: str = "condition") -> T:
    """Poll until `predicate()` is truthy; return its value or fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - the last error is reported on timeout
            last_error = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}"
                         + (f" (last error: {last_error!r})" if last_error else ""))


def status_message(error: Exception) -> str:
    """The `message` of the Kubernetes Status an ApiException carries."""
    import json

    return json.loads(error.body)["message"]  # type: ignore[attr-defined]
