"""simcluster's DaemonSet controller as a client sees it, with the simulated scheduler and
kubelet: one pod per matching node, shaped as kube's controller makes them, kept there through
cordons and drains, moved off nodes that stop matching, rolled on a template change."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import status_message, wait_for
from tests.test_sim_workloads_e2e import advance_until

pytestmark = pytest.mark.timeout(120)

NS = "default"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


def add_node(v1: client.CoreV1Api, name: str, *, gpu: bool = True) -> None:
    capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110"}
    labels = {"kubernetes.io/hostname": name}
    if gpu:
        capacity[GPU] = "8"
        labels["nvidia.com/gpu.present"] = "true"
    v1.create_node({"metadata": {"name": name, "labels": labels},
                    "spec": {"taints": [GPU_TAINT] if gpu else []},
                    "status": {"capacity": capacity, "allocatable": capacity, "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})


def device_plugin(image: str = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0") -> dict:
    labels = {"app": "nvidia-device-plugin"}
    return {"metadata": {"name": "nvidia-device-plugin"},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels,
                                               "annotations": {"sim.gpuops.io/pull-seconds":
                                                               "1"}},
                                  "spec": {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                                           "tolerations": [{"key": GPU, "operator": "Exists",
                                                            "effect": "NoSchedule"}],
                                           "containers": [{"name": "plugin", "image": image}]}}}}


def daemon_pods(v1: client.CoreV1Api) -> list[client.V1Pod]:
    return [p for p in v1.list_namespaced_pod(NS, label_selector="app=nvidia-device-plugin").items
            if p.metadata.deletion_timestamp is None]


def pods_by_node(v1: client.CoreV1Api) -> dict[str, str]:
    return {p.spec.node_name: p.metadata.name for p in daemon_pods(v1) if p.spec.node_name}


@pytest.fixture
def cluster(sim):
    v1 = client.CoreV1Api(sim.api)
    for name in ("gpu-a", "gpu-b"):
        add_node(v1, name)
    add_node(v1, "cpu-a", gpu=False)
    return sim, v1, client.AppsV1Api(sim.api)


def test_a_daemon_pod_runs_on_each_matching_node_shaped_like_kubes(cluster):
    sim, v1, apps = cluster
    apps.create_namespaced_daemon_set(NS, device_plugin())
    placed = wait_for(lambda: len(pods_by_node(v1)) == 2 and pods_by_node(v1),
                      message="a device plugin pod bound on each GPU node")
    assert set(placed) == {"gpu-a", "gpu-b"}  # not the CPU node: the selector leaves it out
    pod = v1.read_namespaced_pod(placed["gpu-a"], NS)
    [ref] = pod.metadata.owner_references
    assert (ref.kind, ref.name, ref.controller) == ("DaemonSet", "nvidia-device-plugin", True)
    [term] = pod.spec.affinity.node_affinity.\
        required_during_scheduling_ignored_during_execution.node_selector_terms
    assert [(f.key, f.operator, f.values) for f in term.match_fields] == [
        ("metadata.name", "In", ["gpu-a"])]
    tolerations = {(t.key, t.effect): t.toleration_seconds for t in pod.spec.tolerations}
    for key, effect in (("node.kubernetes.io/not-ready", "NoExecute"),
                        ("node.kubernetes.io/unreachable", "NoExecute"),
                        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
                        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
                        ("node.kubernetes.io/unschedulable", "NoSchedule"),
                        (GPU, "NoSchedule")):
        assert (key, effect) in tolerations
    # no tolerationSeconds: a node problem never evicts a daemon pod
    assert tolerations[("node.kubernetes.io/not-ready", "NoExecute")] is None
    assert pod.metadata.labels["controller-revision-hash"]
    assert [e.reason for e in v1.list_namespaced_event(
        NS, field_selector="involvedObject.name=nvidia-device-plugin").items].count(
        "SuccessfulCreate") == 2

    status = advance_until(sim, lambda: (s := apps.read_namespaced_daemon_set(
        "nvidia-device-plugin", NS).status).number_available == 2 and s,
        message="both daemon pods available")
    assert (status.desired_number_scheduled, status.current_number_scheduled,
            status.number_ready, status.updated_number_scheduled,
            status.number_misscheduled, status.observed_generation) == (2, 2, 2, 2, 0, 1)


def test_a_cordoned_and_drained_node_keeps_its_daemon_pod_and_a_deleted_one_comes_back(cluster):
    _sim, v1, apps = cluster
    apps.create_namespaced_daemon_set(NS, device_plugin())
    wait_for(lambda: len(pods_by_node(v1)) == 2, message="daemon pods bound")
    v1.create_namespaced_pod(NS, {
        "metadata": {"name": "worker"},
        "spec": {"nodeName": "gpu-a", "containers": [{"name": "w", "image": "busybox:1.36"}]}})
    v1.patch_node("gpu-a", {"spec": {"unschedulable": True}})  # kubectl cordon
    v1.create_namespaced_pod_eviction("worker", NS, {"metadata": {"name": "worker", "namespace":
                                                                  NS}})
    daemon = pods_by_node(v1)["gpu-a"]
    wait_for(lambda: not any(p.metadata.name == "worker" and p.metadata.deletion_timestamp is None
                             for p in v1.list_namespaced_pod(NS).items),
             message="the evicted worker terminating")
    assert pods_by_node(v1)["gpu-a"] == daemon  # the cordon and the drain left it

    v1.delete_namespaced_pod(daemon, NS, grace_period_seconds=0)
    again = wait_for(lambda: (n := pods_by_node(v1).get("gpu-a")) and n != daemon and n,
                     message="a new daemon pod on the cordoned node")
    assert v1.read_namespaced_pod(again, NS).spec.node_name == "gpu-a"


def test_daemon_pods_leave_nodes_that_stop_matching_and_follow_new_ones(cluster):
    _sim, v1, apps = cluster
    apps.create_namespaced_daemon_set(NS, device_plugin())
    wait_for(lambda: len(pods_by_node(v1)) == 2, message="daemon pods bound")

    v1.patch_node("gpu-b", {"metadata": {"labels": {"nvidia.com/gpu.present": None}}})
    wait_for(lambda: set(pods_by_node(v1)) == {"gpu-a"}, message="gpu-b's pod deleted")
    v1.patch_node("gpu-a", {"spec": {"taints": [GPU_TAINT, {"key": "maintenance",
                                                            "effect": "NoExecute"}]}})
    wait_for(lambda: not pods_by_node(v1), message="a NoExecute taint not tolerated evicts it")

    add_node(v1, "gpu-c")
    wait_for(lambda: set(pods_by_node(v1)) == {"gpu-c"}, message="a pod for the new node")
    v1.delete_node("gpu-c")
    status = wait_for(lambda: (s := apps.read_namespaced_daemon_set(
        "nvidia-device-plugin", NS).status) and s.desired_number_scheduled == 0 and s,
        message="no node left to run it")
    assert status.current_number_scheduled == 0


def test_a_template_change_rolls_one_node_at_a_time(cluster):
    sim, v1, apps = cluster
    apps.create_namespaced_daemon_set(NS, device_plugin())
    advance_until(sim, lambda: apps.read_namespaced_daemon_set(
        "nvidia-device-plugin", NS).status.number_available == 2, message="rolled out")
    apps.patch_namespaced_daemon_set("nvidia-device-plugin", NS, {"spec": {"template": {"spec": {
        "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.18.0"}]}}}})
    most_replaced = 0

    def rolled() -> bool:
        nonlocal most_replaced
        pods = daemon_pods(v1)
        old = [p for p in pods if p.spec.containers[0].image.endswith("v0.17.0")]
        most_replaced = max(most_replaced, 2 - len(old))
        status = apps.read_namespaced_daemon_set("nvidia-device-plugin", NS).status
        # maxUnavailable 1: never both nodes without an available pod at once
        assert status.number_available >= 1 or status.observed_generation < 2
        return not old and status.updated_number_scheduled == 2 and status.number_available == 2

    advance_until(sim, rolled, step=2, message="both pods on the new image")
    assert apps.read_namespaced_daemon_set("nvidia-device-plugin", NS).status.\
        observed_generation == 2


@pytest.mark.parametrize(("change", "field"), [
    (lambda b: b["spec"]["selector"].__setitem__("matchLabels", {"app": "other"}),
     "spec.template.metadata.labels"),
    (lambda b: b["spec"]["template"]["spec"].__setitem__("restartPolicy", "Never"),
     "spec.template.spec.restartPolicy"),
])
def test_an_invalid_daemonset_is_refused_naming_the_field(sim, change, field):
    body = device_plugin()
    change(body)
    with pytest.raises(ApiException) as e:
        client.AppsV1Api(sim.api).create_namespaced_daemon_set(NS, body)
    assert e.value.status == 422
    assert field in status_message(e.value)
    assert client.AppsV1Api(sim.api).list_namespaced_daemon_set(NS).items == []


def test_the_default_cluster_runs_its_gpu_node_agents_as_daemonsets(sim_factory):
    sim = sim_factory("default")
    v1, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    gpu_nodes = {n.metadata.name for n in v1.list_node().items
                 if "nvidia.com/gpu" in (n.status.allocatable or {})}
    assert len(gpu_nodes) == 10

    def agents() -> dict[str, set[str]] | None:
        pods = v1.list_namespaced_pod("kube-system").items
        found: dict[str, set[str]] = {}
        for pod in pods:
            found.setdefault(pod.metadata.owner_references[0].name, set()).add(pod.spec.node_name)
        return found if all(v == gpu_nodes for v in found.values()) and len(found) == 2 \
            else None

    found = wait_for(agents, message="a device plugin and a DCGM exporter on every GPU node")
    assert set(found) == {"nvidia-device-plugin-daemonset", "dcgm-exporter"}
    status = advance_until(sim, lambda: (s := apps.read_namespaced_daemon_set(
        "dcgm-exporter", "kube-system").status).number_ready == 10 and s,
        message="the exporters Ready")
    assert status.desired_number_scheduled == 10
