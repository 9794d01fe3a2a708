"""`gpuops.pod.restarted` (and `gpuops.job.failed`) events from the Prefect server: read
back once stored, oldest first, and followed live as the server receives them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any, Self

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

RESTARTED = "gpuops.pod.restarted"
JOB_FAILED = "gpuops.job.failed"  # a Job gave up: reported in its pods' threads
RESTART_DIAGNOSTICS_EVENTS = (RESTARTED, JOB_FAILED)  # what the restart flow handles


def _restart_filter(cluster: str) -> EventFilter:
    """This cluster's restart and Job-failure events (one Prefect server may serve many
    clusters)."""
    return EventFilter(event=EventNameFilter(name=list(RESTART_DIAGNOSTICS_EVENTS)),
                       resource=EventResourceFilter(id_prefix=[f"k8s.{cluster}."]))


async def read_restart_events(cluster: str, since: datetime, until: datetime, *,
                              max_events: int = 5000) -> list[Event]:
    """This cluster's stored restart events that occurred between `since` and `until`."""
    events: list[Event] = []
    found = _restart_filter(cluster)
    found.occurred = EventOccurredFilter(since=since, until=until)
    found.order = EventOrder.ASC
    async with get_client() as client:
        page = await client.read_events(filter=found, limit=50)  # the server caps a page at 50
        events.extend(page.events)
        while page.next_page and len(events) < max_events:
            page = await client.read_events_page(page.next_page)
            events.extend(page.events)
    return sorted(events, key=lambda e: e.occurred)


async def read_event(event_id: str) -> Any:
    """One event by id (for a run started by a trigger), or None when it has expired."""
    from uuid import UUID

    async with get_client() as client:
        response = await client._client.get(f"/events/{UUID(event_id)}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return Event.model_validate(response.json())


class LiveRestartEvents:
    """This cluster's restart events as the Prefect server receives them, through its
    events websocket: ahead of the event persister, which stores them a second or more
    later (several in a storm). Used as `async with`; `take()` returns what arrived since
    the last call. A dropped connection is reopened (Prefect's subscriber replays the last
    minute and drops duplicates); what it still misses, reads of stored events find."""

    def __init__(self, cluster: str, logger: logging.Logger | logging.LoggerAdapter | None
                 = None) -> None:
        self._filter = _restart_filter(cluster)
        self._arrived: list[Event] = []
        self._new = asyncio.Event()
        self._following: asyncio.Task | None = None
        self.log = logger or logging.getLogger("gpuops.restart_events")  # a run's: its log

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
                self.log.warning("restart event stream dropped (%s); reconnecting", e)
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
