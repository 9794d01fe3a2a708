"""Workload controllers with the simulated scheduler and kubelet: pods really get placed on
GPU nodes, start, become Ready, finish and terminate, all seen through the official client.
"""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import wait_for
from tests.test_sim_workloads import (
    PodCensus,
    condition,
    deployment,
    job,
    replicasets_of,
    rolled_out,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ns(sim) -> str:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(sim.api).create_namespace({"metadata": {"name": name}})
    return name


@pytest.fixture
def gpu_nodes(sim) -> list[str]:
    """Two Ready nodes with 8 GPUs each, registered as a kubelet would."""
    v1 = client.CoreV1Api(sim.api)
    names = []
    for i in range(2):
        name = f"gpu-node-{i}"
        capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": "8"}
        v1.create_node({"metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"capacity": capacity, "allocatable": capacity, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
        names.append(name)
    return names


def gpu_deployment(name: str, replicas: int, **spec) -> dict:
    body = deployment(name, image="vllm/vllm-openai:v0.11.0", replicas=replicas, **spec)
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    body["spec"]["template"]["metadata"]["annotations"] = {"sim.gpuops.io/pull-seconds": "1"}
    return body


def running(v1, ns: str, selector: str) -> list[client.V1Pod]:
    return [p for p in v1.list_namespaced_pod(ns, label_selector=selector).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())]


def advance_until(sim, predicate, *, step: float = 5, message: str = "condition"):
    """Move virtual time forward in steps until `predicate()` holds."""
    def check():
        value = predicate()
        if not value:
            sim.advance(step)
        return value
    return wait_for(check, timeout=30, interval=0.1, message=message)


def test_a_deployment_rolls_out_on_gpu_nodes_within_max_surge(sim, ns, gpu_nodes):
    apps, v1 = client.AppsV1Api(sim.api), client.CoreV1Api(sim.api)
    apps.create_namespaced_deployment(ns, gpu_deployment("llm", 3, strategy={
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}))
    advance_until(sim, lambda: apps.read_namespaced_deployment("llm", ns).status
                  .available_replicas == 3, message="3 available replicas")
    pods = running(v1, ns, "app=llm")
    assert {p.spec.node_name for p in pods} <= set(gpu_nodes)
    old_hash = pods[0].metadata.labels["pod-template-hash"]

    census = PodCensus(sim, ns, "app=llm")
    census.count_ready_from_now()
    apps.patch_namespaced_deployment("llm", ns, {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "vllm/vllm-openai:v0.11.1"}]}}}})

    def on_new_template() -> bool:
        d = apps.read_namespaced_deployment("llm", ns)
        pods = v1.list_namespaced_pod(ns, label_selector="app=llm").items
        return (rolled_out(apps, ns, d.metadata.name) and len(pods) == 3
                and all(p.metadata.labels["pod-template-hash"] != old_hash for p in pods))
    advance_until(sim, on_new_template, message="every pod on the new template, old ones gone")
    census.stop()
    assert census.max_live <= 4 and census.min_ready >= 3
    d = apps.read_namespaced_deployment("llm", ns)
    assert condition(d, "Progressing").reason == "NewReplicaSetAvailable"


def test_a_job_on_gpu_nodes_completes_when_its_containers_exit_zero(sim, ns, gpu_nodes):
    batch = client.BatchV1Api(sim.api)
    body = job("finetune", parallelism=2, completions=4)
    body["spec"]["template"]["metadata"] = {"annotations": {
        "sim.gpuops.io/run-seconds": "30", "sim.gpuops.io/pull-seconds": "1"}}
    batch.create_namespaced_job(ns, body)
    j = advance_until(sim, lambda: (j := batch.read_namespaced_job("finetune", ns)) and condition(
        j, "Complete") and j, step=10, message="the Job to complete")
    assert j.status.succeeded == 4 and not j.status.failed
    assert condition(j, "Complete").reason == "CompletionsReached"


def test_a_job_whose_containers_fail_hits_backoff_limit_exceeded(sim, ns, gpu_nodes):
    batch, v1 = client.BatchV1Api(sim.api), client.CoreV1Api(sim.api)
    body = job("crashy", backoffLimit=2)
    body["spec"]["template"]["metadata"] = {"annotations": {
        "sim.gpuops.io/run-seconds": "5", "sim.gpuops.io/exit-code": "1",
        "sim.gpuops.io/pull-seconds": "1"}}
    batch.create_namespaced_job(ns, body)
    j = advance_until(sim, lambda: (j := batch.read_namespaced_job("crashy", ns)) and condition(
        j, "Failed") and j, step=10, message="BackoffLimitExceeded")
    assert condition(j, "Failed").reason == "BackoffLimitExceeded"
    assert j.status.failed == 3
    pods = v1.list_namespaced_pod(ns, label_selector="job-name=crashy").items
    assert len(pods) == 3 and all(p.status.phase == "Failed" for p in pods)
    terminated = pods[0].status.container_statuses[0].state.terminated
    assert terminated.exit_code == 1


def test_eviction_is_refused_by_a_pdb_whose_budget_is_spent(sim, ns, gpu_nodes):
    apps, v1 = client.AppsV1Api(sim.api), client.CoreV1Api(sim.api)
    policy = client.PolicyV1Api(sim.api)
    apps.create_namespaced_deployment(ns, gpu_deployment("guarded", 2))
    advance_until(sim, lambda: len(running(v1, ns, "app=guarded")) == 2)
    policy.create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "guarded"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}})
    status = wait_for(lambda: (p := policy.read_namespaced_pod_disruption_budget(
        "guarded", ns)).status and p.status.current_healthy == 2 and p.status)
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == (2, 2, 0)
    victim = running(v1, ns, "app=guarded")[0].metadata.name
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_eviction(victim, ns, {"metadata": {"name": victim}})
    assert err.value.status == 429
    assert "disruption budget" in json.loads(err.value.body)["message"]


def test_deleting_a_deployment_terminates_its_running_pods_then_removes_them(sim, ns, gpu_nodes):
    apps, v1 = client.AppsV1Api(sim.api), client.CoreV1Api(sim.api)
    apps.create_namespaced_deployment(ns, gpu_deployment("doomed", 2))
    advance_until(sim, lambda: len(running(v1, ns, "app=doomed")) == 2)
    apps.delete_namespaced_deployment("doomed", ns)
    advance_until(sim, lambda: not v1.list_namespaced_pod(ns).items
                  and not replicasets_of(apps, ns, "doomed"),
                  message="pods terminated and removed")
