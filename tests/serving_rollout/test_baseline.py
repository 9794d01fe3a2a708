"""A fresh-copy baseline end to end: a version only slower than the old one, invisible at the
small steps against the busy old pool (`test_loads.py`), is caught at the first step against
a copy of the old version exactly as busy as it, and everything the rollout made is gone
afterwards. Nothing here asserts on time."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from gpuops.deployments.rollout_cli import status_lines
from gpuops.flows.serving_rollout import serving_rollout_abort
from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    MODEL,
    NS,
    artifacts,
    mark_crashed,
    new_pool_of,
    rollout,
    rollout_record,
    timeline,
)

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
    _no_baseline_left(stack)
    assert stack.deployments()[MODEL] == 2 and stack.deployments()[new] == 0
    assert stack.ready_pods(MODEL) == 2


def _no_baseline_left(stack) -> None:
    assert not any("baseline" in p for p in stack.pools()), stack.pools()
    assert not any("baseline" in d for d in stack.deployments()), stack.deployments()
    assert not any("baseline" in s for s in stack.snapshot()["services"])


def test_the_baseline_a_killed_run_left_is_removed_by_the_rollback_of_what_it_left(
        stack, served, tmp_path):
    blocks = served(lock_timeout_s=150)  # the killed run's slots free themselves in 60 s
    params = {"pool": f"{NS}/{MODEL}", "image": "vllm/vllm-openai:v0.12.0",
              "baseline": "fresh-copy", **blocks}
    code = ("import asyncio, json, sys; from gpuops.flows.serving_rollout import "
            "serving_rollout; asyncio.run(serving_rollout(**json.loads(sys.argv[1])))")
    killed = subprocess.Popen([sys.executable, "-c", code, json.dumps(params)],
                              stdout=subprocess.DEVNULL,
                              stderr=(tmp_path / "killed.log").open("w"),
                              start_new_session=True)
    try:
        record = wait_for(lambda: (r := rollout_record(stack)) and r["weight"] == 1 and r,
                          timeout=150, interval=0.2, message="the rollout at its 1 % step")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(10)
    new, baseline = record["new_pool"], record["baseline_pool"]
    # What the crash left: three pools on the route, the baseline as loaded as the new one.
    assert stack.weights() == {MODEL: 98, new: 1, baseline: 1}
    assert stack.ready_pods(baseline) == stack.ready_pods(new) == 2
    asyncio.run(mark_crashed(record["run"]))
    # `gpuops rollout status` names the baseline and its share beside the old and the new
    shown = status_lines(f"{NS}/{MODEL}", blocks["cluster_block"])
    assert f"{baseline} 1 %" in shown and f"baseline: {baseline} (a fresh copy of the old " \
        "version" in shown and ") at 1 %, judged against below 50 %" in shown

    state = asyncio.run(serving_rollout_abort(
        pool=f"{NS}/{MODEL}", reason="test", cluster_block=blocks["cluster_block"],
        rollout_block=blocks["rollout_block"], return_state=True))

    assert state.name == "Aborted", state.message
    assert stack.weights() == {MODEL: 100, new: 0}
    assert rollout_record(stack) is None
    _no_baseline_left(stack)
    assert stack.deployments()[new] == 0 and stack.deployments()[MODEL] == 2
