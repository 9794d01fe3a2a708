"""Shared GPUs in simcluster, as a client sees them: a share of one GPU is requested as
`gpuops.io/gpu-milli` (thousandths), whole GPUs as `nvidia.com/gpu`; the scheduler places
both device by device and records the GPUs it chose on the pod (`gpuops.io/gpu-index`); the
DCGM exporter reports each GPU with every pod that holds part of it."""

from __future__ import annotations

import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuops.common.annotations import GPU_INDEX
from tests.helpers import status_message, wait_for
from tests.test_sim_metrics import Scrape
from tests.test_sim_scheduler import failed_scheduling_message

pytestmark = pytest.mark.timeout(120)

NS = "default"
GPU, MILLI = "nvidia.com/gpu", "gpuops.io/gpu-milli"


def add_gpu_node(v1: client.CoreV1Api, name: str, gpus: int) -> None:
    capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", GPU: str(gpus),
                MILLI: str(1000 * gpus)}
    v1.create_node({"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-L4"}},
        "status": {"capacity": capacity, "allocatable": capacity, "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})


def gpu_pod(name: str, *, whole: int = 0, milli: int = 0, node: str | None = None) -> dict:
    limits = {GPU: str(whole)} if whole else {MILLI: str(milli)}
    spec: dict = {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.11.0",
                                  "resources": {"limits": limits}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "annotations": {"sim.gpuops.io/pull-seconds": "1"}},
            "spec": spec}


def gpu_index(v1: client.CoreV1Api, name: str) -> str:
    return wait_for(lambda: (v1.read_namespaced_pod(name, NS).metadata.annotations or {}).get(
        GPU_INDEX), message=f"pod {name} bound with its GPUs recorded")


def scrape(sim) -> Scrape:
    with urllib.request.urlopen(f"{sim.url}/metrics", timeout=30) as resp:
        return Scrape(resp.read().decode())


def test_shares_pack_onto_one_gpu_and_whole_gpus_take_only_untouched_ones(sim):
    v1 = client.CoreV1Api(sim.api)
    add_gpu_node(v1, "l4-a", gpus=2)
    v1.create_namespaced_pod(NS, gpu_pod("half", milli=500))
    assert gpu_index(v1, "half") == "0"
    v1.create_namespaced_pod(NS, gpu_pod("third", milli=300))
    assert gpu_index(v1, "third") == "0"  # best fit: GPU 0 still has room, GPU 1 stays whole
    v1.create_namespaced_pod(NS, gpu_pod("whole", whole=1))
    assert gpu_index(v1, "whole") == "1"

    # The sum of nvidia.com/gpu says one GPU is free, but no GPU is untouched: it waits.
    v1.create_namespaced_pod(NS, gpu_pod("another", whole=1))
    message = failed_scheduling_message(v1, "another")
    assert message.startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    # A share that fits in GPU 0's remaining 200 thousandths still lands.
    v1.create_namespaced_pod(NS, gpu_pod("sliver", milli=200))
    assert gpu_index(v1, "sliver") == "0"
    assert v1.read_namespaced_pod("another", NS).spec.node_name is None


def test_a_share_needs_room_on_one_gpu_not_in_total(sim):
    v1 = client.CoreV1Api(sim.api)
    add_gpu_node(v1, "l4-a", gpus=2)
    for name in ("s0", "s1"):
        v1.create_namespaced_pod(NS, gpu_pod(name, milli=600))
    assert {gpu_index(v1, "s0"), gpu_index(v1, "s1")} == {"0", "1"}
    v1.create_namespaced_pod(NS, gpu_pod("big-share", milli=500))  # 800 free, 400 per GPU
    message = failed_scheduling_message(v1, "big-share")
    assert message.startswith("0/1 nodes are available: 1 Insufficient gpuops.io/gpu-milli.")

    v1.delete_namespaced_pod("s1", NS, grace_period_seconds=0)
    assert gpu_index(v1, "big-share") == "1"  # the freed room is used


def test_dcgm_reports_each_gpu_with_every_pod_sharing_it(sim):
    v1 = client.CoreV1Api(sim.api)
    add_gpu_node(v1, "l4-a", gpus=2)
    for name, milli in (("a", 500), ("b", 250)):
        v1.create_namespaced_pod(NS, gpu_pod(name, milli=milli))
        gpu_index(v1, name)
    v1.create_namespaced_pod(NS, gpu_pod("c", whole=1))
    gpu_index(v1, "c")
    # placed by its creator, not the scheduler: the same rule gives it GPU 0's last room
    v1.create_namespaced_pod(NS, gpu_pod("d", milli=250, node="l4-a"))

    def running() -> Scrape | None:
        sim.advance(5)
        pods = v1.list_namespaced_pod(NS).items
        return scrape(sim) if all(p.status.phase == "Running" for p in pods) else None

    m = wait_for(running, message="every pod running")
    on_gpu0 = m.series("DCGM_FI_DEV_GPU_UTIL", Hostname="l4-a", gpu="0")
    assert sorted(s.labels["pod"] for s in on_gpu0) == ["a", "b", "d"]
    assert len({s.value for s in on_gpu0}) == 1  # one device, one value on each series
    [on_gpu1] = m.series("DCGM_FI_DEV_GPU_UTIL", Hostname="l4-a", gpu="1")
    assert on_gpu1.labels["pod"] == "c"
    # a training-like pod keeps its GPU ~90 % busy: three shares adding up to one GPU too
    assert 80 <= on_gpu0[0].value <= 100 and 80 <= on_gpu1.value <= 100


@pytest.mark.parametrize(("limits", "message"), [
    ({GPU: "0.5"}, 'resources.limits[nvidia.com/gpu]: Invalid value: "0.5": must be an integer'),
    ({MILLI: "1000"}, "a share of one GPU is 1 to 999 thousandths; ask for whole GPUs"),
    ({MILLI: "250m"}, 'Invalid value: "250m": must be an integer'),
    ({GPU: "1", MILLI: "500"}, "whole GPUs (nvidia.com/gpu) or a share of one"),
])
def test_a_gpu_request_that_is_not_whole_gpus_or_one_share_is_refused(sim, limits, message):
    v1 = client.CoreV1Api(sim.api)
    body = gpu_pod("bad", whole=1)
    body["spec"]["containers"][0]["resources"]["limits"] = limits
    with pytest.raises(ApiException) as e:
        v1.create_namespaced_pod(NS, body)
    assert e.value.status == 422
    assert message in status_message(e.value)
    assert v1.list_namespaced_pod(NS).items == []
