"""A rollout's outcomes end to end: a good version to 100 %, a bad one rolled back at its first
judged step, missing metrics failing closed, bad parameters changing nothing. Windows are
short and the simulated clock runs 20x; nothing here asserts on time."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuops.common.annotations import ROLLOUT, ROLLOUT_LAST
from gpuops.deployments.services import host_port
from gpuops.flows.serving_rollout import serving_rollout
from tests.serving_rollout.stack import (
    GROUP,
    MODEL,
    NS,
    OLD_IMAGE,
    SPEED,
    Stack,
    artifacts,
    new_pool_of,
    prometheus_missing_new_pools,
    rollout,
    save_blocks,
    timeline,
)

pytestmark = pytest.mark.timeout(240)


def test_a_good_version_rolls_out_to_100_percent_and_the_old_is_scaled_to_zero(
        stack, served):
    blocks = served()
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    summary = state.result()
    assert timeline(state) == [(1, "passed"), (5, "passed"), (25, "passed"), (50, "passed"),
                               (100, "passed")]  # 100 %: against the old one's own window
    found = artifacts(state)
    rows = found["serving-rollout-timeline"]
    assert all("ttft_p90" in r["gates"] and "limit" in r["gates"] and r["verdict"] == "pass"
               for r in rows)
    assert all(int(r["requests new/old"].split("/")[0]) >= 40 for r in rows)
    summary_md = found["serving-rollout-summary"]
    assert ": completed" in summary_md and "gates at step 5 (100 %)" in summary_md
    assert "mode       blue-green" in found["serving-rollout-plan"]
    new = new_pool_of(stack)
    assert new.startswith(f"{MODEL}-") and summary["new_pool"] == new
    assert stack.weights() == {MODEL: 0, new: 100}
    annotations = stack.route()["metadata"]["annotations"]
    assert ROLLOUT not in annotations and annotations[ROLLOUT_LAST].startswith("completed")
    deployments = stack.deployments()
    assert deployments[MODEL] == 0  # kept, scaled to 0 after keep_old_s
    [new_deployment] = [d for d in deployments if d.startswith(MODEL + "-") and "epp" not in d]
    assert deployments[new_deployment] == 2
    assert stack.ready_pods(new) == 2  # the new pods carry the new pool's app label
    pod = stack.core.list_namespaced_pod(NS, label_selector=f"app={new}").items[0]
    assert pod.spec.containers[0].image == "vllm/vllm-openai:v0.12.0"
    assert "--served-model-name" in pod.spec.containers[0].args  # clients see the same model
    # The new pool has its own endpoint picker, pointed at it.
    epp = stack.apps.read_namespaced_deployment(f"{new}-epp", NS)
    assert epp.spec.template.spec.containers[0].args[:2] == ["--pool-name", new]
    pool = stack.custom.get_namespaced_custom_object(GROUP, "v1", NS, "inferencepools", new)
    assert pool["spec"]["endpointPickerRef"]["name"] == f"{new}-epp"
    stack.core.read_namespaced_service(f"{new}-epp", NS)


def test_a_bad_version_is_rolled_back_at_the_first_step_with_enough_requests(
        stack, served, slack_fake):
    blocks = served(min_requests=100)
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=2,
                    error_rate=0.08)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "failed")]  # the 1 % window waited, then failed
    assert "error_ratio" in state.message
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    annotations = stack.route()["metadata"]["annotations"]
    assert ROLLOUT not in annotations and annotations[ROLLOUT_LAST].startswith("rolled-back")
    deployments = stack.deployments()
    assert deployments[MODEL] == 2 and stack.ready_pods(MODEL) == 2  # the old kept serving
    assert all(replicas == 0 for name, replicas in deployments.items()
               if name not in (MODEL, f"{MODEL}-epp"))  # the new version and its picker
    # A message says which gate failed, with the numbers.
    [message] = [m for m in slack_fake.messages() if m.get("channel") in ("#rollouts",)
                 or "rolled back" in m.get("text", "")]
    text = json.dumps(message["blocks"])
    assert "rolled back" in message["text"] and "error_ratio" in text and "FAIL" in text


def test_missing_metrics_fail_closed_and_nothing_is_left_half_done(
        stack, slack_fake, prefect_server, tmp_path):
    stack.deploy()
    url, proc = prometheus_missing_new_pools(tmp_path)(host_port(stack.sim.url))
    try:
        blocks = save_blocks(stack, url, slack_fake)
        before = stack.snapshot()
        state = rollout(blocks, image="vllm/vllm-openai:v0.12.0", args=["--max-num-seqs=512"])
    finally:
        proc.terminate()
        proc.wait(10)

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "failed")]
    assert "no data" in state.message and "no vllm:request_success_total series" in \
        state.message
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    after = stack.snapshot()
    assert after["deployments"][MODEL] == before["deployments"][MODEL] == 2
    assert all(n == 0 for d, n in after["deployments"].items()
               if d not in before["deployments"])
    assert ROLLOUT not in (after["route"][1] or {})
    assert stack.ready_pods(MODEL) == 2


BAD_PARAMETERS = [
    ({"pool": f"{NS}/no-such-pool", "image": "vllm/vllm-openai:v0.12.0"}, "pool",
     "no InferencePool 'no-such-pool'"),
    ({"image": "vllm/vllm-openai:v0.12.0", "steps": [1, 50, 20, 100]}, "steps[2]",
     "must be above the step before it"),
    ({"image": "vllm/vllm-openai:v0.12.0", "steps": [1, 5, 50]}, "steps", "must end at 100"),
    ({"image": "vllm/vllm-openai:v0.12.0", "gates": [{"metric": "ttft_p95", "factor": 1.2}]},
     "gates[0].metric", "unknown metric 'ttft_p95'"),
    ({"image": "not an image"}, "image", "container image reference"),
    ({}, "image", "no new version given"),
    ({"image": OLD_IMAGE}, "image", "the new version is the one serving now"),
    ({"args": ["max-num-seqs=512"]}, "args[0]", "must be `--flag=value`"),
    ({"image": "vllm/vllm-openai:v0.12.0", "mode": "blue-green"}, "mode",
     "blue-green needs room for 2 new replica(s)"),
    ({"image": "vllm/vllm-openai:v0.12.0", "window_s": -4}, "window_s", "must be > 0"),
]


def test_bad_parameters_get_clear_errors_naming_the_field_and_change_nothing(
        sim_factory, slack_fake, prefect_server):
    stack = Stack(sim_factory("empty", speed=SPEED), gpus=3)  # room for 1 more replica only
    stack.deploy()
    blocks = save_blocks(stack, "http://127.0.0.1:9", slack_fake)
    before = stack.snapshot()
    for params, field, message in BAD_PARAMETERS:
        params = {"pool": f"{NS}/{MODEL}", **params}
        state = asyncio.run(serving_rollout(**blocks, **params, return_state=True))
        assert state.is_failed(), (params, state.message)
        assert f"{field}: " in state.message and message in state.message, state.message
    assert stack.snapshot() == before
