"""Approvals that suspend: the drain-node flow served as a deployment (as `gpuops up` serves
it) asks with a wait longer than the policy's `suspend_after_s`, so its process exits and
the run starts again from the top when answered. A real Prefect server and runner, the Slack
fake over HTTP, the real Bolt receiver with signed clicks, and simcluster."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.client.schemas.objects import FlowRun, Log
from prefect.events.clients import get_events_subscriber
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter
from prefect.flow_runs import resume_flow_run

from gpuops.sensors.approval_sweeper import SuspendedApproval, overdue, sweep_once
from gpuops.tasks.approvals.block_kit import AskedApproval
from tests.helpers import wait_for
from tests.test_approvals import (
    ALICE,
    Env,
    approval_message,
    cordoned,
    evicted,
    latest,
    make_env,
    run_id_of,
    wait_paused,
)

pytestmark = pytest.mark.timeout(120)

DEPLOYMENT = "drain-node/suspend-test"
SUSPENDING = {"timeout_s": 120, "suspend_after_s": 60}  # a wait above 60 s suspends


@pytest.fixture(scope="module")
def served(prefect_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """drain-node served as a deployment in its own process, polling every second (its
    output, and its flow runs', goes to `runner.log` in the test's temporary directory;
    the flow runs' logs also go to the Prefect server, as with `gpuops up`)."""
    code = ("from gpuops.flows.drain_node import drain_node; "
            "drain_node.serve(name='suspend-test', print_starting_message=False)")
    log = (tmp_path_factory.mktemp("runner") / "runner.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-c", code],
                            env={**os.environ, "PREFECT_RUNNER_POLL_FREQUENCY": "1",
                                 "PREFECT_LOGGING_TO_API_ENABLED": "true"},
                            stdout=log, stderr=subprocess.STDOUT)

    async def deployed() -> bool:
        async with get_client() as c:
            await c.read_deployment_by_name(DEPLOYMENT)
            return True
    try:
        wait_for(lambda: proc.poll() is None and asyncio.run(deployed()), timeout=60,
                 interval=0.5, message="the drain-node deployment to be served")
        yield DEPLOYMENT
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def env(served: str, sim, slack_fake) -> Env:
    """drain-node's environment, with a policy whose waits suspend."""
    return make_env(sim, slack_fake, **SUSPENDING)


def start(env: Env, **params: Any) -> str:
    async def create() -> str:
        async with get_client() as c:
            deployment = await c.read_deployment_by_name(DEPLOYMENT)
            run = await c.create_flow_run_from_deployment(
                deployment.id, parameters={"node": "gpu-1", **env.blocks, **params})
            return str(run.id)
    return asyncio.run(create())


def read_run(run_id: str) -> FlowRun:
    async def read() -> FlowRun:
        async with get_client() as c:
            return await c.read_flow_run(uuid.UUID(run_id))
    return asyncio.run(read())


def final_state(run_id: str) -> Any:
    def done() -> Any:
        state = read_run(run_id).state
        return state if state is not None and state.is_final() else None
    return wait_for(done, timeout=60, interval=0.2, message="the run to finish")


def approval_requests(env: Env) -> list[dict]:
    return [m for m in env.slack.messages() if "Approval needed" in json.dumps(m.get("blocks"))]


class ApprovalEvents:
    """The run's `gpuops.approval.*` events as the server streams them (the events API only
    answers once the server has persisted them, seconds later). Open it before the action."""

    def __init__(self, env: Env, run_id: str) -> None:
        self.names: list[str] = []
        self._loop = env.slack.loop
        self._subscriber = get_events_subscriber(filter=EventFilter(
            event=EventNameFilter(prefix=["gpuops.approval."]),
            resource=EventResourceFilter(id=[f"prefect.flow-run.{run_id}"])))
        self._loop.run(self._subscriber.__aenter__())
        self._collecting = asyncio.run_coroutine_threadsafe(self._collect(), self._loop.loop)
        self._loop.on_stop(self._close)

    async def _collect(self) -> None:
        async for event in self._subscriber:
            self.names.append(event.event)

    async def _close(self) -> None:
        self._collecting.cancel()
        await self._subscriber.__aexit__(None, None, None)

    def wait_for(self, name: str) -> None:
        wait_for(lambda: name in self.names, timeout=20, message=f"the {name} event")


def suspended(env: Env) -> tuple[str, dict]:
    """Start a drain of gpu-1 from the deployment; wait for its approval request and for
    the run to be suspended on it."""
    run_id = start(env)
    message = approval_message(env)
    assert run_id_of(message) == run_id
    assert wait_paused(run_id) == "Suspended"
    return run_id, message


def test_approve_in_slack_reruns_the_suspended_run_which_asks_once_and_applies(env):
    run_id, message = suspended(env)
    assert env.receiver.click(message, "gpuops_approve", ALICE)[0] == 200
    state = final_state(run_id)
    assert state.name == "Completed", state.message
    assert cordoned(env) and evicted(env)
    assert len(approval_requests(env)) == 1  # the re-run did not ask again
    final = latest(env, message)
    assert f"Approved* by <@{ALICE}>" in json.dumps(final["blocks"])
    assert not any(b["type"] == "actions" for b in final["blocks"])
    env.receiver.click(message, "gpuops_approve", ALICE)
    wait_for(lambda: any(m.get("ephemeral_to") == ALICE and "no longer waiting" in m["text"]
                         for m in env.slack.messages()), message="the second-click reply")


def test_reject_in_slack_of_a_suspended_run_applies_nothing(env):
    run_id, message = suspended(env)
    assert env.receiver.click(message, "gpuops_reject", ALICE)[0] == 200
    state = final_state(run_id)
    assert state.is_completed() and state.name == "NotApproved"
    assert not cordoned(env) and not evicted(env)
    assert "Rejected" in json.dumps(latest(env, message)["blocks"])


def test_the_sweeper_turns_a_suspended_runs_timeout_into_a_clean_no(env):
    run_id, message = suspended(env)
    events = ApprovalEvents(env, run_id)
    assert run_id not in {str(r) for r in asyncio.run(sweep_once())}  # not due yet
    assert wait_paused(run_id) == "Suspended"
    later = datetime.now(UTC) + timedelta(seconds=SUSPENDING["timeout_s"] + 1)
    assert run_id in {str(r) for r in asyncio.run(sweep_once(now=later))}
    state = final_state(run_id)
    assert state.is_completed() and state.name == "NotApproved"
    assert "timeout" in state.message
    assert not cordoned(env)
    assert "no answer within" in json.dumps(latest(env, message)["blocks"])
    events.wait_for("gpuops.approval.timed-out")


def test_an_approval_from_the_ui_for_a_plan_that_changed_meanwhile_is_not_applied(env):
    run_id, message = suspended(env)
    events = ApprovalEvents(env, run_id)
    env.v1.create_namespaced_pod("default", {  # the cluster changes while nobody waits
        "metadata": {"name": "late-arrival"},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "busybox:1"}]}})
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "bob@ui"})
    state = final_state(run_id)
    assert state.is_completed() and state.name == "NotApproved"
    assert "plan changed" in state.message
    assert not cordoned(env) and not evicted(env)
    assert "plan changed" in json.dumps(latest(env, message)["blocks"])
    assert len(approval_requests(env)) == 1
    events.wait_for("gpuops.approval.plan-changed")


def run_logs(run_id: str) -> list[Log]:
    async def read() -> list[Log]:
        async with get_client() as c:
            return await c.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[uuid.UUID(run_id)])))
    return asyncio.run(read())


def test_a_suspension_for_approval_is_logged_as_info_not_as_an_error(env):
    run_id, message = suspended(env)
    finished = wait_for(lambda: [entry for entry in run_logs(run_id)
                                 if "Finished in state Suspended" in entry.message],
                        timeout=30, message="the run's log line about its suspension")
    assert [entry.level for entry in finished] == [logging.INFO]
    assert not [entry.message for entry in run_logs(run_id) if entry.level >= logging.ERROR]
    assert env.receiver.click(message, "gpuops_reject", ALICE)[0] == 200
    assert final_state(run_id).name == "NotApproved"


def test_an_approval_whose_slack_message_is_gone_ends_the_run_not_approved(env):
    run_id, _ = suspended(env)
    events = ApprovalEvents(env, run_id)
    env.slack.post("/_fake/reset", {})  # the local Slack restarted: the request is gone
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "bob@ui"})
    state = final_state(run_id)
    assert state.name == "NotApproved", state.message
    assert "no longer exists" in state.message and "bob@ui" in state.message
    assert "start a new run" in state.message
    assert not cordoned(env) and not evicted(env)
    events.wait_for("gpuops.approval.message-gone")


def test_a_timeout_of_a_request_whose_slack_message_is_gone_is_recorded_with_a_warning(env):
    run_id, message = suspended(env)
    env.slack.post("/_fake/reset", {})
    later = datetime.now(UTC) + timedelta(seconds=SUSPENDING["timeout_s"] + 1)
    assert run_id in {str(r) for r in asyncio.run(sweep_once(now=later))}
    state = final_state(run_id)
    assert state.name == "NotApproved" and "timeout" in state.message
    warning = wait_for(lambda: [entry.message for entry in run_logs(run_id)
                                if entry.level == logging.WARNING
                                and "no longer exists" in entry.message],
                       timeout=30, message="the warning about the gone Slack message")
    assert message["channel"] in warning[0] and message["ts"] in warning[0]


def _waiting(minutes_left: float, now: datetime) -> SuspendedApproval:
    asked = AskedApproval(channel="C1", ts="1.0", blocks=(), digest="d", timeout_s=600,
                          deadline=now + timedelta(minutes=minutes_left))
    return SuspendedApproval(uuid.uuid4(), "approval", asked)


def test_only_approvals_past_their_deadline_are_overdue_oldest_first():
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    late, later, pending = _waiting(-1, now), _waiting(-5, now), _waiting(1, now)
    assert overdue([late, pending, later], now) == [later, late]
    assert overdue([pending], now + timedelta(minutes=1)) == [pending]  # due at its deadline


def test_an_asked_approval_record_survives_the_round_trip_through_json():
    asked = _waiting(3, datetime.now(UTC)).asked
    assert AskedApproval.from_json(json.loads(json.dumps(asked.to_json()))) == asked
    with pytest.raises(ValueError, match="time zone"):
        AskedApproval.from_json({**asked.to_json(), "deadline": "2026-01-01T12:00:00"})
