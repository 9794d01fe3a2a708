"""Runs orphaned by a stop of `gpuops up`: a standing restart-diagnostics run left Running by a
killed serve keeps the deployment's only slot; the next start ends it and new runs start."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Callable
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType

from gpuops.deployments.served_runs import ORPHANED_MESSAGE
from gpuops.deployments.up import prepare_prefect
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(240)

RESTARTS = "restart-diagnostics/on-restart"


async def _running(exclude: set[UUID]) -> FlowRun | None:
    """A Running run of the served restart deployment that is not in `exclude` (other
    deployments named "on-restart", other tests' flows, are not it)."""
    async with get_client() as client:
        deployment = await client.read_deployment_by_name(RESTARTS)
        runs = await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                type=FlowRunFilterStateType(any_=[StateType.RUNNING]))))
    return next((r for r in runs if r.id not in exclude), None)


def running(exclude: set[UUID] = frozenset()) -> FlowRun | None:  # type: ignore[assignment]
    return asyncio.run(_running(exclude))


async def _read_run(run_id: UUID) -> FlowRun:
    async with get_client() as client:
        return await client.read_flow_run(run_id)


async def _active_slots() -> int:
    async with get_client() as client:
        deployment = await client.read_deployment_by_name(RESTARTS)
        limit = deployment.global_concurrency_limit
        assert limit is not None and limit.limit == 1
        return limit.active_slots


@pytest.fixture
def served(sim_factory, slack_fake, monkeypatch, serve_deployments) -> Callable:
    """`serve_all()` as `gpuops up` runs it, against an empty simcluster and the Slack fake
    (requested last, so what it served stops before they do)."""
    sim = sim_factory("empty", speed=10)
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    monkeypatch.setenv("GPUOPS_CLUSTER_NAME", f"sim-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("GPUOPS_SLACK_BASE_URL", slack_fake.base_url)
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    return serve_deployments


def test_a_run_left_running_by_a_killed_serve_is_ended_on_the_next_start_and_new_runs_start(
        served):
    first = served()
    orphan = wait_for(running, timeout=90, interval=0.5,
                      message="the standing restart run to be Running")
    os.killpg(first.pid, signal.SIGKILL)  # `gpuops up` and its flow runs die at once
    first.wait(10)
    assert asyncio.run(_active_slots()) == 1  # the dead run still holds the only slot

    prepare_prefect("")  # what `gpuops up` does before it serves again
    second = served()

    ended = asyncio.run(_read_run(orphan.id))
    assert ended.state is not None and ended.state.is_crashed()
    assert ended.state.message == ORPHANED_MESSAGE
    fresh = wait_for(lambda: running(exclude={orphan.id}), timeout=90, interval=0.5,
                     message="a new restart run to get the slot and run")
    assert fresh.id != orphan.id
    assert second.poll() is None
