"""GPU faults of simcluster for the rebalance job, seen over HTTP: `gpu-fragmentation` makes a
stranded-GPU episode in the default cluster (small GPU pods of Deployments spread so each node
keeps 1-3 GPUs free, a Job asking for a whole node Pending with the scheduler's
FailedScheduling) whose known repack fixes it; `gpu-idle` leaves a workload's GPUs allocated
and idle in DCGM."""

from __future__ import annotations

import json
import urllib.error

import pytest
from kubernetes import client

from gpuops.simcluster.cloud.fragmentation import plan_fragmentation
from tests.helpers import wait_for
from tests.test_sim_metrics import Scrape
from tests.test_sim_shared_gpus import scrape

pytestmark = pytest.mark.timeout(180)

GPU = "nvidia.com/gpu"
REBALANCE_TAINT = {"key": "gpuops.io/rebalance", "value": "run-1", "effect": "NoSchedule"}


def gpus_of(pod: client.V1Pod) -> int:
    return sum(int((c.resources.limits or {}).get(GPU, 0)) for c in pod.spec.containers)


def all_gpu_pods_bound(v1: client.CoreV1Api) -> bool:
    pods = [p for p in v1.list_pod_for_all_namespaces().items if gpus_of(p)]
    return bool(pods) and all(p.spec.node_name for p in pods)


def free_gpus(v1: client.CoreV1Api, pool: str) -> dict[str, int]:
    pods = [p for p in v1.list_pod_for_all_namespaces().items
            if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed")]
    return {n.metadata.name: int(n.status.allocatable[GPU]) - sum(
        gpus_of(p) for p in pods if p.spec.node_name == n.metadata.name)
        for n in v1.list_node(label_selector=f"gpuops.io/pool={pool}").items}


def test_the_plan_strands_gpus_that_emptying_one_node_frees():
    # h100 of the default cluster: qwen-72b's two 4-GPU replicas on two of three nodes.
    plan = plan_fragmentation({"a": 4, "b": 4, "c": 8}, {"a": 8, "b": 8, "c": 8}, 8)
    assert plan.victim == "c"
    assert plan.free_after == {"a": 3, "b": 3, "c": 2}
    assert sorted((f.node, f.gpus, f.count) for f in plan.fills) == [
        ("a", 1, 1), ("b", 1, 1), ("c", 3, 2)]
    with pytest.raises(ValueError, match="no node has all of its GPUs free"):
        plan_fragmentation({"a": 0, "b": 3}, {"a": 8, "b": 8}, 8)
    with pytest.raises(ValueError, match="not enough room to fill node 'c'"):
        plan_fragmentation({"a": 0, "b": 0, "c": 8}, {"a": 8, "b": 8, "c": 8}, 8)


def test_gpu_fragmentation_strands_gpus_in_the_default_cluster_and_the_known_repack_fixes_it(
        sim_factory):
    sim = sim_factory("default")
    v1, batch = client.CoreV1Api(sim.api), client.BatchV1Api(sim.api)
    wait_for(lambda: all_gpu_pods_bound(v1), timeout=30, message="the scenario's GPU pods bound")

    result = sim.fault("gpu-fragmentation")
    assert result["pool"] == "h100"  # a100's busy nodes have no room to strand
    assert result["pendingGpus"] == 8 and result["freeGpusTotal"] == 8
    assert all(1 <= free <= 3 for free in result["freeGpus"].values())
    victim = result["repack"]["empties"]
    assert result["repack"]["moves"] == 2

    job_name = result["job"].split("/")[1]
    pod = wait_for(lambda: next(iter(v1.list_namespaced_pod(
        "default", label_selector=f"job-name={job_name}").items), None),
        timeout=30, message="the pending Job's pod")
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Job", job_name, True)

    def failed_scheduling() -> str | None:
        events = [e for e in v1.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={pod.metadata.name}").items
            if e.reason == "FailedScheduling"]
        return events[-1].message if events else None

    message = wait_for(failed_scheduling, message="the scheduler's FailedScheduling")
    assert message == (
        "0/12 nodes are available: 3 Insufficient nvidia.com/gpu, 9 node(s) didn't match "
        "Pod's node affinity/selector. preemption: 0/12 nodes are available: 3 No preemption "
        "victims found for incoming pod, 9 Preemption is not helpful for scheduling.")
    assert free_gpus(v1, "h100") == result["freeGpus"]  # what the cluster shows, by node
    fillers = [p for p in v1.list_namespaced_pod(
        "default", label_selector="gpuops.io/fault=gpu-fragmentation").items
        if p.metadata.owner_references[0].kind == "ReplicaSet"]
    assert {p.spec.node_name for p in fillers} == set(result["freeGpus"])

    # The known repack, as gpuops will do it: taint the victim, let the pending pod tolerate it
    # and nominate it there, evict the victim's pods; their Deployments place them elsewhere.
    v1.patch_node(victim, {"spec": {"taints": [
        *[t.to_dict() for t in v1.read_node(victim).spec.taints], REBALANCE_TAINT]}})
    tolerations = [{k: v for k, v in t.to_dict().items() if v is not None}
                   for t in pod.spec.tolerations]
    v1.patch_namespaced_pod(pod.metadata.name, "default", {"spec": {"tolerations": [
        *tolerations, {"key": "gpuops.io/rebalance", "operator": "Exists",
                       "effect": "NoSchedule"}]}})
    v1.patch_namespaced_pod_status(pod.metadata.name, "default",
                                   {"status": {"nominatedNodeName": victim}})
    for filler in fillers:
        if filler.spec.node_name == victim:
            v1.create_namespaced_pod_eviction(filler.metadata.name, "default", {
                "metadata": {"name": filler.metadata.name, "namespace": "default"}})

    def landed() -> str | None:
        sim.advance(10)  # the evicted pods' grace period
        return v1.read_namespaced_pod(pod.metadata.name, "default").spec.node_name

    assert wait_for(landed, timeout=30, message="the pending pod bound") == victim
    moved = [p for p in v1.list_namespaced_pod(
        "default", label_selector="gpuops.io/fault=gpu-fragmentation").items
        if p.metadata.owner_references[0].kind == "ReplicaSet"
        and p.metadata.deletion_timestamp is None]
    assert len(moved) == len(fillers) and all(p.spec.node_name for p in moved)
    assert not any(p.spec.node_name == victim for p in moved)
    assert batch.read_namespaced_job(job_name, "default").status.active == 1


@pytest.mark.parametrize(("params", "message"), [
    ({"pool": "cpu"}, "pool 'cpu': it has no GPUs"),
    ({"pool": "tpu"}, "unknown pool 'tpu'"),
    ({"pool": "h100", "gpus": 1}, "params.gpus must be an integer from 2 to 64"),
    ({"pool": "h100", "gpus": 64}, "no node has all of its GPUs free and at least 64"),
])
def test_gpu_fragmentation_refuses_what_it_cannot_make_and_changes_nothing(sim_factory, params,
                                                                           message):
    sim = sim_factory("default")
    v1 = client.CoreV1Api(sim.api)
    wait_for(lambda: all_gpu_pods_bound(v1), timeout=30, message="the scenario's GPU pods bound")
    with pytest.raises(urllib.error.HTTPError) as e:
        sim.fault("gpu-fragmentation", **params)
    assert e.value.code == 400
    assert message in json.loads(e.value.read())["message"]
    assert not client.AppsV1Api(sim.api).list_namespaced_deployment("default").items


def test_gpu_idle_shows_a_workloads_allocated_gpus_near_zero_in_dcgm_until_cleared(sim_factory):
    sim = sim_factory("default")
    v1 = client.CoreV1Api(sim.api)

    def training_running() -> Scrape | None:
        sim.advance(30)  # the trainers' image pulls
        pods = v1.list_namespaced_pod("training").items
        return scrape(sim) if pods and all(p.status.phase == "Running" for p in pods) else None

    wait_for(training_running, timeout=60, message="both training Jobs running")
    result = sim.fault("gpu-idle", "training/finetune-llama-3-8b")
    [idle_pod] = [p.split("/")[1] for p in result["pods"]]
    m = scrape(sim)
    idle = m.series("DCGM_FI_DEV_GPU_UTIL", pod=idle_pod)
    assert len(idle) == 8 and all(s.value == 0 for s in idle)
    assert all(s.value > 0 for s in m.series("DCGM_FI_DEV_FB_USED", pod=idle_pod))  # still held
    busy = [s for s in m.series("DCGM_FI_DEV_GPU_UTIL", namespace="training")
            if s.labels["pod"] != idle_pod]
    assert len(busy) == 8 and all(s.value >= 80 for s in busy)

    assert sim.fault("gpu-idle", "training/finetune-llama-3-8b", clear=True)["cleared"] == 1
    assert all(s.value >= 80 for s in scrape(sim).series("DCGM_FI_DEV_GPU_UTIL", pod=idle_pod))
