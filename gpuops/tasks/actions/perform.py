"""The one door every change to a cluster or a cloud goes through.

`perform(action)` makes an action safe the same way everywhere:
- dry-run reports exactly what would be done and changes nothing;
- a Prefect global concurrency slot for the action's target (strict, created on demand)
  lets one disruptive flow act on a node / node pool / InferencePool at a time;
- actions are desired states ("node X is cordoned", "pod X (uid U) is gone"): if the state
  already holds, nothing is done, so a retry or a trigger firing twice acts once;
- after acting, the postcondition is checked, not assumed;
- every outcome is an event `gpuops.action.<kind>` (the audit trail) and a row in the run's
  actions artifact.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from prefect.artifacts import acreate_table_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.context import FlowRunContext
from prefect.events import emit_event
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

from gpuops.common.errors import PostconditionFailed
from gpuops.common.events import event_name, flow_run_related
from gpuops.common.retry import with_retries


class SafeAction(ABC):
    """A change expressed as a desired state, with the target it must hold a slot for."""

    kind: ClassVar[str]  # e.g. "cordon": the event is gpuops.action.cordon

    @property
    @abstractmethod
    def target(self) -> str:
        """The lock key: `node/<name>`, `nodepool/<name>`, `inferencepool/<ns>/<name>`..."""

    @abstractmethod
    def describe(self) -> str:
        """One line a person reads in Slack, the artifact and the dry-run report."""

    @abstractmethod
    def holds(self) -> bool:
        """Does the desired state already hold? (Read-only: the postcondition.)"""

    @abstractmethod
    def apply(self) -> None:
        """Make the change (one attempt; temporary errors are retried by `perform`)."""

    @abstractmethod
    def resource(self) -> dict[str, str]:
        """The Prefect event resource the action is about (`common.events.k8s_resource`)."""

    def details(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class ActionRecord:
    kind: str
    target: str
    description: str
    outcome: str  # applied | already-done | dry-run | failed
    at: str
    detail: str = ""


@dataclass
class _RunActions:
    records: list[ActionRecord] = field(default_factory=list)
    held: set[str] = field(default_factory=set)


# Per flow run (several runs may share a process, e.g. when served).
_runs: dict[str, _RunActions] = {}


def _run_key() -> str:
    context = FlowRunContext.get()
    return str(context.flow_run.id) if context and context.flow_run else "no-flow-run"


def _state() -> _RunActions:
    return _runs.setdefault(_run_key(), _RunActions())


def limit_name(target: str) -> str:
    """A concurrency-limit name for a target, readable in the UI and unique."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", target)
    if safe != target:
        safe += "-" + hashlib.sha1(target.encode()).hexdigest()[:6]
    return f"gpuops-target-{safe}"


async def ensure_limit(name: str, limit: int = 1) -> None:
    async with get_client() as client:
        try:
            await client.read_global_concurrency_limit_by_name(name)
            return
        except ObjectNotFound:
            pass
        try:
            await client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=name, limit=limit))
        except ObjectAlreadyExists:
            pass  # another flow created it a moment ago


@asynccontextmanager
async def hold_targets(targets: list[str], *, timeout_s: float | None = None,
                       lease_s: float = 300) -> AsyncIterator[None]:
    """Hold the targets' slots for a whole sequence of actions (one flow at a time per target).

    Slots already held by this run are not taken twice, so `perform` inside works as is.
    The slots are leased for `lease_s` and renewed while held: a killed holder's slots free
    themselves that long after it died (plus the server's repossessor loop)."""
    state = _state()
    wanted = sorted({limit_name(t) for t in targets} - state.held)
    if not wanted:
        yield
        return
    for name in wanted:
        await ensure_limit(name)
    async with concurrency(wanted, occupy=1, strict=True, timeout_seconds=timeout_s,
                           lease_duration=lease_s):
        state.held.update(wanted)
        try:
            yield
        finally:
            state.held.difference_update(wanted)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _emit(action: SafeAction, outcome: str, dry_run: bool, detail: str = "") -> None:
    context = FlowRunContext.get()
    related = []
    if context is not None and context.flow_run is not None:
        related.append(flow_run_related(context.flow_run.id))
    emit_event(event_name("action", action.kind), resource=action.resource(), related=related,
               payload={"outcome": outcome, "dry_run": dry_run, "target": action.target,
                        "description": action.describe(), "detail": detail,
                        **action.details()})


async def perform(action: SafeAction, *, dry_run: bool, verify_timeout_s: float = 30.0,
                  lock_timeout_s: float | None = None, attempts: int = 6) -> ActionRecord:
    """Carry out one action safely (see the module docstring). Raises on failure, after
    recording it."""
    state = _state()
    if dry_run:
        record = ActionRecord(action.kind, action.target, action.describe(), "dry-run", _now(),
                              "would apply" if not await asyncio.to_thread(action.holds)
                              else "already holds; would do nothing")
        state.records.append(record)
        _emit(action, "dry-run", True, record.detail)
        return record
    async with hold_targets([action.target], timeout_s=lock_timeout_s):
        try:
            if await asyncio.to_thread(action.holds):
                outcome, detail = "already-done", "desired state already held"
            else:
                await asyncio.to_thread(with_retries, action.apply, attempts=attempts)
                await _verify(action, verify_timeout_s)
                outcome, detail = "applied", ""
        except Exception as e:
            record = ActionRecord(action.kind, action.target, action.describe(), "failed",
                                  _now(), f"{type(e).__name__}: {e}")
            state.records.append(record)
            _emit(action, "failed", False, record.detail)
            raise
    record = ActionRecord(action.kind, action.target, action.describe(), outcome, _now(),
                          detail)
    state.records.append(record)
    _emit(action, outcome, False, detail)
    return record


async def _verify(action: SafeAction, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while True:
        if await asyncio.to_thread(action.holds):
            return
        if time.monotonic() >= deadline:
            raise PostconditionFailed(f"{action.describe()}: applied, but the change does not "
                                      f"show after {timeout_s:.0f}s")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


async def publish_actions_artifact(key: str | None = None) -> None:
    """The run's actions as a table artifact (what was done, or would be, and how it went)."""
    records = _runs.pop(_run_key(), _RunActions()).records
    table = [{"kind": r.kind, "target": r.target, "what": r.description,
              "outcome": r.outcome, "at": r.at, "detail": r.detail} for r in records]
    if not table:
        table = [{"kind": "-", "target": "-", "what": "no action was needed", "outcome": "-",
                  "at": _now(), "detail": ""}]
    await acreate_table_artifact(table=table, key=key,
                                 description="Actions of this run (gpuops safe-action layer)")
