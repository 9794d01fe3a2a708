"""Unequal loads end to end: a version only slower than the old one looks faster on the nearly
idle replicas of small steps, so steps without one where both pools are as busy get it, and
the slower version is caught there instead of passing. Nothing here asserts on time."""

from __future__ import annotations

import pytest

from tests.serving_rollout.stack import MODEL, artifacts, new_pool_of, rollout, timeline

pytestmark = pytest.mark.timeout(300)


def test_a_slower_version_passes_no_step_where_its_replicas_are_less_busy_than_the_old(
        stack, served):
    blocks = served()
    # TTFT x1.5, nothing else: at 1 and 25 % (new replicas at 0.01x and 0.33x the old ones'
    # load) it is faster than the busy old version; at 50 % both are as busy.
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=1.5,
                    itl_factor=1.0, error_rate=0.0)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0", steps=[1, 25, 100])

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "passed"), (25, "passed"), (50, "failed")]
    assert "step 3 (50 %) failed" in state.message and "ttft" in state.message
    found = artifacts(state)
    assert "1 % -> 25 % -> 50 % -> 100 % (50 % added" in found["serving-rollout-plan"]
    rows = found["serving-rollout-timeline"]
    assert "n/c" in rows[0]["gates"] and "n/c" not in rows[2]["gates"]
    assert stack.weights() == {MODEL: 100, new_pool_of(stack): 0}
