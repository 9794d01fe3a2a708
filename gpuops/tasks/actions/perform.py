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

The artifact's rows are kept per run, in the run's context (`recording_actions`, a context
variable: several runs may share a served process, and nothing outlives the block), and
the artifact is published when the block ends, however it ends: the record exists exactly
when an action failed.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from prefect.artifacts import acreate_table_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.context import FlowRunContext
from prefect.events import emit_event
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound, Pause

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


# The actions of the run being recorded (`recording_actions`); None outside one.
_recorded: ContextVar[list[ActionRecord] | None] = ContextVar("gpuops_run_actions",
                                                              default=None)
# The target slots this context already holds (`hold_targets`), so none is taken twice.
_held: ContextVar[frozenset[str]] = ContextVar("gpuops_held_targets", default=frozenset())


def _record(record: ActionRecord) -> None:
    records = _recorded.get()
    if records is not None:
        records.append(record)


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

    Slots already held here are not taken twice, so `perform` inside works as is.
    The slots are leased for `lease_s` and renewed while held: a killed holder's slots free
    themselves that long after it died (plus the server's repossessor loop)."""
    held = _held.get()
    wanted = sorted({limit_name(t) for t in targets} - held)
    if not wanted:
        yield
        return
    for name in wanted:
        await ensure_limit(name)
    async with concurrency(wanted, occupy=1, strict=True, timeout_seconds=timeout_s,
                           lease_duration=lease_s):
        token = _held.set(held | set(wanted))
        try:
            yield
        finally:
            _held.reset(token)


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
    if dry_run:
        try:
            holds = await asyncio.to_thread(action.holds)
        except Exception as e:
            _failed(action, e, dry_run=True)
            raise
        record = ActionRecord(action.kind, action.target, action.describe(), "dry-run", _now(),
                              "would apply" if not holds else "already holds; would do nothing")
        _record(record)
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
            _failed(action, e, dry_run=False)
            raise
    record = ActionRecord(action.kind, action.target, action.describe(), outcome, _now(),
                          detail)
    _record(record)
    _emit(action, outcome, False, detail)
    return record


def _failed(action: SafeAction, error: Exception, *, dry_run: bool) -> None:
    record = ActionRecord(action.kind, action.target, action.describe(), "failed", _now(),
                          f"{type(error).__name__}: {error}")
    _record(record)
    _emit(action, "failed", dry_run, record.detail)


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


@asynccontextmanager
async def recording_actions(key: str | None = None) -> AsyncIterator[None]:
    """Record the actions performed inside the block and publish them as the run's actions
    artifact (what was done, or would be, and how it went) when the block ends, also when it
    ends with an error. A run that suspends (Prefect's `Pause`, an approval's long wait)
    starts again from the top when answered: its artifact comes then, unless it had acted
    before suspending."""
    records: list[ActionRecord] = []
    token = _recorded.set(records)
    failed = suspended = False
    try:
        yield
    except Pause:
        suspended = True
        raise
    except BaseException:
        failed = True
        raise
    finally:
        _recorded.reset(token)
        if records or not suspended:
            await _publish(records, key, failed=failed)


async def _publish(records: list[ActionRecord], key: str | None, *, failed: bool) -> None:
    table = [{"kind": r.kind, "target": r.target, "what": r.description,
              "outcome": r.outcome, "at": r.at, "detail": r.detail} for r in records]
    if not table:
        what = "the run failed before any action" if failed else "no action was needed"
        table = [{"kind": "-", "target": "-", "what": what, "outcome": "-", "at": _now(),
                  "detail": ""}]
    await acreate_table_artifact(table=table, key=key,
                                 description="Actions of this run (gpuops safe-action layer)")
