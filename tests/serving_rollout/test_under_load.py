"""A version bad only under load, end to end: it passes the small steps, where its replicas
are nearly idle, and is rolled back at the first step that loads them past its threshold; the
run's chart shows both versions over the rollout. Nothing here asserts on time."""

from __future__ import annotations

import base64

import pytest

from tests.serving_rollout.stack import MODEL, new_pool_of, rollout, timeline

pytestmark = pytest.mark.timeout(300)


def test_a_version_bad_only_under_load_passes_the_small_steps_and_is_caught_when_loaded(
        stack, served):
    blocks = served()
    # 40 req/s over 2 replicas a side: each new replica gets 0.2, 1, 5 and 10 req/s at
    # 1, 5, 25 and 50 %; the regression starts at 8 req/s per replica.
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=2,
                    error_rate=0.1, min_rps_per_replica=8)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "passed"), (5, "passed"), (25, "passed"), (50, "failed")]
    assert "step 4 (50 %) failed" in state.message and "error_ratio" in state.message
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}

    from tests.serving_rollout.stack import artifacts

    chart = artifacts(state)["serving-rollout-chart"]
    prefix = "data:image/png;base64,"
    assert chart.startswith(prefix)
    assert base64.b64decode(chart[len(prefix):]).startswith(b"\x89PNG")


def test_a_version_bad_only_at_the_full_load_is_caught_at_100_percent_and_rolled_back(
        stack, served):
    blocks = served()
    # At 50 % each new replica carries 10 req/s, half the 20 the old ones carried before the
    # rollout; the regression starts at 15: only the whole load shows it.
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=2,
                    error_rate=0.1, min_rps_per_replica=15)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "passed"), (5, "passed"), (25, "passed"), (50, "passed"),
                               (100, "failed")]
    assert "step 5 (100 %) failed" in state.message and "error_ratio" in state.message
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}  # back on the old version, still warm
    assert stack.ready_pods(MODEL) == 2
