"""A fresh-copy baseline end to end: a version only slower than the old one, invisible at the
small steps against the busy old pool (`test_loads.py`), is caught at the first step against
a copy of the old version exactly as busy as it, and everything the rollout made is gone
afterwards. Nothing here asserts on time."""

from __future__ import annotations

import pytest

from tests.serving_rollout.stack import MODEL, artifacts, new_pool_of, rollout, timeline

pytestmark = pytest.mark.timeout(300)


def test_a_slower_version_is_caught_at_a_small_step_against_a_fresh_copy_of_the_old(
        stack, served):
    blocks = served()
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=1.5,
                    itl_factor=1.0, error_rate=0.0)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0", baseline="fresh-copy")

    assert state.name == "RolledBack", state.message
    steps = timeline(state)
    assert steps[-1] in ((1, "failed"), (5, "failed")), steps
    assert all(outcome == "passed" for _, outcome in steps[:-1])
    assert "ttft" in state.message
    found = artifacts(state)
    plan = found["serving-rollout-plan"]
    assert "baseline   fresh-copy" in plan
    [baseline] = [line.split("InferencePool ")[1].split(",")[0] for line in plan.splitlines()
                  if "InferencePool" in line and "Deployment" in line and "baseline-" in line]
    # judged against the baseline, whose replicas carried as much as the new ones
    failed = found["serving-rollout-timeline"][-1]
    assert failed["note"] == f"against the baseline {baseline}"
    assert "n/c" not in failed["gates"]
    # the baseline is gone (route, pool, Deployments, picker), the new version at 0, the old
    # one serving everything
    new = new_pool_of(stack)
    assert stack.pools() == sorted([MODEL, new])
    assert stack.weights() == {MODEL: 100, new: 0}
    deployments = stack.deployments()
    assert not any("baseline" in name for name in deployments), deployments
    assert deployments[MODEL] == 2 and deployments[new] == 0
    assert not any("baseline" in s for s in stack.snapshot()["services"])
    assert stack.ready_pods(MODEL) == 2
