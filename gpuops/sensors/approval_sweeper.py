"""The approval sweeper: a suspended approval's timeout is a "no", though nobody waits.

A run that suspends for approval (tasks/approvals/request.py) has no process left to notice its
deadline, and the server would only fail it once the suspension expires. The sweeper lists
Suspended flow runs, reads the request record each one kept when it asked
(tasks/approvals/record.py), and resumes those past their deadline with
`Approval(approved=False, approver="timeout")`. The re-run then ends
exactly as a paused run that timed out: Slack message updated, `gpuops.approval.timed-out`
emitted, a NotApproved state. Runs suspended by anything but a gpuops approval have no
record and are left alone. It must sweep more often than the policy's `expiry_grace_s`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateName,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.exceptions import FlowPauseTimeout, NotPausedError

from gpuops.tasks.approvals.block_kit import AskedApproval
from gpuops.tasks.approvals.record import asked_input_key, read_asked_approval
from gpuops.tasks.approvals.request import resume_approval, timed_out

log = logging.getLogger("gpuops.sensors.approvals")

SUSPENDED_RUNS_PER_SWEEP = 200


@dataclass(frozen=True)
class SuspendedApproval:
    flow_run_id: UUID
    key: str
    asked: AskedApproval


def overdue(waiting: Iterable[SuspendedApproval], now: datetime) -> list[SuspendedApproval]:
    """The approvals whose deadline has passed, oldest deadline first."""
    return sorted((w for w in waiting if w.asked.deadline <= now),
                  key=lambda w: w.asked.deadline)


async def suspended_approvals() -> list[SuspendedApproval]:
    """Suspended flow runs that wait on a gpuops approval, with what each asked."""
    async with get_client() as client:
        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]),
                                     name=FlowRunFilterStateName(any_=["Suspended"]))),
            limit=SUSPENDED_RUNS_PER_SWEEP)
    found = []
    for run in runs:
        key = run.state.state_details.pause_key if run.state else None
        if not key:
            continue
        try:
            asked = await read_asked_approval(run.id, key)
        except (KeyError, TypeError, ValueError) as e:  # one bad record must not stop the rest
            log.warning("flow run %s: unreadable approval record %r: %s", run.id,
                        asked_input_key(key), e)
            continue
        if asked is not None:
            found.append(SuspendedApproval(run.id, key, asked))
    return found


async def sweep_once(now: datetime | None = None) -> list[UUID]:
    """Resume every overdue suspended approval with a timeout "no"; return their run ids."""
    now = now or datetime.now(UTC)
    closed = []
    for waiting in overdue(await suspended_approvals(), now):
        answer = timed_out(waiting.asked.timeout_s)
        try:
            await resume_approval(waiting.flow_run_id, answer.model_dump(
                include={"approved", "approver", "comment"}))
        except NotPausedError:
            continue  # answered a moment ago: that answer stands
        except FlowPauseTimeout:
            log.warning("approval %r of flow run %s expired on the server before the "
                        "sweeper saw it (sweep more often than expiry_grace_s)",
                        waiting.key, waiting.flow_run_id)
            continue
        log.info("approval %r of flow run %s timed out: resumed with a no",
                 waiting.key, waiting.flow_run_id)
        closed.append(waiting.flow_run_id)
    return closed


async def run_sweeper(interval_s: float = 15.0) -> None:
    """Sweep until cancelled. A failed sweep (server unreachable) is logged and retried."""
    while True:
        try:
            await sweep_once()
        except Exception as e:  # noqa: BLE001 - the next sweep retries; the error is logged
            log.warning("approval sweep failed, retrying in %.0f s: %s", interval_s, e)
        await asyncio.sleep(interval_s)
