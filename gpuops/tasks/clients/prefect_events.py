"""Prefect events of one cluster: read back once stored, oldest first, and followed live as
the server receives them.

The thin client over Prefect's events API that features read their triggers through (the
restart diagnostics today). A cluster's events are those whose resource id starts with
`k8s.<cluster>.` (common/events): one Prefect server may serve many clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Self

from prefect.client.orchestration import get_client
from prefect.events import Event
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventOrder,
    EventResourceFilter,
)


def cluster_events_filter(names: Sequence[str], cluster: str) -> EventFilter:
    """Events named one of `names` about this cluster's objects."""
    return EventFilter(event=EventNameFilter(name=list(names)),
                       resource=EventResourceFilter(id_prefix=[f"k8s.{cluster}."]))


async def read_stored_events(names: Sequence[str], cluster: str, since: datetime,
                             until: datetime, *, max_events: int = 5000) -> list[Event]:
    """This cluster's stored events named one of `names` that occurred between `since` and
    `until`, oldest first."""
    events: list[Event] = []
    found = cluster_events_filter(names, cluster)
    found.occurred = EventOccurredFilter(since=since, until=until)
    found.order = EventOrder.ASC
    async with get_client() as client:
        page = await client.read_events(filter=found, limit=50)  # the server caps a page at 50
        events.extend(page.events)
        while page.next_page and len(events) < max_events:
            page = await client.read_events_page(str(page.next_page))
            events.extend(page.events)
    return sorted(events, key=lambda e: e.occurred)


class LiveEvents:
    """This cluster's events named one of `names` as the Prefect server receives them, through its
    events websocket: ahead of the event persister, which stores them a second or more
    later (several in a storm). Used as `async with`; `take()` returns what arrived since
    the last call. A dropped connection is reopened (Prefect's subscriber replays the last
    minute and drops duplicates); what it still misses, reads of stored events find."""

    def __init__(self, names: Sequence[str], cluster: str,
                 logger: logging.Logger | logging.LoggerAdapter | None = None, *,
                 what: str = "event") -> None:
        self._filter = cluster_events_filter(names, cluster)
        self.what = what  # in log lines: "<what> event stream dropped"
        self._arrived: list[Event] = []
        self._new = asyncio.Event()
        self._following: asyncio.Task | None = None
        self.log = logger or logging.getLogger(f"gpuops.{what}_events")  # a run's: its log

    async def __aenter__(self) -> Self:
        self._following = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._following is not None:
            self._following.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._following

    async def _follow(self) -> None:
        while True:
            try:
                # A copy each time: the subscriber sets its own `occurred` on the filter.
                async with get_events_subscriber(filter=self._filter.model_copy(deep=True),
                                                 reconnect_on_clean_close=True) as events:
                    async for event in events:
                        self._arrived.append(event)
                        self._new.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - stored reads cover the gap
                self.log.warning("%s event stream dropped (%s); reconnecting", self.what, e)
            await asyncio.sleep(1)

    def take(self) -> list[Event]:
        arrived, self._arrived = self._arrived, []
        self._new.clear()
        return arrived

    async def wait(self, timeout: float, gather: float = 0.2) -> None:
        """Until an event arrives, and `gather` seconds more for the rest of its burst (the
        watcher sends a storm's events in batches, and each batch handled costs a write on
        the Prefect server), or until `timeout` seconds pass."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._new.wait(), timeout)
            await asyncio.sleep(gather)
