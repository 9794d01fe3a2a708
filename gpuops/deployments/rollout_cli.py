"""What `gpuops rollout start|status|abort` do, kept out of cli.py so the command stays thin.

`start` checks the parameters as the flow will (same Block defaults, same errors naming the
field) before it creates a run of the served deployment `serving-rollout/on-demand` (what
`gpuops up` serves: the run lives on when the terminal closes, asks for approval in Slack),
or with `local` runs the flow in this process. `status` reads the pool's route and the run's
state; `abort` runs the abort flow here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from uuid import UUID

from gpuops.common.errors import ConfigError

DEPLOYMENT = "serving-rollout/on-demand"
FINAL_POLL_S = 2.0


def parse_steps_option(text: str | None) -> list[int] | None:
    """`1,5,25,50,100` -> [1, 5, 25, 50, 100] (checked again by the flow)."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise ConfigError("steps", f"must be percentages separated by commas, like "
                          f"1,5,25,50,100; got {text!r}") from None


def parse_gates_option(text: str | None) -> list[dict[str, Any]] | None:
    """A JSON list of gates, `[{"metric": "ttft_p90", "factor": 1.2}]`."""
    if text is None:
        return None
    try:
        gates = json.loads(text)
    except ValueError as e:
        raise ConfigError("gates", f"must be a JSON list of gates like "
                          f"[{{\"metric\": \"ttft_p90\", \"factor\": 1.2}}]: {e}") from None
    if not isinstance(gates, list):
        raise ConfigError("gates", f"must be a JSON list, got {type(gates).__name__}")
    return gates


async def check_parameters(params: dict[str, Any]) -> None:
    """The flow's own check of its parameters over its Block's defaults (a `ConfigError`)."""
    from gpuops.blocks.loading import load_block
    from gpuops.blocks.rollout import RolloutPolicy
    from gpuops.flows.serving_rollout import spec_of

    policy = await load_block(RolloutPolicy, params.get("rollout_block") or "")
    spec_of(policy, **{k: v for k, v in params.items() if k not in (
        "dry_run", "rollout_block", "cluster_block", "slack_block", "policy_block")})


async def start_run(params: dict[str, Any]) -> Any:
    """A run of the served deployment; the FlowRun (its state is Scheduled)."""
    from prefect.deployments import arun_deployment
    from prefect.exceptions import ObjectNotFound

    try:
        return await arun_deployment(DEPLOYMENT, parameters=params, timeout=0)
    except ObjectNotFound:
        raise ConfigError(DEPLOYMENT, "no such deployment on the Prefect server: start "
                          "`gpuops up` (it serves it), or run the flow here with --local"
                          ) from None


async def wait_final(run_id: UUID) -> Any:
    """The run's final state (paused for approval is not final: it waits on)."""
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        while True:
            run = await client.read_flow_run(run_id)
            if run.state is not None and run.state.is_final():
                return run.state
            await asyncio.sleep(FINAL_POLL_S)


async def run_state_name(run_id: str) -> str | None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        uid = UUID(run_id)
    except ValueError:
        return None
    async with get_client() as client:
        try:
            run = await client.read_flow_run(uid)
        except ObjectNotFound:
            return "not on this Prefect server"
    return run.state.name if run.state is not None else None


def status_lines(pool: str, cluster_block: str) -> str:
    from gpuops.blocks.connections import KubernetesCluster
    from gpuops.blocks.loading import load_block
    from gpuops.tasks.rollout.params import parse_pool
    from gpuops.tasks.rollout.status import read_status, status_text

    name = parse_pool(pool)
    kube = asyncio.run(load_block(KubernetesCluster, cluster_block)).kube()
    status = read_status(kube, name.namespace, name.name)
    state = asyncio.run(run_state_name(status.record.run)) if status.record else None
    return status_text(status, state)
