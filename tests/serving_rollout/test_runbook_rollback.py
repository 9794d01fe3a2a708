"""The shipped rollback-serving runbook against a rollout in progress: the runbook runs the
served serving-rollout-abort deployment, which stops the rollout (its approval answered "no")
and routes everything to the old version again."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuops.common.annotations import ROLLOUT_LAST
from gpuops.deployments.services import host_port
from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    MODEL,
    NS,
    RolloutThread,
    approval_request,
    new_pool_of,
    save_blocks,
)
from tests.test_approvals import run_id_of, wait_paused
from tests.test_runbook_engine import _deployed, _flow, _run


def test_rollback_serving_rolls_back_a_rollout_waiting_for_approval(
        stack, prometheus_scraping, slack_fake, prefect_server, serve_deployments):
    stack.deploy()
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         approve="final", steps=[5, 50, 100])
    serve_deployments()  # the abort flow runs as `gpuops up` serves it
    wait_for(lambda: asyncio.run(_deployed("serving-rollout-abort/on-demand")), timeout=90,
             message="the abort deployment served")
    rollout: Any = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0",
                                 **blocks)
    wait_paused(run_id_of(approval_request(slack_fake)))  # at 50 %, asking before 100 %
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 50, new: 50}

    state = _run(_flow("rollback-serving"), pool=f"{NS}/{new}", reason="latency complaints",
                 channel="#ops", cluster_block=blocks["cluster_block"],
                 slack_block=blocks["slack_block"])

    assert state.name == "Completed", state.message
    ended = rollout.result(timeout=120)
    assert ended.name == "Aborted" and "latency complaints" in ended.message
    assert stack.weights() == {MODEL: 100, new: 0}
    assert stack.route()["metadata"]["annotations"][ROLLOUT_LAST].startswith("aborted ")
    [told] = [m["text"] for m in slack_fake.messages()
              if m.get("text", "").startswith(f"Rolled back {NS}/{new}")]
    assert "latency complaints" in told
    # Nothing left to roll back: the runbook says so and succeeds.
    again = _run(_flow("rollback-serving"), pool=f"{NS}/{MODEL}", channel="#ops",
                 cluster_block=blocks["cluster_block"], slack_block=blocks["slack_block"])
    assert again.name == "Completed", again.message
    assert any(m.get("text", "").startswith(f"No rollout of {NS}/{MODEL} to roll back")
               for m in slack_fake.messages())
