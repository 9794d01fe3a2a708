"""A runbook run whose approval suspends it (a wait longer than the policy's
`suspend_after_s`) starts again from the top when answered: the steps it did before asking
are not done again. A runbook deployment served in its own process on the session's Prefect
server, as `gpuops up` serves it, the Slack fake, and simcluster."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run

from tests.helpers import wait_for
from tests.test_approvals import run_id_of, wait_paused
from tests.test_runbook_engine import _blocks, _cordoned, _deployed, _node

pytestmark = pytest.mark.timeout(240)

NAME = f"post-ask-cordon-{uuid.uuid4().hex[:6]}"  # the session's server is shared
RUNBOOK = f"""\
name: {NAME}
parameters: {{node: {{type: node, required: true}}}}
steps:
  - name: announce
    action: slack-post
    args: {{channel: "#ops", text: "Quarantining {{{{ node }}}} soon"}}
  - name: approve
    action: request-approval
    args: {{title: "Cordon {{{{ node }}}}", summary: "Cordon {{{{ node }}}}."}}
  - {{name: cordon, action: cordon-node, args: {{node: "{{{{ node }}}}"}}}}
"""
SERVE = ("from prefect import serve; "
         "from gpuops.flows.run_runbook import runbook_deployments; "
         f"serve(*[d for d in runbook_deployments() if d.flow_name == {NAME!r}], "
         "print_starting_message=False)")


@pytest.fixture
def served(prefect_server, tmp_path: Path):
    """The runbook's deployment served in its own process (its output in `runner.log`)."""
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "post-ask-cordon.yaml").write_text(RUNBOOK)
    log = (tmp_path / "runner.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-c", SERVE], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "GPUOPS_RUNBOOKS_DIR": str(folder),
                                 "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
                            start_new_session=True)
    try:
        wait_for(lambda: proc.poll() is None and asyncio.run(_deployed(f"{NAME}/runbook")),
                 timeout=90, interval=0.5, message="the runbook's served deployment")
        yield f"{NAME}/runbook"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


async def _start(deployment: str, parameters: dict) -> str:
    async with get_client() as c:
        found = await c.read_deployment_by_name(deployment)
        return str((await c.create_flow_run_from_deployment(found.id,
                                                             parameters=parameters)).id)


async def _state(run_id: str):
    async with get_client() as c:
        return (await c.read_flow_run(uuid.UUID(run_id))).state


def _policy_suspends(name: str) -> None:
    from gpuops.blocks.policy import ApprovalPolicy

    async def save() -> None:
        policy = await ApprovalPolicy.aload(name)
        policy.suspend_after_s = 5  # its 120 s wait suspends the run
        await policy.save(name, overwrite=True)
    asyncio.run(save())


def test_steps_done_before_a_suspended_approval_are_not_done_again_on_resume(
        served, sim, slack_fake):
    v1 = client.CoreV1Api(sim.api)
    _node(v1, "gpu-1")
    blocks = _blocks(sim, slack_fake)
    _policy_suspends(blocks["policy_block"])
    run_id = asyncio.run(_start(served, {"node": "gpu-1", **blocks}))

    def posts() -> list[dict]:
        return [m for m in slack_fake.messages() if m.get("text") == "Quarantining gpu-1 soon"]

    request = wait_for(lambda: next((m for m in slack_fake.messages()
                                     if "Approval needed" in m.get("text", "")), None),
                       timeout=90, message="the approval request")
    assert run_id_of(request) == run_id
    assert wait_paused(run_id) == "Suspended"
    assert len(posts()) == 1 and not _cordoned(v1, "gpu-1")
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "alice"})
    state = wait_for(lambda: (s := asyncio.run(_state(run_id))) and s.is_final() and s,
                     timeout=120, interval=0.5, message="the resumed run to end")
    assert state.name == "Completed", state.message
    assert _cordoned(v1, "gpu-1")  # the step after the approval ran
    assert len(posts()) == 1  # the post before it did not run again


def test_a_step_reuses_a_result_only_in_its_own_run_at_its_place_with_the_same_arguments():
    from gpuops.runbooks.step_cache import step_key

    key = step_key("run-1", ("steps[0]", "announce"), "slack-post", {"text": "a"})
    assert key == step_key("run-1", ("steps[0]", "announce"), "slack-post", {"text": "a"})
    assert key not in {
        step_key("run-1", ("steps[0]", "announce"), "slack-post", {"text": "b"}),  # drifted
        step_key("run-2", ("steps[0]", "announce"), "slack-post", {"text": "a"}),
        step_key("run-1", ("outer.run", "steps[0]", "announce"), "slack-post", {"text": "a"})}
    assert step_key("", ("steps[0]", "announce"), "slack-post", {"text": "a"}) is None
