"""A runbook that must be approved by someone other than whoever started it: the starter's
Approve in Slack is refused in the request's thread and the run keeps waiting, another
approver's counts; the Prefect UI refuses the starter's name; without the rule the starter
may approve. A real Prefect server, the Slack fake, the real Bolt receiver with signed
clicks, and simcluster over HTTP."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run
from prefect.utilities.callables import parameter_schema

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import ConfigError
from gpuops.deployments.services import free_port
from gpuops.flows.run_runbook import runbook_flow
from gpuops.runbooks.loader import RunbookInvalid, load_texts
from gpuops.sensors.slack_receiver import build_receiver, serve_http
from tests import helpers
from tests.helpers import wait_for
from tests.test_approvals import SIGNING_SECRET, Receiver

pytestmark = pytest.mark.timeout(240)

ALICE, BOB = "UALICE", "UBOB"

FOUR_EYES = """\
name: four-eyes-cordon
approval: {separate_approver: true}
parameters:
  node: {type: node, required: true}
steps:
  - name: approve
    action: request-approval
    args: {title: "Cordon {{ node }}", summary: "Cordon `{{ node }}`."}
  - name: cordon
    action: cordon-node
    args: {node: "{{ node }}"}
"""
ANYONE = FOUR_EYES.replace("name: four-eyes-cordon", "name: anyone-cordon").replace(
    "approval: {separate_approver: true}\n", "")


def _flow(text: str) -> Any:
    registry = load_texts([("rb.yaml", text)])
    return runbook_flow(next(loaded for _, loaded in registry.items()), registry)


@pytest.fixture
def env(prefect_server, sim, slack_fake) -> tuple[client.CoreV1Api, Receiver, dict[str, str]]:
    """gpu-1, the receiver, and Blocks whose policy admits Alice and Bob from Slack."""
    v1 = client.CoreV1Api(sim.api)
    allocatable = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    v1.create_node({"metadata": {"name": "gpu-1"},
                    "status": {"capacity": allocatable, "allocatable": allocatable,
                               "conditions": [{"type": "Ready", "status": "True"}]}})
    conn = SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                           base_url=slack_fake.base_url, default_channel="#ops")
    port = free_port()
    runner = slack_fake.loop.run(serve_http(build_receiver(conn), "127.0.0.1", port))
    slack_fake.loop.on_stop(runner.cleanup)
    suffix = uuid.uuid4().hex[:8]
    blocks = {"cluster_block": f"fe-cluster-{suffix}", "slack_block": f"fe-slack-{suffix}",
              "policy_block": f"fe-policy-{suffix}"}

    async def save() -> None:
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(sim.kubeconfig)
                                ).save(blocks["cluster_block"], overwrite=True)
        await conn.save(blocks["slack_block"], overwrite=True)
        await ApprovalPolicy(approvers=[ALICE, BOB], channel="#ops", timeout_s=120,
                             poll_interval_s=1, expiry_grace_s=60
                             ).save(blocks["policy_block"], overwrite=True)

    asyncio.run(save())
    return v1, Receiver(f"http://127.0.0.1:{port}/slack/events"), blocks


def _start(flow: Any, **params: Any) -> helpers.FlowThread:
    class Run(helpers.FlowThread):
        def run_flow(self, **p: Any) -> Any:
            return asyncio.run(flow(**p, return_state=True))
    return Run(**params)


def _request(slack_fake: Any) -> dict:
    return wait_for(lambda: next((m for m in slack_fake.messages()
                                  if "Approval needed" in json.dumps(m.get("blocks"))), None),
                    timeout=60, message="the approval request")


def _run_id(message: dict) -> str:
    return json.loads(next(e["value"] for b in message["blocks"] if b["type"] == "actions"
                           for e in b["elements"]))["flow_run_id"]


async def _state_name(run_id: str) -> str | None:
    async with get_client() as c:
        run = await c.read_flow_run(uuid.UUID(run_id))
    return run.state.name if run.state else None


def _wait_paused(run_id: str) -> None:
    wait_for(lambda: asyncio.run(_state_name(run_id)) == "Paused", timeout=60,
             message="the run to wait for approval")


def _cordoned(v1: client.CoreV1Api) -> bool:
    spec = v1.read_node("gpu-1").spec
    return bool(spec and spec.unschedulable)


def test_the_starters_approve_is_refused_in_the_thread_and_anothers_counts(env, slack_fake):
    v1, receiver, blocks = env
    run = _start(_flow(FOUR_EYES), node="gpu-1", started_by=ALICE, **blocks)
    message = _request(slack_fake)
    assert f"Started by {ALICE}; someone else must approve." in json.dumps(message["blocks"])
    run_id = _run_id(message)
    _wait_paused(run_id)

    assert receiver.click(message, "gpuops_approve", ALICE)[0] == 200
    refusal = wait_for(lambda: next((m for m in slack_fake.messages()
                                     if m.get("thread_ts") == message["ts"]
                                     and "started this run" in m.get("text", "")), None),
                       timeout=30, message="the refusal in the request's thread")
    assert refusal["ephemeral_to"] is None  # the thread sees it, not only Alice
    assert "not counted" in refusal["text"] and "Still waiting" in refusal["text"]
    # The UI's form refuses Alice's name too (the server checks the form's schema).
    with pytest.raises(RuntimeError, match=ALICE):
        resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": ALICE})
    assert asyncio.run(_state_name(run_id)) == "Paused" and not _cordoned(v1)

    assert receiver.click(message, "gpuops_approve", BOB)[0] == 200
    state = run.result(180)
    assert state.name == "Completed", state.message
    assert _cordoned(v1)


def test_the_starter_may_still_reject_their_own_run(env, slack_fake):
    v1, receiver, blocks = env
    run = _start(_flow(FOUR_EYES), node="gpu-1", started_by=ALICE, **blocks)
    message = _request(slack_fake)
    _wait_paused(_run_id(message))
    assert receiver.click(message, "gpuops_reject", ALICE)[0] == 200
    state = run.result(180)
    assert state.name == "NotApproved" and ALICE in state.message
    assert not _cordoned(v1)


def test_without_the_rule_the_starter_may_approve(env, slack_fake):
    v1, receiver, blocks = env
    run = _start(_flow(ANYONE), node="gpu-1", started_by=ALICE, **blocks)
    message = _request(slack_fake)
    assert "someone else must approve" not in json.dumps(message["blocks"])
    _wait_paused(_run_id(message))
    assert receiver.click(message, "gpuops_approve", ALICE)[0] == 200
    state = run.result(180)
    assert state.name == "Completed", state.message
    assert _cordoned(v1)


def test_a_run_that_does_not_say_who_started_it_is_refused_before_anything(env):
    v1, _, blocks = env
    registry = load_texts([("rb.yaml", FOUR_EYES)])
    loaded = registry.get("four-eyes-cordon")
    from gpuops.runbooks.engine import Services, execute

    async def go() -> Any:
        cluster = await KubernetesCluster.aload(blocks["cluster_block"])
        return await execute(loaded.runbook, {"node": "gpu-1"},
                             Services(cluster.kube()), dry_run=False, publish=False)

    with pytest.raises(ConfigError, match="started_by"):
        asyncio.run(go())
    assert not _cordoned(v1)


def test_the_ui_form_requires_started_by_only_when_the_runbook_separates():
    separate = parameter_schema(_flow(FOUR_EYES).fn).model_dump()
    anyone = parameter_schema(_flow(ANYONE).fn).model_dump()
    assert "started_by" in separate["required"]
    assert separate["properties"]["started_by"]["pattern"] == r"\S"  # not blank
    assert "started_by" not in anyone["required"]


def test_separation_without_an_approval_is_a_located_error():
    text = FOUR_EYES.replace("    action: request-approval\n    args: {title: \"Cordon "
                             "{{ node }}\", summary: \"Cordon `{{ node }}`.\"}",
                             "    action: cordon-node\n    args: {node: gpu-2}")
    with pytest.raises(RunbookInvalid) as caught:
        load_texts([("rb.yaml", text)])
    assert [p.render().splitlines()[0] for p in caught.value.problems] == [(
        "rb.yaml:2:31: approval.separate_approver: the runbook asks for no approval (no "
        "`request-approval` step, nor a `run-runbook`), so there is no approver to keep "
        "apart from whoever starts it")]


def test_the_cli_asks_who_starts_a_separating_runbook_before_starting_it(tmp_path,
                                                                         monkeypatch):
    from typer.testing import CliRunner

    from gpuops.deployments.cli import app

    path = tmp_path / "four-eyes.yaml"
    path.write_text(FOUR_EYES)
    monkeypatch.delenv("GPUOPS_RUNBOOKS_STARTED_BY", raising=False)
    result = CliRunner().invoke(app, ["runbook", "run", "four-eyes-cordon", "--file",
                                      str(path), "--param", "node=gpu-1"])
    assert result.exit_code == 2
    assert "--as: runbook 'four-eyes-cordon' must be approved by someone other than " \
        "whoever starts it" in result.stderr
    assert "nothing was started" in result.stderr
