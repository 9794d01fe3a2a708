"""A rollout's progress, as recorded on the HTTPRoute it moves (pure).

Prefect cannot undo a crashed process's work (its rollback hooks run in the process), so the
record lives on the object the rollout changes: one annotation, `gpuops.io/rollout`, holding a
small JSON document, written in the same JSON patch as each weight change (`weights.py`), so
the weights and the record of them change together or not at all. It is written before the
new objects are created, so whatever a crash leaves is named by it.

The next run on the pool reads it: its own (a run re-run after a suspended approval) or that
of a run no longer going, to resume (same version) or roll back (`run.py`); that of a run
still going, to refuse to interleave. When a rollout ends the record is removed and
`gpuops.io/rollout-last` says how it ended.

A frozen state that advances by returning a new one (`advance`), parsed once at the boundary
(`from_storage`) with typed fields, as kopf keeps a handler's progress.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast

from gpuops.common.annotations import ROLLOUT, ROLLOUT_ABORT, ROLLOUT_LAST
from gpuops.common.errors import ConfigError

Phase = Literal["preparing", "warming", "shifting", "promoted", "rolling-back"]
PHASES: tuple[Phase, ...] = ("preparing", "warming", "shifting", "promoted", "rolling-back")
Outcome = Literal["completed", "rolled-back", "aborted"]


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RolloutRecord:
    run: str  # the flow run doing it
    old_pool: str
    new_pool: str
    old_deployment: str
    new_deployment: str
    epp: str | None  # the new pool's endpoint picker (Service and Deployment), if made
    version: str  # the new version's digest: a later run with the same version resumes
    mode: str  # blue-green | fixed-capacity
    phase: Phase
    weight: int  # the new pool's share now, in %
    old_replicas: int  # the old Deployment's replicas before the rollout
    updated: datetime
    keep_old_until: datetime | None = None  # promoted: when the old version may go
    passed: bool = False  # the step at `weight` was judged and passed
    # The baseline (a fresh copy of the old version, `--baseline fresh-copy`): its pool,
    # Deployment and picker, named before they are made so a crashed run's are removed too.
    baseline_pool: str | None = None
    baseline_deployment: str | None = None
    baseline_epp: str | None = None
    # The model servers' kind (`workloads`): both versions are the same one.
    workload: str = "Deployment"

    def advance(self, *, now: datetime, **changes: Any) -> RolloutRecord:
        return dataclasses.replace(self, updated=now, **changes)

    def for_storage(self) -> str:
        data: dict[str, Any] = {k: v for k, v in dataclasses.asdict(self).items()
                                if k not in ("updated", "keep_old_until")
                                and not (k.startswith("baseline_") and v is None)
                                and not (k == "workload" and v == "Deployment")}
        data["updated"] = _stamp(self.updated)
        if self.keep_old_until is not None:
            data["keep_old_until"] = _stamp(self.keep_old_until)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_storage(cls, text: str, where: str) -> RolloutRecord:
        """The record in annotation `text`; a `ConfigError` naming `where` and the field when
        it is not one this module wrote (edited by hand, another tool's)."""
        field = f"{where}.metadata.annotations[{ROLLOUT!r}]"
        try:
            data = json.loads(text)
        except ValueError:
            raise ConfigError(field, "is not the JSON document gpuops writes; remove the "
                              "annotation after checking the route's weights by hand") from None
        if not isinstance(data, dict):
            raise ConfigError(field, "must be a JSON object")

        def get(key: str, kind: type, optional: bool = False) -> Any:
            value = data.get(key)
            if value is None and optional:
                return None
            if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
                raise ConfigError(f"{field}.{key}", f"must be a {kind.__name__}, got {value!r}")
            return value

        def when(key: str, optional: bool = False) -> datetime | None:
            text_ = get(key, str, optional)
            if text_ is None:
                return None
            try:
                return datetime.fromisoformat(text_)
            except ValueError:
                raise ConfigError(f"{field}.{key}", f"is not a time: {text_!r}") from None

        phase = get("phase", str)
        if phase not in PHASES:
            raise ConfigError(f"{field}.phase", f"must be one of {', '.join(PHASES)}, got "
                              f"{phase!r}")
        updated = when("updated")
        assert updated is not None
        workload = get("workload", str, optional=True) or "Deployment"
        if workload not in ("Deployment", "LeaderWorkerSet"):
            raise ConfigError(f"{field}.workload", "must be Deployment or LeaderWorkerSet, "
                              f"got {workload!r}")
        return cls(get("run", str), get("old_pool", str), get("new_pool", str),
                   get("old_deployment", str), get("new_deployment", str),
                   get("epp", str, optional=True), get("version", str), get("mode", str),
                   cast(Phase, phase), get("weight", int), get("old_replicas", int), updated,
                   when("keep_old_until", optional=True), data.get("passed") is True,
                   get("baseline_pool", str, optional=True),
                   get("baseline_deployment", str, optional=True),
                   get("baseline_epp", str, optional=True),
                   workload)


def read_record(annotations: dict[str, str], where: str) -> RolloutRecord | None:
    text = annotations.get(ROLLOUT)
    return None if text is None else RolloutRecord.from_storage(text, where)


def record_annotations(record: RolloutRecord) -> dict[str, str | None]:
    """What a weight patch carries while the rollout goes on."""
    return {ROLLOUT: record.for_storage()}


def ended_annotations(record: RolloutRecord, outcome: Outcome, now: datetime, detail: str = ""
                      ) -> dict[str, str | None]:
    """The record removed, one line of how it ended kept."""
    line = (f"{outcome} {_stamp(now)} run {record.run}: {record.old_pool} -> "
            f"{record.new_pool} ({record.mode})")
    if detail:
        line += f": {detail}"
    return {ROLLOUT: None, ROLLOUT_ABORT: None, ROLLOUT_LAST: line[:1000]}
