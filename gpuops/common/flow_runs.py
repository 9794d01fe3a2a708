"""Is a flow run still going? What a run asks before it touches what another run recorded on
a cluster object (a rollout's record on its route, a rebalance's taints)."""

from __future__ import annotations

from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound


async def run_is_active(run_id: str) -> bool:
    """Is the flow run `run_id` still going (scheduled, running, paused, suspended)? A run
    the server does not know, or an id that is not one, is not."""
    try:
        uid = UUID(run_id)
    except ValueError:
        return False
    async with get_client() as client:
        try:
            run = await client.read_flow_run(uid)
        except ObjectNotFound:
            return False
    return run.state is not None and not run.state.is_final()
