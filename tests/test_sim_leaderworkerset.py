"""simcluster's LeaderWorkerSet controller with the simulated scheduler and kubelet: groups of
a leader and size-1 workers placed on GPU nodes, the status counting whole groups, and the
serving model taking one group as one replica served by its leader."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from tests.helpers import wait_for
from tests.test_sim_workloads_e2e import advance_until, gpu_nodes  # noqa: F401 (fixture)

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("gpu_nodes")]
GROUP, P = "leaderworkerset.x-k8s.io", "leaderworkerset.sigs.k8s.io/"


@pytest.fixture
def ns(sim) -> str:
    name = f"lws-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(sim.api).create_namespace({"metadata": {"name": name}})
    return name


def template(role: str, gpus: int) -> dict:
    return {"metadata": {"labels": {"app": "big", "role": role},
                         "annotations": {"sim.gpuops.io/pull-seconds": "1"}},
            "spec": {"containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                "args": ["--model", "meta-llama/Llama-3.1-405B", "--port", "8000"],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def lws(name: str, replicas: int, size: int, gpus: int = 4, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, **spec, "leaderWorkerTemplate": {
                "size": size, "leaderTemplate": template("leader", gpus),
                "workerTemplate": template("worker", gpus)}}}


def status(sim, ns: str, name: str) -> dict:
    return client.CustomObjectsApi(sim.api).get_namespaced_custom_object(
        GROUP, "v1", ns, "leaderworkersets", name).get("status") or {}


def pods(sim, ns: str, selector: str = "app=big") -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in client.CoreV1Api(sim.api).list_namespaced_pod(
        ns, label_selector=selector).items if p.metadata.deletion_timestamp is None}


def test_a_leaderworkerset_makes_groups_of_a_leader_and_workers_each_asking_its_gpus(
        sim, ns):
    custom = client.CustomObjectsApi(sim.api)
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "leaderworkersets",
                                           lws("big", replicas=2, size=2))
    advance_until(sim, lambda: status(sim, ns, "big").get("readyReplicas") == 2,
                  message="2 ready groups")
    found = pods(sim, ns)
    assert sorted(found) == ["big-0", "big-0-1", "big-1", "big-1-1"]
    leader, worker = found["big-0"], found["big-0-1"]
    assert leader.metadata.labels[P + "worker-index"] == "0"
    assert leader.metadata.labels["role"] == "leader" and worker.metadata.labels["role"] == "worker"
    assert worker.metadata.labels[P + "group-index"] == "0"
    assert worker.metadata.labels[P + "group-key"] == leader.metadata.labels[P + "group-key"]
    assert worker.metadata.annotations[P + "leader-name"] == "big-0"
    assert leader.metadata.owner_references[0].kind == "LeaderWorkerSet"
    assert worker.metadata.owner_references[0].kind == "Pod"
    env = {e.name: e.value for e in worker.spec.containers[0].env}
    assert env["LWS_LEADER_ADDRESS"] == f"big-0.big.{ns}" and env["LWS_GROUP_SIZE"] == "2"
    assert all(p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"
               for p in found.values())  # 2 groups x 2 pods x 4 GPUs: both nodes full
    st = status(sim, ns, "big")
    assert st["replicas"] == 2 and st["updatedReplicas"] == 2
    assert {c["type"]: c["status"] for c in st["conditions"]}["Available"] == "True"

    # Scaled down: the highest group goes, its worker with it.
    custom.patch_namespaced_custom_object(GROUP, "v1", ns, "leaderworkersets", "big",
                                          {"spec": {"replicas": 1}})
    advance_until(sim, lambda: sorted(pods(sim, ns)) == ["big-0", "big-0-1"],
                  message="group 1 removed")
    wait_for(lambda: status(sim, ns, "big").get("replicas") == 1, timeout=30,
             message="status: one group")


def test_a_group_that_cannot_be_placed_whole_is_not_ready(sim, ns):
    """Three pods of 8 GPUs on two 8-GPU nodes: the worker waits, the group is not ready."""
    client.CustomObjectsApi(sim.api).create_namespaced_custom_object(
        GROUP, "v1", ns, "leaderworkersets", lws("big", replicas=1, size=3, gpus=8))
    advance_until(sim, lambda: sum(p.status.phase == "Running"
                                   for p in pods(sim, ns).values()) == 2,
                  message="two of the group's pods running")
    st = status(sim, ns, "big")
    assert st.get("readyReplicas", 0) == 0
    assert {c["type"]: c["status"] for c in st["conditions"]}["Available"] == "False"
    assert [p.status.phase for p in pods(sim, ns).values()].count("Pending") == 1


def test_the_serving_model_counts_a_group_as_one_replica_served_by_its_leader(
        sim, ns):
    custom = client.CustomObjectsApi(sim.api)
    custom.create_namespaced_custom_object(
        "inference.networking.k8s.io", "v1", ns, "inferencepools", {
            "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": "big"},
            "spec": {"selector": {"matchLabels": {"app": "big"}},
                     "targetPorts": [{"number": 8000}]}})
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "leaderworkersets",
                                           lws("big", replicas=2, size=2))
    advance_until(sim, lambda: status(sim, ns, "big").get("readyReplicas") == 2,
                  message="2 ready groups")

    def replicas() -> set[str]:
        text = sim.scrape() if hasattr(sim, "scrape") else _metrics(sim)
        return {line.split('pod="')[1].split('"')[0] for line in text.splitlines()
                if line.startswith("vllm:num_requests_running{") and f'namespace="{ns}"' in line}

    # The pool selects leaders and workers alike (app=big); only the leaders serve.
    wait_for(lambda: replicas() == {"big-0", "big-1"}, timeout=30, message="two replicas")


def _metrics(sim) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{sim.url}/metrics", timeout=10) as answer:
        return answer.read().decode()
