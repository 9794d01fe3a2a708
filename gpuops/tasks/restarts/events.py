"""`gpuops.pod.restarted` (and `gpuops.job.failed`) events from the Prefect server: read
back once stored, oldest first, and followed live as the server receives them
(tasks/clients/prefect_events.py)."""

from __future__ import annotations

import logging
from datetime import datetime

from prefect.events import Event

from gpuops.common.events import event_name
from gpuops.tasks.clients.prefect_events import LiveEvents, read_stored_events

RESTARTED = event_name("pod", "restarted")
JOB_FAILED = event_name("job", "failed")  # a Job gave up: reported in its pods' threads
RESTART_DIAGNOSTICS_EVENTS = (RESTARTED, JOB_FAILED)  # what the restart flow handles


async def read_restart_events(cluster: str, since: datetime, until: datetime, *,
                              max_events: int = 5000) -> list[Event]:
    """This cluster's stored restart events that occurred between `since` and `until`."""
    return await read_stored_events(RESTART_DIAGNOSTICS_EVENTS, cluster, since, until,
                                    max_events=max_events)


class LiveRestartEvents(LiveEvents):
    """This cluster's restart and Job-failure events as the Prefect server receives them
    (see `LiveEvents`)."""

    def __init__(self, cluster: str, logger: logging.Logger | logging.LoggerAdapter | None
                 = None) -> None:
        super().__init__(RESTART_DIAGNOSTICS_EVENTS, cluster, logger, what="restart")
