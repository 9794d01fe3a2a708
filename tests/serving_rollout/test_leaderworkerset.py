"""Rollouts of a pool served by a LeaderWorkerSet (a model across nodes): the new version is a
LeaderWorkerSet too, a group of a leader and its workers is one replica, its GPUs are the
group's, and it is Ready and warm only as a whole. End to end against simcluster's lws
controller, with the simulated clock at 20x; nothing here asserts on time."""

from __future__ import annotations

from typing import Any

import pytest

from gpuops.deployments.services import host_port
from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    GROUP,
    MODEL,
    NS,
    OLD_IMAGE,
    ROUTE_GROUP,
    SPEED,
    Stack,
    failed_scheduling,
    new_pool_of,
    no_pod_pending,
    rollout,
    save_blocks,
    timeline,
)

pytestmark = pytest.mark.timeout(240)
LWS_GROUP = "leaderworkerset.x-k8s.io"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


def _template(role: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": MODEL, "role": role}, "annotations": {
                "sim.gpuops.io/pull-seconds": "10", "sim.gpuops.io/load-seconds": "20",
                "sim.gpuops.io/capacity-rps": "30", "sim.gpuops.io/warmup-seconds": "40"}},
            "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                     "containers": [{
                         "name": "vllm", "image": OLD_IMAGE,
                         "args": ["--model", "meta-llama/Llama-3.1-405B-Instruct",
                                  "--served-model-name", MODEL, "--port", "8000",
                                  "--tensor-parallel-size", "1",
                                  "--pipeline-parallel-size", "2"],
                         "resources": {"limits": {"nvidia.com/gpu": "1"}},
                         "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}}]}}


def deploy_lws(stack: Stack, replicas: int = 2, size: int = 2) -> None:
    """The llama pool served by a LeaderWorkerSet of `replicas` groups of `size` pods (1 GPU
    each); the pool selects the leaders and workers alike by `app` (the workers carry it
    too), as llm-d's multi-node guides label them. No endpoint picker: the pool's picker is
    covered by the Deployment tests."""
    stack.custom.create_namespaced_custom_object(LWS_GROUP, "v1", NS, "leaderworkersets", {
        "apiVersion": f"{LWS_GROUP}/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": MODEL, "labels": {"app": MODEL}},
        "spec": {"replicas": replicas, "startupPolicy": "LeaderCreated",
                 "leaderWorkerTemplate": {"size": size,
                                          "restartPolicy": "RecreateGroupOnPodRestart",
                                          "leaderTemplate": _template("leader"),
                                          "workerTemplate": _template("worker")}}})
    stack.custom.create_namespaced_custom_object(GROUP, "v1", NS, "inferencepools", {
        "apiVersion": f"{GROUP}/v1", "kind": "InferencePool",
        "metadata": {"name": MODEL, "annotations": {"sim.gpuops.io/model": MODEL}},
        "spec": {"selector": {"matchLabels": {"app": MODEL}},
                 "targetPorts": [{"number": 8000}]}})
    stack.custom.create_namespaced_custom_object(ROUTE_GROUP, "v1", NS, "httproutes", {
        "apiVersion": f"{ROUTE_GROUP}/v1", "kind": "HTTPRoute",
        "metadata": {"name": MODEL, "annotations": {"sim.gpuops.io/model": MODEL}},
        "spec": {"parentRefs": [{"name": "inference-gateway"}], "rules": [{
            "backendRefs": [{"group": GROUP, "kind": "InferencePool", "name": MODEL,
                             "weight": 100}]}]}})
    wait_for(lambda: lws_status(stack, MODEL).get("readyReplicas") == replicas, timeout=60,
             interval=0.2, message=f"{replicas} old groups Ready")


def lws_status(stack: Stack, name: str) -> dict[str, Any]:
    return stack.custom.get_namespaced_custom_object(
        LWS_GROUP, "v1", NS, "leaderworkersets", name).get("status") or {}


def leaderworkersets(stack: Stack) -> dict[str, int]:
    return {o["metadata"]["name"]: o["spec"]["replicas"] for o in
            stack.custom.list_namespaced_custom_object(LWS_GROUP, "v1", NS,
                                                       "leaderworkersets")["items"]}


def pods_of(stack: Stack, lws: str) -> list[Any]:
    return [p for p in stack.core.list_namespaced_pod(
        NS, label_selector=f"{NAME_LABEL}={lws}").items if p.metadata.deletion_timestamp is None]


@pytest.fixture
def lws_served(stack, prometheus_scraping, slack_fake, prefect_server):
    def make(**policy: Any) -> dict[str, str]:
        deploy_lws(stack)
        return save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                           **policy)
    return make


def test_a_good_version_of_a_leaderworkerset_pool_rolls_out_to_100_percent(stack, lws_served):
    blocks = lws_served()
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    assert [outcome for _, outcome in timeline(state)] == ["passed"] * len(timeline(state))
    assert timeline(state)[-1][0] == 100
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100}
    sets = leaderworkersets(stack)
    [new_lws] = [name for name in sets if name != MODEL]
    assert sets == {MODEL: 0, new_lws: 2}  # the new version is a LeaderWorkerSet too
    assert stack.deployments() == {}
    assert lws_status(stack, new_lws)["readyReplicas"] == 2
    pods = pods_of(stack, new_lws)
    assert len(pods) == 4  # 2 groups of a leader and a worker, all on the new image
    assert {p.spec.containers[0].image for p in pods} == {"vllm/vllm-openai:v0.12.0"}
    assert {p.metadata.labels["app"] for p in pods} == {new}
    assert {p.metadata.labels["role"] for p in pods} == {"leader", "worker"}
    plan = state.result()
    assert plan["new_pool"] == new


def test_the_plan_counts_a_group_s_gpus_and_names_the_leaderworkerset(stack, lws_served):
    blocks = lws_served()
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0", dry_run=True)

    assert state.is_completed() and state.name == "DryRun", state.message
    assert "workload   LeaderWorkerSet llama-3-8b -> llama-3-8b-" in state.message
    assert "2 replica(s) x 2 GPU(s) (groups of 2 pods)" in state.message
    # 8 GPUs, 4 held by the old groups: room for 2 new groups of 2 pods
    assert "4 free GPU(s) on 1 eligible node(s): room for 2 replica(s) of 2 GPU(s)" in \
        state.message


def test_a_bad_version_of_a_leaderworkerset_pool_is_rolled_back(stack, lws_served):
    blocks = lws_served(min_requests=100)
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=2,
                    error_rate=0.08)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "failed")]
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    sets = leaderworkersets(stack)
    [new_lws] = [name for name in sets if name != MODEL]
    assert sets == {MODEL: 2, new_lws: 0}
    wait_for(lambda: pods_of(stack, new_lws) == [], timeout=60, interval=0.2,
             message="the new groups' leaders and workers gone")
    assert lws_status(stack, MODEL)["readyReplicas"] == 2


@pytest.fixture
def full_lws_stack(sim_factory) -> Stack:
    """Four groups of two 1-GPU pods on a node with eight GPUs: no room for a new copy."""
    demand = {"demand": {MODEL: {"baseRps": 40, "peakRps": 40}}}
    return Stack(sim_factory("empty", speed=SPEED, extra=demand), gpus=8)


def test_without_spare_gpus_fixed_capacity_moves_whole_groups_and_leaves_nothing_pending(
        full_lws_stack, prometheus_scraping, slack_fake, prefect_server):
    stack = full_lws_stack
    deploy_lws(stack, replicas=4)
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         min_requests=30)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    assert state.result()["mode"] == "fixed-capacity"
    assert timeline(state) == [(25, "passed"), (50, "passed"), (75, "passed")]  # a group at a time
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100}
    sets = leaderworkersets(stack)
    [new_lws] = [name for name in sets if name != MODEL]
    assert sets == {MODEL: 0, new_lws: 4}
    assert lws_status(stack, new_lws)["readyReplicas"] == 4
    # A new group was created only once an old group's leader *and* worker had given their
    # GPUs back: no pod waited for one.
    assert no_pod_pending(stack) and failed_scheduling(stack) == []
