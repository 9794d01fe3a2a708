"""A rollout killed mid-way is resumed by the next run (the record on the HTTPRoute)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    MODEL,
    NS,
    mark_crashed,
    rollout,
    rollout_record,
    timeline,
)

pytestmark = pytest.mark.timeout(240)


def test_a_run_killed_mid_rollout_is_resumed_by_the_next_run(stack, served, tmp_path):
    # The killed run's slots free themselves after their 60 s lease: the next run waits.
    blocks = served(lock_timeout_s=150)
    params = {"pool": f"{NS}/{MODEL}", "image": "vllm/vllm-openai:v0.12.0", **blocks}
    code = ("import asyncio, json, sys; from gpuops.flows.serving_rollout import "
            "serving_rollout; asyncio.run(serving_rollout(**json.loads(sys.argv[1])))")
    killed = subprocess.Popen([sys.executable, "-c", code, json.dumps(params)],
                              stdout=subprocess.DEVNULL,
                              stderr=(tmp_path / "killed.log").open("w"),
                              start_new_session=True)
    try:
        record = wait_for(lambda: (r := rollout_record(stack)) and r["weight"] == 5 and r,
                          timeout=120, interval=0.2, message="the rollout at its 5 % step")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(10)
    new = record["new_pool"]
    # What the crash left: the route points at two serving versions, and says so.
    assert stack.weights() == {MODEL: 95, new: 5}
    assert stack.ready_pods(MODEL) == 2 and stack.ready_pods(new) == 2
    assert rollout_record(stack)["run"] == record["run"]
    asyncio.run(mark_crashed(record["run"]))  # what Prefect's heartbeat detection does

    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    steps = timeline(state)
    assert steps[0][0] == 5 and [w for w, _ in steps] == [5, 25, 50]  # resumed, not restarted
    assert all(outcome == "passed" for _, outcome in steps)
    assert stack.weights() == {MODEL: 0, new: 100}
    assert rollout_record(stack) is None
    assert stack.pools() == sorted([MODEL, new])  # the same new version, not a second one
    assert stack.deployments()[new] == 2 and stack.deployments()[MODEL] == 0
