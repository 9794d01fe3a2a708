"""Fixed-capacity mode: no spare GPUs, k replicas moved at a time, nothing left Pending."""

from __future__ import annotations

import pytest

from gpuops.deployments.services import host_port
from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    MODEL,
    failed_scheduling,
    new_pool_of,
    no_pod_pending,
    rollout,
    save_blocks,
    timeline,
)

pytestmark = pytest.mark.timeout(240)


def test_without_spare_gpus_fixed_capacity_moves_one_replica_at_a_time_to_100_percent(
        full_stack, prometheus_scraping, slack_fake, prefect_server):
    stack = full_stack
    stack.deploy(replicas=4)
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         min_requests=30)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    assert state.result()["mode"] == "fixed-capacity"
    assert timeline(state) == [(25, "passed"), (50, "passed"), (75, "passed")]
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100}
    assert stack.deployments()[MODEL] == 0 and stack.ready_pods(new) == 4
    # New replicas were only created once an old one had given its GPU back: none waited.
    assert no_pod_pending(stack) and failed_scheduling(stack) == []


def test_a_bad_version_in_fixed_capacity_mode_is_rolled_back_to_the_old_replicas(
        full_stack, prometheus_scraping, slack_fake, prefect_server):
    stack = full_stack
    stack.deploy(replicas=4)
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         min_requests=30)
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=2,
                    error_rate=0.1)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(25, "failed")]
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    assert stack.deployments()[new] == 0 and stack.deployments()[MODEL] == 4
    wait_for(lambda: stack.ready_pods(MODEL) == 4 and no_pod_pending(stack), timeout=60,
             interval=0.2, message="the old version back at 4 Ready replicas, nothing Pending")
