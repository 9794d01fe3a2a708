"""Is a flow run still going? What a run asks before it touches what another run recorded on
a cluster object (a rollout's record on its route, a rebalance's taints)."""

from __future__ import annotations

from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import TERMINAL_STATES, StateType
from prefect.exceptions import ObjectNotFound


async def flow_run_state(run_id: str) -> str | None:
    """The flow run's state type (`RUNNING`...), None when the server has no such run or the
    id is not one."""
    try:
        uid = UUID(run_id)
    except ValueError:
        return None
    async with get_client() as client:
        try:
            run = await client.read_flow_run(uid)
        except ObjectNotFound:
            return None
    return run.state.type.value if run.state is not None else None


async def run_is_active(run_id: str) -> bool:
    """Is the flow run `run_id` still going (scheduled, running, paused, suspended)? A run
    the server does not know, or an id that is not one, is not."""
    state = await flow_run_state(run_id)
    return state is not None and StateType(state) not in TERMINAL_STATES
