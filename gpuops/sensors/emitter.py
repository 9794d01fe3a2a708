"""Deliver events to the Prefect server and know they arrived.

`emit_event` is fire-and-forget; the watcher must not mark a restart as reported before
the server has it, so it POSTs batches to `/api/events` and retries until a 2xx. Event ids
are derived from the restart identity: a re-sent event is the same event, and Prefect's
triggers ignore an id they have already seen.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from prefect.client.orchestration import SyncPrefectClient
from prefect.events import Event

from gpuops.common.events import event_name, k8s_resource
from gpuops.common.prefect_api import close_sync_client, open_sync_client

log = logging.getLogger("gpuops.sensors.emitter")

PAYLOAD_LIMIT_BYTES = 1_400_000  # Prefect accepts 1.5 MB per event; keep a margin
_NAMESPACE = uuid.UUID("6d1f8d1e-2b8a-4c67-9a43-6b0f6c9e7a11")


def stable_event_id(kind: str, identity: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{kind}:{identity}")


def build_event(*, obj: str, what: str, cluster: str, kind: str, namespace: str | None,
                name: str, payload: dict[str, Any], identity: str,
                related_resources: list[dict[str, str]] | None = None,
                labels: dict[str, str] | None = None) -> Event:
    return Event(id=stable_event_id(f"{obj}.{what}", identity),
                 occurred=datetime.now(UTC), event=event_name(obj, what),
                 resource=k8s_resource(cluster, kind, namespace, name, **(labels or {})),
                 related=related_resources or [], payload=payload)


class EventSender:
    """Synchronous, acknowledged delivery with retries (the watcher's threads call it).

    Each calling thread keeps one Prefect client (one connection) while it works; a failed
    request drops it, so the retry connects afresh."""

    def __init__(self, *, max_delay_s: float = 30.0) -> None:
        self.max_delay_s = max_delay_s
        self.sent = 0
        self._local = threading.local()

    def send(self, events: list[Event], stop: Any = None) -> None:
        """Block until the server has the events (or `stop` is set: then raise)."""
        body = [e.model_dump(mode="json") for e in events]
        delay = 0.5
        while True:
            try:
                self._client().request("POST", "/events", json=body).raise_for_status()
                self.sent += len(events)
                return
            except Exception as e:
                self.close()
                if stop is not None and stop.is_set():
                    raise RuntimeError("stopped before the events were delivered") from e
                log.warning("could not deliver %d event(s) to Prefect (%s); retrying in %.1fs",
                            len(events), e, delay)
                time.sleep(delay)
                delay = min(delay * 2, self.max_delay_s)

    def _client(self) -> SyncPrefectClient:
        if getattr(self._local, "client", None) is None:
            self._local.client = open_sync_client()
        return self._local.client

    def close(self) -> None:
        """Close this thread's client."""
        client, self._local.client = getattr(self._local, "client", None), None
        if client is not None:
            close_sync_client(client)
