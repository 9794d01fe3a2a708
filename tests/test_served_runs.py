"""Runs orphaned by a stop of `gpuops up`: a standing restart-diagnostics run left Running by a
killed serve keeps the deployment's only slot; the next start ends it and new runs start."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
from prefect.client.schemas.objects import FlowRun

from gpuops.deployments.serve import served_deployment_names
from gpuops.deployments.served_runs import ORPHANED_MESSAGE, end_unfinished_runs
from gpuops.deployments.up import prepare_prefect
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(240)

RESTARTS = "restart-diagnostics/on-restart"


async def _restart_runs() -> list[FlowRun]:
    async with get_client() as client:
        return await client.read_flow_runs(deployment_filter=DeploymentFilter(
            name=DeploymentFilterName(any_=["on-restart"])), limit=200)


def restart_runs() -> list[FlowRun]:
    return asyncio.run(_restart_runs())


async def _active_slots() -> int:
    async with get_client() as client:
        deployment = await client.read_deployment_by_name(RESTARTS)
        limit = deployment.global_concurrency_limit
        assert limit is not None and limit.limit == 1
        return limit.active_slots


def running(exclude: set[UUID] = frozenset()) -> FlowRun | None:  # type: ignore[assignment]
    return next((r for r in restart_runs() if r.id not in exclude and r.state
                 and r.state.is_running()), None)


@pytest.fixture
def served(prefect_server, sim_factory, slack_fake, monkeypatch) -> Iterator:
    """Start `serve_all()` processes as `gpuops up` runs it, each in its own process group
    (so that killing one kills its flow runs too, as when `gpuops up` itself is killed)."""
    sim = sim_factory("empty", speed=10)
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    monkeypatch.setenv("GPUOPS_CLUSTER_NAME", f"sim-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("GPUOPS_SLACK_BASE_URL", slack_fake.base_url)
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    started: list[subprocess.Popen] = []

    def serve() -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", "from gpuops.deployments.serve import serve_all; serve_all()"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(process)
        return process

    yield serve
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
    # Later tests serve the same deployments on this server: leave them no slot taken.
    asyncio.run(end_unfinished_runs(served_deployment_names(), end_as="Cancelled",
                                    message="test over"))


def test_a_run_left_running_by_a_killed_serve_is_ended_on_the_next_start_and_new_runs_start(
        served):
    earlier = {r.id for r in restart_runs()}
    first = served()
    orphan = wait_for(lambda: running(exclude=earlier), timeout=90, interval=0.5,
                      message="the standing restart run to be Running")
    os.killpg(first.pid, signal.SIGKILL)  # `gpuops up` and its flow runs die at once
    first.wait(10)
    assert asyncio.run(_active_slots()) == 1  # the dead run still holds the only slot

    prepare_prefect("")  # what `gpuops up` does before it serves again
    second = served()

    ended = next(r for r in restart_runs() if r.id == orphan.id)
    assert ended.state is not None and ended.state.is_crashed()
    assert ended.state.message == ORPHANED_MESSAGE
    fresh = wait_for(lambda: running(exclude=earlier | {orphan.id}), timeout=90, interval=0.5,
                     message="a new restart run to get the slot and run")
    assert fresh.id != orphan.id
    assert second.poll() is None
