"""A workload's restart timeline, kept as its keyed Prefect table artifact.

The artifact is what a person reads in the UI and, at the same time, the memory of the
restart-diagnostics flow: which restarts were already reported (by identity) and which Slack
thread holds each (workload, cause). One artifact key per workload; each run that changes
it publishes a new version under the same key.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prefect.artifacts import acreate_table_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

MAX_ROWS = 300


@dataclass
class TimelineRow:
    """One restart (or the Job's own failure) of the workload. The table's columns follow
    the field order: what a person scans first (time, container, cause, exit) comes first,
    the identity that deduplicates comes last."""

    time: str
    container: str
    cause: str
    exit: str
    pod: str
    node: str
    restart_count: int
    confidence: float
    container_kind: str
    reported: str  # "posted", "skipped: <why>", "invalid", "job-failed" (the Job's own end)
    channel: str = ""
    thread_ts: str = ""  # the parent message of this (workload, cause)
    recovered_at: str = ""
    identity: str = ""


@dataclass
class Timeline:
    key: str
    workload_key: str  # cluster/namespace/kind/name
    rows: list[TimelineRow] = field(default_factory=list)

    @property
    def workload(self) -> tuple[str, str, str]:
        """(namespace, kind, name) of the workload."""
        _, namespace, kind, name = self.workload_key.split("/", 3)
        return namespace, kind, name

    def has(self, identity: str) -> bool:
        return any(r.identity == identity for r in self.rows)

    def thread_for(self, cause: str, now: datetime, window: timedelta) -> TimelineRow | None:
        """The newest row of this cause that opened or joined a thread within the window."""
        for row in reversed(self.rows):
            if row.cause == cause and row.thread_ts and not row.recovered_at and (
                    now - datetime.fromisoformat(row.time) <= window):
                return row
        return None

    def count_since(self, cause: str, since: datetime) -> int:
        return sum(1 for r in self.rows if r.cause == cause and r.reported == "posted"
                   and datetime.fromisoformat(r.time) >= since)

    def open_threads(self) -> list[TimelineRow]:
        """The latest row of each thread that has not been marked recovered."""
        latest: dict[str, TimelineRow] = {}
        for row in self.rows:
            if row.thread_ts:
                latest[row.thread_ts] = row
        return [r for r in latest.values() if not r.recovered_at]

    def add(self, row: TimelineRow) -> None:
        self.rows.append(row)
        del self.rows[:-MAX_ROWS]


def slug(text: str) -> str:
    """Lowercase letters, digits and dashes: what artifact keys and limit names allow."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def timeline_key(workload_key: str) -> str:
    digest = hashlib.sha1(workload_key.encode()).hexdigest()[:8]
    return f"restarts-{slug(workload_key)[:80]}-{digest}"


_DESCRIPTION = "Restart timeline of "


def _from_collection(found: Any) -> Timeline:
    data: Any = found.data
    rows = json.loads(data) if isinstance(data, str) else data
    workload_key = (found.description or "").removeprefix(_DESCRIPTION).split(" ")[0]
    fields = TimelineRow.__dataclass_fields__
    return Timeline(found.key, workload_key,
                    [TimelineRow(**{k: r.get(k, "") for k in fields}) for r in rows or []])


async def load_timeline(workload_key: str) -> Timeline:
    key = timeline_key(workload_key)
    async with get_client() as client:
        found = await client.read_latest_artifacts(artifact_filter=ArtifactCollectionFilter(
            key=ArtifactCollectionFilterKey(any_=[key])), limit=1)
    return _from_collection(found[0]) if found else Timeline(key, workload_key)


async def load_all_timelines(limit: int = 200) -> list[Timeline]:
    """Every workload's timeline (for recoveries checked on the schedule)."""
    async with get_client() as client:
        found = await client.read_latest_artifacts(artifact_filter=ArtifactCollectionFilter(
            key=ArtifactCollectionFilterKey(like_="restarts-%")), limit=limit)
    return [_from_collection(f) for f in found if (f.description or "").startswith(_DESCRIPTION)]


async def save_timeline(timeline: Timeline) -> None:
    await acreate_table_artifact(
        key=timeline.key, table=[asdict(r) for r in timeline.rows],
        description=f"{_DESCRIPTION}{timeline.workload_key} (gpuops restart diagnostics)")
