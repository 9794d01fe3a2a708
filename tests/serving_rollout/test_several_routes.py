"""A pool routed by two HTTPRoutes (say one per Gateway): the rollout moves both, each through
its own change with the record on it; a run that failed between the two is resumed or rolled
back by the next one; routes that disagree at the start are refused. End to end against
simcluster, the clock at 20x; nothing here asserts on time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gpuops.common.annotations import ROLLOUT, ROLLOUT_LAST
from gpuops.flows.serving_rollout import serving_rollout_abort
from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    GROUP,
    MODEL,
    NS,
    ROUTE_GROUP,
    RolloutThread,
    Stack,
    approval_request,
    artifacts,
    rollout,
    start_receiver,
)
from tests.test_approvals import run_id_of, wait_paused

pytestmark = pytest.mark.timeout(240)
SECOND = f"{MODEL}-internal"  # sorts after MODEL: the rollout changes it second


def add_route(stack: Stack, name: str = SECOND, backends: list[dict] | None = None) -> None:
    stack.custom.create_namespaced_custom_object(ROUTE_GROUP, "v1", NS, "httproutes", {
        "apiVersion": f"{ROUTE_GROUP}/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": "internal-gateway"}],
                 "hostnames": ["llama.internal"], "rules": [{
                     "backendRefs": backends or [{"group": GROUP, "kind": "InferencePool",
                                                  "name": MODEL, "weight": 100}]}]}})


def route(stack: Stack, name: str) -> dict[str, Any]:
    return stack.custom.get_namespaced_custom_object(ROUTE_GROUP, "v1", NS, "httproutes", name)


def weights(stack: Stack, name: str) -> dict[str, int]:
    [rule] = route(stack, name)["spec"]["rules"]
    return {b["name"]: b.get("weight", 1) for b in rule["backendRefs"]}


def record(stack: Stack, name: str) -> dict[str, Any] | None:
    text = (route(stack, name)["metadata"].get("annotations") or {}).get(ROLLOUT)
    return json.loads(text) if text else None


@pytest.fixture
def two_routes(stack, served):
    blocks = served()
    add_route(stack)
    return blocks


def test_a_rollout_moves_every_route_of_the_pool_together(stack, two_routes):
    state = rollout(two_routes, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    new = state.result()["new_pool"]
    for name in (MODEL, SECOND):
        assert weights(stack, name) == {MODEL: 0, new: 100}, name
        annotations = route(stack, name)["metadata"]["annotations"]
        assert ROLLOUT not in annotations and annotations[ROLLOUT_LAST].startswith("completed")
    assert f"(HTTPRoutes {NS}/{MODEL}, {NS}/{SECOND})" in artifacts(state)["serving-rollout-plan"]


def fail_patches_of(stack: Stack, name: str) -> None:
    """Every PATCH of route `name` answered 500 from now on (the run gives up on it)."""
    stack.sim.fault("api-500", count=100_000, method="PATCH",
                    path=f"/apis/{ROUTE_GROUP}/v1/namespaces/{NS}/httproutes/{name}")


def _failed_between_the_routes(stack: Stack, blocks: dict[str, str], slack_fake) -> str:
    """A run that moved the first route to 100 % and failed on the second's change: the
    routes left at 100 % and 50 %, each recording its own step. (It waits for approval
    before 100 %, the only moment nothing is being changed; the second route's changes fail
    from then on.)"""
    receiver = start_receiver(slack_fake)
    run = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0",
                        approve="final", **blocks)
    message = approval_request(slack_fake)
    wait_paused(run_id_of(message))
    fail_patches_of(stack, SECOND)
    assert receiver.click(message, "gpuops_approve", "UALICE")[0] == 200
    state = run.result(timeout=150)
    assert state.is_failed() and state.name != "RolledBack", state.message
    stack.sim.fault("api-clear")
    new = record(stack, MODEL)["new_pool"]
    assert weights(stack, MODEL) == {MODEL: 0, new: 100}
    assert weights(stack, SECOND) == {MODEL: 50, new: 50}
    assert record(stack, MODEL)["weight"] == 100 and record(stack, SECOND)["weight"] == 50
    return new


def test_a_run_failed_between_two_routes_is_resumed_on_both_by_the_next_run(
        stack, two_routes, slack_fake):
    new = _failed_between_the_routes(stack, two_routes, slack_fake)

    state = rollout(two_routes, image="vllm/vllm-openai:v0.12.0")  # (approve: none)

    assert state.is_completed(), state.message
    # resumed at the step the first route had reached, not from the start
    assert all(step["weight"] == 100 for step in state.result()["steps"])
    assert state.result()["new_pool"] == new  # the same new version, not a second one
    for name in (MODEL, SECOND):
        assert weights(stack, name) == {MODEL: 0, new: 100}, name
        assert record(stack, name) is None


def test_what_a_run_failed_between_two_routes_left_is_rolled_back_on_both(
        stack, two_routes, slack_fake):
    new = _failed_between_the_routes(stack, two_routes, slack_fake)

    state = asyncio.run(serving_rollout_abort(
        pool=f"{NS}/{MODEL}", reason="half moved", requested_by="UALICE",
        cluster_block=two_routes["cluster_block"], rollout_block=two_routes["rollout_block"],
        return_state=True))

    assert state.is_completed() and state.name == "Aborted", state.message
    for name in (MODEL, SECOND):
        assert weights(stack, name) == {MODEL: 100, new: 0}, name
        annotations = route(stack, name)["metadata"]["annotations"]
        assert ROLLOUT not in annotations and annotations[ROLLOUT_LAST].startswith("aborted")
    wait_for(lambda: stack.deployments().get(new) == 0, timeout=30, interval=0.2,
             message="the new version scaled to 0")


def test_routes_that_disagree_at_the_start_are_refused_and_nothing_changes(stack, served):
    blocks = served()
    stack.apps.create_namespaced_deployment(NS, {
        "metadata": {"name": "canary"}, "spec": {
            "replicas": 0, "selector": {"matchLabels": {"app": "canary"}},
            "template": {"metadata": {"labels": {"app": "canary"}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    stack.custom.create_namespaced_custom_object(GROUP, "v1", NS, "inferencepools", {
        "apiVersion": f"{GROUP}/v1", "kind": "InferencePool", "metadata": {"name": "canary"},
        "spec": {"selector": {"matchLabels": {"app": "canary"}},
                 "targetPorts": [{"number": 8000}]}})
    add_route(stack, backends=[
        {"group": GROUP, "kind": "InferencePool", "name": MODEL, "weight": 90},
        {"group": GROUP, "kind": "InferencePool", "name": "canary", "weight": 10}])
    before = stack.snapshot(), route(stack, SECOND)["spec"]

    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_failed()
    message = str(state.message)
    assert "disagree" in message and f"{NS}/{SECOND} sends to {NS}/canary, {NS}/{MODEL}" in \
        message and f"{NS}/{MODEL} sends to {NS}/{MODEL}" in message
    assert (stack.snapshot(), route(stack, SECOND)["spec"]) == before
