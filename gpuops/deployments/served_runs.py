"""gpuops' own flow runs left unfinished by a stop, ended so they free their slots.

`gpuops up` owns its Prefect server and is the only one serving gpuops' deployments on it,
so when it starts, every run of those deployments that is Pending, Running or Cancelling, or
paused in its process (not suspended), belongs to a process that is gone: the previous
`gpuops up`. Such a run keeps its deployment's concurrency slot (restart diagnostics has one:
every new restart run would wait in AwaitingConcurrencySlot for good), and `prefect flow-run
cancel` cannot end it (no runner answers). A forced state change ends it and Prefect releases
the slot with it. On a normal stop `gpuops up` does the same with Cancelled, so a next start
rarely finds any. Suspended runs are left alone: they hold no process and resume later.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, State, StateType
from prefect.exceptions import ObjectNotFound
from prefect.states import Cancelled, Crashed

ORPHANED_MESSAGE = "orphaned by an earlier stop of gpuops up"
STOPPED_MESSAGE = "stopped with gpuops up"
UNFINISHED = [StateType.PENDING, StateType.RUNNING, StateType.CANCELLING, StateType.PAUSED]
PAGE = 200


def holds_a_process(run: FlowRun) -> bool:
    """True for a run whose state says a process is (or was) executing it right now."""
    state = run.state
    if state is None or state.type not in UNFINISHED:
        return False
    # A suspended run (pause with reschedule) has left its process and starts again later.
    return not (state.type == StateType.PAUSED and state.state_details.pause_reschedule)


async def end_unfinished_runs(deployment_names: Iterable[str], *,
                              end_as: Literal["Crashed", "Cancelled"],
                              message: str) -> list[UUID]:
    """Force every unfinished run of these deployments (`flow/deployment`) into `end_as`;
    returns the ids it ended."""
    ended: list[UUID] = []
    async with get_client() as client:
        ids = []
        for name in deployment_names:
            try:
                ids.append((await client.read_deployment_by_name(name)).id)
            except ObjectNotFound:
                continue  # never served on this server yet
        if not ids:
            return ended
        kept = 0  # suspended runs still match the filter: page past them
        while True:
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=ids)),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=UNFINISHED))),
                limit=PAGE, offset=kept)
            kept += sum(not holds_a_process(run) for run in runs)
            for run in filter(holds_a_process, runs):
                state: State[Any] = Crashed(message=message) if end_as == "Crashed" else Cancelled(
                    message=message)
                await client.set_flow_run_state(run.id, state, force=True)
                ended.append(run.id)
            if len(runs) < PAGE:
                return ended
