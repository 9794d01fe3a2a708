"""The pod and node facts that drains, capacity and rebalancing read the same way."""

from gpuops.common.podfacts import (
    holds_resources,
    is_daemonset_pod,
    is_mirror_pod,
    node_allocatable_gpus,
    pod_gpus,
)


def container(gpus: str | None = None, *, request_only: bool = False) -> dict:
    if gpus is None:
        return {"name": "c"}
    key = "requests" if request_only else "limits"
    return {"name": "c", "resources": {key: {"nvidia.com/gpu": gpus}}}


def pod(containers=(), init=(), **meta) -> dict:
    return {"metadata": {"name": "p", **meta},
            "spec": {"containers": list(containers), "initContainers": list(init)}}


def test_a_pods_gpus_are_its_containers_sum_or_its_largest_init_container():
    assert pod_gpus(pod([container("2"), container("1"), container()])) == 3
    assert pod_gpus(pod([container("1")], init=[container("4"), container("2")])) == 4
    assert pod_gpus(pod([container("2", request_only=True)])) == 2
    assert pod_gpus({"metadata": {"name": "bare"}}) == 0


def test_a_gpu_count_is_read_as_a_kubernetes_quantity():
    assert pod_gpus(pod([container("1e1")])) == 10


def test_finished_and_terminating_pods_hold_no_resources():
    running = {**pod(), "status": {"phase": "Running"}}
    assert holds_resources(running)
    assert not holds_resources({**pod(), "status": {"phase": "Succeeded"}})
    assert not holds_resources({**pod(), "status": {"phase": "Failed"}})
    assert not holds_resources({**pod(deletionTimestamp="2025-06-01T10:00:00Z"),
                                "status": {"phase": "Running"}})


def test_daemonset_and_mirror_pods_are_told_apart_from_workload_pods():
    daemon = pod(ownerReferences=[{"kind": "DaemonSet", "name": "dcgm"}])
    replica = pod(ownerReferences=[{"kind": "ReplicaSet", "name": "web-1"}])
    mirror = pod(annotations={"kubernetes.io/config.mirror": "abc"})
    assert is_daemonset_pod(daemon) and not is_daemonset_pod(replica)
    assert is_mirror_pod(mirror) and not is_mirror_pod(replica) and not is_mirror_pod(daemon)


def test_a_nodes_allocatable_gpus_are_zero_until_its_device_plugin_reports_them():
    assert node_allocatable_gpus({"status": {"allocatable": {"nvidia.com/gpu": "8"}}}) == 8
    assert node_allocatable_gpus({"status": {"allocatable": {"cpu": "96"}}}) == 0
    assert node_allocatable_gpus({"metadata": {"name": "new"}}) == 0
