"""Small helpers shared by tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


POLL_CAP_S = 0.5  # the longest pause between two polls of a wait (unless asked for longer)


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
             message: str = "condition") -> T:
    """Poll until `predicate()` is truthy; return its value or fail naming what was awaited.

    The default is generous: on two loaded cores (four test workers, each with its servers)
    what takes a second alone took over 10 s (moto creating a node group), and a wait that
    is met returns at once, so only a failing test waits it out.

    The pause starts at `interval` and grows to POLL_CAP_S: a poll is an API call or a new
    Prefect client (an SSL context and an event loop, tens of ms of CPU), and a wait of a
    minute polled every 50 ms kept a core a third busy while other workers waited for it."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    pause = interval
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - the last error is reported on timeout
            last_error = e
        time.sleep(pause)
        pause = max(interval, min(pause * 1.5, POLL_CAP_S))
    raise AssertionError(f"timed out after {timeout}s waiting for {message}"
                         + (f" (last error: {last_error!r})" if last_error else ""))


def status_message(error: Exception) -> str:
    """The `message` of the Kubernetes Status an ApiException carries."""
    import json

    return json.loads(error.body)["message"]  # type: ignore[attr-defined]


class FlowThread:
    """A flow run in a background thread, for runs that pause for approval.

    Subclasses say how to run their flow in `run_flow`; `result()` joins and returns the
    final state (or raises what the run raised)."""

    def __init__(self, **params: object) -> None:
        import threading

        self.state: object = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, kwargs=params, daemon=True)
        self._thread.start()

    def run_flow(self, **params: object) -> object:
        raise NotImplementedError

    def _run(self, **params: object) -> None:
        try:
            self.state = self.run_flow(**params)
        except BaseException as e:  # noqa: BLE001 - reported by result()
            self.error = e

    def result(self, timeout: float = 120) -> object:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the flow run did not finish"
        if self.error:
            raise self.error
        return self.state


def stored_events(name: str, since: object) -> list:
    """Every event named `name` the Prefect server stored since `since` (all pages)."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter

    async def read() -> list:
        async with get_client() as c:
            page = await c.read_events(filter=EventFilter(
                event=EventNameFilter(name=[name]),
                occurred=EventOccurredFilter(since=since)), limit=50)
            events = list(page.events)
            while page.next_page:
                page = await c.read_events_page(page.next_page)
                events += page.events
            return events
    return asyncio.run(read())
