"""Who may decide an approval, and for which run: the Slack receiver checks each click
against the record the run wrote when it asked (its policy's approvers, the message it
posted), never against a policy of its own. A real Prefect server, the Slack fake over
HTTP, the real Bolt receiver with signed clicks, and simcluster."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

import pytest
from prefect import flow
from prefect.flow_runs import pause_flow_run, resume_flow_run
from prefect.input.actions import acreate_flow_run_input, adelete_flow_run_input
from prefect.runtime import flow_run as runtime_flow_run

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.tasks.approvals.block_kit import ApprovalRequest, request_blocks
from gpuops.tasks.approvals.record import asked_input_key, read_asked_approval
from gpuops.tasks.approvals.request import Approval
from gpuops.tasks.clients import slack
from tests import helpers
from tests.helpers import wait_for
from tests.test_approvals import (
    ALICE,
    BOB,
    Env,
    FlowThread,
    approval_message,
    cordoned,
    make_env,
    run_id_of,
    wait_paused,
)

pytestmark = pytest.mark.timeout(180)

CAROL = "UCAROL"


@pytest.fixture
def env(prefect_server, sim, slack_fake, request) -> Env:
    return make_env(sim, slack_fake, **getattr(request, "param", {}))


def ephemerals(env: Env, user: str) -> list[str]:
    return [m["text"] for m in env.slack.messages() if m.get("ephemeral_to") == user]


def click_refused(env: Env, message: dict, user: str, *, action: str = "gpuops_approve") -> str:
    """Click as `user`; wait for the receiver's ephemeral reply and return it."""
    before = len(ephemerals(env, user))
    assert env.receiver.click(message, action, user)[0] == 200
    return wait_for(lambda: (said := ephemerals(env, user)) and len(said) > before and said[-1],
                    message=f"the receiver's reply to {user}")


def still_paused(run_id: str) -> bool:
    return wait_paused(run_id) in ("Paused", "Suspended")


def reject_in_ui(run_id: str) -> None:
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": False, "approver": "test"})


def save_policy(env: Env, **fields: Any) -> None:
    fields = {"channel": "#ops", "timeout_s": 120, "poll_interval_s": 1, **fields}
    ApprovalPolicy(**fields).save(env.blocks["policy_block"], overwrite=True)


@pytest.mark.parametrize("env", [{"approver_group": None}], indirect=True)
def test_a_click_counts_only_if_the_runs_own_policy_names_the_clicker(env):
    # The run asks with a stricter policy (Alice only) than "approvers plus SOPS group";
    # Bob is in SOPS, which the run's policy does not name.
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    assert "not on the approvers list" in click_refused(env, message, BOB)
    assert still_paused(run_id) and not cordoned(env)
    assert env.receiver.click(message, "gpuops_approve", ALICE)[0] == 200
    assert run.result().name == "Completed"


def test_a_person_removed_from_the_policy_block_can_no_longer_decide(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    save_policy(env, approvers=[CAROL])  # Alice and the SOPS group are out, Carol is in
    for user in (ALICE, BOB):
        assert "not on the approvers list" in click_refused(env, message, user)
    # Carol was not an approver when the run asked: the record does not name her.
    assert "not on the approvers list" in click_refused(env, message, CAROL)
    assert still_paused(run_id) and not cordoned(env)
    reject_in_ui(run_id)
    assert run.result().name == "NotApproved"


def test_group_membership_is_read_when_someone_clicks(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    env.slack.post("/_fake/usergroups", {"usergroup": "SOPS", "users": []})
    assert "not on the approvers list" in click_refused(env, message, BOB)
    env.slack.post("/_fake/usergroups", {"usergroup": "SOPS", "users": [BOB]})
    assert env.receiver.click(message, "gpuops_reject", BOB)[0] == 200
    assert run.result().name == "NotApproved"


@pytest.mark.parametrize("env", [{"approvers": [], "approver_group": None}], indirect=True)
def test_a_policy_without_approvers_is_answered_in_the_prefect_ui_only(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    assert "only be answered in the Prefect UI" in click_refused(env, message, ALICE)
    assert still_paused(run_id)
    reject_in_ui(run_id)
    assert run.result().name == "NotApproved"


def test_a_click_whose_button_names_another_run_is_refused(env, caplog):
    first, second = FlowThread(node="gpu-1", **env.blocks), FlowThread(node="gpu-1",
                                                                         **env.blocks)
    m1, m2 = approval_message(env, 1), approval_message(env, 2)
    for m in (m1, m2):
        wait_paused(run_id_of(m))
    forged = {**m1, "blocks": m2["blocks"]}  # message 1, with message 2's buttons
    with caplog.at_level(logging.WARNING, logger="gpuops.sensors.slack"):
        assert "does not belong to the message" in click_refused(env, forged, ALICE)
    lines = [r for r in caplog.records
             if r.name == "gpuops.sensors.slack" and "refused a click" in r.getMessage()]
    assert len(lines) == 1 and m1["ts"] in lines[0].getMessage()
    assert still_paused(run_id_of(m1)) and still_paused(run_id_of(m2))
    assert not cordoned(env)
    for m in (m1, m2):
        reject_in_ui(run_id_of(m))
    assert first.result().name == second.result().name == "NotApproved"


@flow(name="pauses-without-a-gpuops-record")
async def pauses_without_a_record(slack_conn: SlackConnection) -> bool:
    """Posts a look-alike request with gpuops' buttons, then pauses on the same key as
    gpuops would, but never writes the request record."""
    blocks = request_blocks(ApprovalRequest(title="Look-alike", summary="s", reason="r"),
                            flow_run_id=str(runtime_flow_run.id), key="approval",
                            run_url=None, timeout_s=120)
    slack.post_message(slack_conn, "#ops", "Approval needed: Look-alike", blocks)
    answer = await pause_flow_run(wait_for_input=Approval, key="approval", timeout=120)
    return answer.approved


class LookAlikeThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(pauses_without_a_record(**params, return_state=True))


def test_a_click_for_a_run_without_a_request_record_is_refused(env):
    conn = SlackConnection(bot_token="xoxb-test-token", base_url=env.slack.base_url)
    run = LookAlikeThread(slack_conn=conn)
    message = wait_for(lambda: next((m for m in env.slack.messages()
                                     if "Look-alike" in json.dumps(m.get("blocks"))), None),
                       message="the look-alike request")
    run_id = run_id_of(message)
    wait_paused(run_id)
    assert "no record of this approval request" in click_refused(env, message, ALICE)
    assert still_paused(run_id)
    reject_in_ui(run_id)
    assert run.result().is_completed()


def test_a_request_recorded_without_approvers_by_an_older_gpuops_admits_nobody(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = uuid.UUID(run_id_of(message))
    wait_paused(str(run_id))

    async def rewrite_as_older_gpuops() -> None:
        asked = await read_asked_approval(run_id, "approval")
        assert asked is not None and asked.approvers is not None
        older = {k: v for k, v in asked.to_json().items() if k != "approvers"}
        await adelete_flow_run_input(asked_input_key("approval"), flow_run_id=run_id)
        await acreate_flow_run_input(asked_input_key("approval"), older, flow_run_id=run_id)
    asyncio.run(rewrite_as_older_gpuops())
    assert "older gpuops" in click_refused(env, message, ALICE)
    assert still_paused(str(run_id)) and not cordoned(env)
    reject_in_ui(str(run_id))
    assert run.result().name == "NotApproved"


def test_every_request_records_its_message_and_the_approvers_of_its_policy_block(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = uuid.UUID(run_id_of(message))
    wait_paused(str(run_id))  # a paused run (no deployment) keeps a record too
    asked = asyncio.run(read_asked_approval(run_id, "approval"))
    assert asked is not None and asked.posted_as(message["channel"], message["ts"])
    assert asked.approvers is not None
    assert (asked.approvers.users, asked.approvers.group) == ((ALICE,), "SOPS")
    assert asked.approvers.policy_block == env.blocks["policy_block"]
    reject_in_ui(str(run_id))
    assert run.result().name == "NotApproved"


def test_a_policy_knows_the_block_document_it_was_loaded_from(prefect_server):
    name = f"policy-{uuid.uuid4().hex[:8]}"
    ApprovalPolicy(approvers=[ALICE]).save(name)
    assert ApprovalPolicy.load(name).saved_as == name
    assert ApprovalPolicy.from_settings().saved_as is None
    assert ApprovalPolicy(approvers=[ALICE]).saved_as is None


def test_a_request_whose_policy_block_was_deleted_admits_nobody(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)

    async def delete_policy() -> None:
        from prefect.client.orchestration import get_client
        async with get_client() as c:
            document = await c.read_block_document_by_name(
                env.blocks["policy_block"], block_type_slug="gpuops-approval-policy")
            await c.delete_block_document(document.id)
    asyncio.run(delete_policy())
    assert "no longer exists" in click_refused(env, message, ALICE)
    assert still_paused(run_id) and not cordoned(env)
    reject_in_ui(run_id)
    assert run.result().name == "NotApproved"
