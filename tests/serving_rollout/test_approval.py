"""A rollout's approval before 100 %, and one rollout per pool at a time."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuops.common.annotations import ROLLOUT
from gpuops.flows.serving_rollout import serving_rollout
from tests.serving_rollout.stack import (
    MODEL,
    NS,
    RolloutThread,
    approval_request,
    new_pool_of,
    start_receiver,
    timeline,
)
from tests.test_approvals import run_id_of, wait_paused

pytestmark = pytest.mark.timeout(240)


def test_a_rejection_before_100_percent_rolls_back_and_the_old_version_keeps_serving(
        stack, served, slack_fake):
    blocks = served(approve="final")
    slack_fake.post("/_fake/usergroups", {"usergroup": "SOPS", "users": []})
    receiver = start_receiver(slack_fake)
    run = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0", **blocks)

    message = approval_request(slack_fake)
    text = json.dumps(message["blocks"])
    assert "to 100 %" in message["text"]
    # The approver sees every judged step and each gate's numbers so far.
    for shown in ("step 4 (50 %)", "ttft_p90", "error_ratio", "limit", "passed"):
        assert shown in text, shown
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 50, new: 50}  # nothing beyond 50 % before the answer
    wait_paused(run_id_of(message))
    assert receiver.click(message, "gpuops_reject", "UALICE")[0] == 200
    state = run.result(timeout=120)

    assert state.name == "RolledBack", state.message
    assert "not approved" in state.message and "UALICE" in state.message
    assert timeline(state)[-1] == (100, "rejected")
    assert stack.weights() == {MODEL: 100, new: 0}
    deployments = stack.deployments()
    assert deployments[MODEL] == 2 and stack.ready_pods(MODEL) == 2
    assert deployments[new] == 0  # the new Deployment bears the new pool's name
    assert ROLLOUT not in stack.route()["metadata"]["annotations"]


def test_two_rollouts_on_one_pool_never_interleave(stack, served, slack_fake):
    blocks = served(approve="final", lock_timeout_s=2)
    receiver = start_receiver(slack_fake)
    first = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0", **blocks)
    message = approval_request(slack_fake)  # the first run waits at 50 %, holding the pool
    wait_paused(run_id_of(message))
    new = new_pool_of(stack)
    before = stack.snapshot()

    # Another version on the same pool, and a rollout from the first one's new pool (same
    # route): both end Busy and change nothing.
    for pool, image in ((MODEL, "vllm/vllm-openai:v0.13.0"), (new, "vllm/vllm-openai:v0.13.0")):
        other = asyncio.run(serving_rollout(pool=f"{NS}/{pool}", image=image, **blocks,
                                            return_state=True))
        assert other.name == "Busy" and other.is_failed(), other.message
        assert "nothing was changed" in other.message
    assert stack.snapshot() == before

    assert receiver.click(message, "gpuops_approve", "UALICE")[0] == 200
    state = first.result(timeout=120)
    assert state.is_completed(), state.message
    assert stack.weights() == {MODEL: 0, new: 100}
