"""The rollout's defaults end to end: a fresh-copy baseline when there is room for it (and its
GPUs given back at 50 %, where nothing is judged against it any more), the old pool when there
is not (nothing left Pending), and a first step raised to what the pool's traffic can judge in
a window, the timeline saying why. Nothing here asserts on time."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from gpuops.blocks.rollout import RolloutPolicy
from gpuops.deployments.services import host_port
from gpuops.tasks.rollout.metrics import REQUESTS
from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    MODEL,
    Stack,
    artifacts,
    failed_scheduling,
    new_pool_of,
    no_pod_pending,
    rollout,
    save_blocks,
    timeline,
)

pytestmark = pytest.mark.timeout(420)


def _has_requests(prometheus: str) -> bool:
    query = urllib.parse.urlencode({"query": f"sum(increase({REQUESTS}[10s]))"})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=5) as answer:
        return bool(json.load(answer)["data"]["result"])


def test_by_default_a_fresh_copy_is_the_baseline_where_there_is_room_and_it_goes_at_50(
        stack, served):
    blocks = served(baseline="auto")
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    summary = state.result()
    baseline = summary["baseline"]
    assert baseline and "baseline-" in baseline
    [freed] = [n for n in summary["notes"] if "removed at" in n]
    assert freed.startswith(f"baseline {baseline} removed at 50 %")
    rows = artifacts(state)["serving-rollout-timeline"]
    below = [r for r in rows if int(r["new %"]) < 50]
    assert below and all(r["note"] == f"against the baseline {baseline}" and
                         r["replicas baseline"] == "2" for r in below)
    assert all(r["replicas baseline"] == "-" for r in rows if int(r["new %"]) >= 50)
    assert "baseline   fresh-copy (auto: there is room)" in artifacts(state)[
        "serving-rollout-plan"]
    assert not any("baseline" in p for p in stack.pools())
    assert not any("baseline" in d for d in stack.deployments())


def test_a_fresh_copy_without_room_for_it_runs_against_the_old_pool_with_nothing_pending(
        sim_factory, prometheus_scraping, slack_fake, prefect_server):
    # 4 GPUs, 2 old replicas: room for the new copy, not for a baseline beside it
    stack = Stack(sim_factory("empty", speed=20.0, extra={"demand": {
        MODEL: {"baseRps": 40, "peakRps": 40}}}), gpus=4)
    stack.deploy(replicas=2)
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0", baseline="fresh-copy")

    assert state.is_completed(), state.message
    assert state.result()["mode"] == "blue-green" and state.result()["baseline"] is None
    plan = artifacts(state)["serving-rollout-plan"]
    assert "baseline   none (fresh-copy asked, but a fresh copy needs room for 4 replica(s)" \
        in plan
    assert timeline(state)[-1] == (100, "passed")
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100}
    assert not any("baseline" in d for d in stack.deployments())
    assert no_pod_pending(stack) and failed_scheduling(stack) == []


def test_a_first_step_the_traffic_cannot_judge_in_a_window_is_raised_and_the_timeline_says_why(
        stack, served):
    # 1,500 requests at 1 % of the pool's traffic take many windows: raised, at most to 10 %
    blocks = served(adapt_steps=True, min_requests=1500, step_timeout_s=120)
    # the rate is read before the first step: Prometheus must know the pool's traffic by
    # then (a busy machine can time its first 1 s scrapes out, leaving no samples yet)
    prometheus = RolloutPolicy.load(blocks["rollout_block"]).prometheus_url
    wait_for(lambda: _has_requests(prometheus), timeout=120,
             message="Prometheus has the pool's request counts")
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    assert timeline(state) == [(10, "passed"), (25, "passed"), (50, "passed"),
                               (100, "passed")]
    first = artifacts(state)["serving-rollout-timeline"][0]
    assert first["note"].startswith("first step raised from 1 % to 10 %: the pool served ")
    assert "(capped at max_first_step 10 %)" in first["note"]
    assert any(n.startswith("first step raised") for n in state.result()["notes"])


def test_steps_a_person_gives_are_kept_however_quiet_the_pool(stack, served):
    blocks = served(adapt_steps=None, min_requests=40)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0", steps=[1, 50, 100])

    assert state.is_completed(), state.message
    assert timeline(state) == [(1, "passed"), (50, "passed"), (100, "passed")]
    assert not any("raised" in n for n in state.result()["notes"])
