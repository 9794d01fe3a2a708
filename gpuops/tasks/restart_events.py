"""Read `gpuops.pod.restarted` events back from the Prefect server, oldest first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect.client.orchestration import get_client
from prefect.events import Event
from prefect.events.filters import (
    EventFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventOrder,
    EventResourceFilter,
)

RESTARTED = "gpuops.pod.restarted"


async def read_restart_events(cluster: str, since: datetime, until: datetime, *,
                              max_events: int = 5000) -> list[Event]:
    """This cluster's restart events (one Prefect server may serve many clusters)."""
    events: list[Event] = []
    async with get_client() as client:
        page = await client.read_events(filter=EventFilter(
            event=EventNameFilter(name=[RESTARTED]),
            resource=EventResourceFilter(id_prefix=[f"k8s.{cluster}."]),
            occurred=EventOccurredFilter(since=since, until=until),
            order=EventOrder.ASC), limit=50)  # the server caps a page at 50
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
