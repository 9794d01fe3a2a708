"""What the run list shows while restarts keep coming: the standing run handles them and the
trigger creates no run to queue behind it (no "Cancelled" runs); when no run is up, the
trigger starts one (a cold start). `serve_all()` in its own process as `gpuops up` runs it,
the real Prefect server, the Slack fake."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.exceptions import ObjectNotFound
from prefect.states import Cancelling

from gpuops.sensors.emitter import EventSender
from gpuops.tasks.restarts.trigger import restart_triggers
from tests.helpers import wait_for
from tests.test_restart_diagnostics import _restart_event
from tests.test_served_runs import RESTARTS, running

pytestmark = pytest.mark.timeout(300)


def restart_runs() -> list:
    """Every run of the served restart deployment."""
    async def read() -> list:
        async with get_client() as client:
            try:
                deployment = await client.read_deployment_by_name(RESTARTS)
            except ObjectNotFound:  # not served yet on this server
                return []
            return await client.read_flow_runs(deployment_filter=DeploymentFilter(
                id=DeploymentFilterId(any_=[deployment.id])), limit=200)
    return asyncio.run(read())


def trigger_enabled() -> bool:
    async def read() -> bool:
        async with get_client() as client:
            deployment = await client.read_deployment_by_name(RESTARTS)
        (automation,) = await restart_triggers(deployment.id)
        return automation.enabled
    return asyncio.run(read())


def posted(slack_fake, pod: str) -> bool:
    return any(f"pod {pod})" in (m.get("text") or "") for m in slack_fake.messages())


def test_restarts_while_a_run_is_up_create_no_runs_and_a_cold_start_still_gets_one(
        sim_factory, slack_fake, monkeypatch, serve_deployments):
    sim = sim_factory("empty", speed=10)
    cluster = f"sim-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    monkeypatch.setenv("GPUOPS_CLUSTER_NAME", cluster)
    monkeypatch.setenv("GPUOPS_SLACK_BASE_URL", slack_fake.base_url)
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    since = datetime.now(UTC)
    earlier = {r.id for r in restart_runs()}
    serve_deployments()  # `serve_all()` in its own process, as `gpuops up` runs it
    # Whichever schedule run it starts (one still queued from an earlier serve, too).
    standing = wait_for(running, timeout=90, interval=0.5,
                        message="the schedule's standing run to be Running")
    wait_for(lambda: not trigger_enabled(), timeout=30, interval=0.5,
             message="the trigger to rest while the standing run reads the events")

    # Restarts over more than one trigger window (10 s): each would have fired it.
    for n in range(3):
        pod = f"busy-{n}-{uuid.uuid4().hex[:4]}"
        EventSender().send([_restart_event(cluster, pod)])
        wait_for(lambda p=pod: posted(slack_fake, p), timeout=30, interval=0.2,
                 message=f"{pod}'s restart posted by the standing run")
        if n < 2:  # real time: the trigger's window is the Prefect server's clock
            time.sleep(5.5)  # the 3 restarts span 11 s

    def created_since() -> list:
        return [r for r in restart_runs() if r.id not in earlier and r.created >= since]
    triggered = [r for r in created_since() if r.parameters.get("event_id")]
    assert triggered == [], "no run queued behind the one that handled the restarts"
    assert not [r for r in created_since() if r.state and r.state.is_cancelled()]

    # Cold start: no run is up (the standing one cancelled, as a crash or a stop would end
    # it); the trigger is awake again and its run handles the next restart.
    async def cancel() -> None:
        async with get_client() as client:
            await client.set_flow_run_state(standing.id, Cancelling(), force=True)
    asyncio.run(cancel())
    wait_for(lambda: next(r for r in restart_runs() if r.id == standing.id).state
             .is_cancelled(), timeout=60, interval=0.5, message="the standing run cancelled")
    assert trigger_enabled(), "a run that is gone no longer holds the trigger back"
    cold = f"cold-{uuid.uuid4().hex[:4]}"
    EventSender().send([_restart_event(cluster, cold)])
    wait_for(lambda: posted(slack_fake, cold), timeout=90, interval=0.5,
             message="the cold start's restart posted by a triggered run")
    # The trigger's run, or a schedule run that was already due and took the freed slot
    # first (the session's Prefect server keeps earlier serves' schedule runs): either way
    # a new run handled it, and none was cancelled but the one we cancelled.
    handlers = [r for r in created_since() if r.id != standing.id]
    assert handlers, "a new run handled the cold start's restart"
    assert all(r.state is not None and not r.state.is_cancelled() for r in handlers)
