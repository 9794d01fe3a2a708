"""What gpuops' GPU rebalance relies on from the scheduler, over HTTP with the official client:
a temporary `gpuops.io/rebalance` NoSchedule taint on the nodes a plan frees, the matching
toleration added to the pending pods (an allowed pod update), and `status.nominatedNodeName`
set through pods/status (KEP-5278). simcluster's scheduler must treat each as kube-scheduler
does: the nominated node is tried first, holds room against pods of equal or lower priority,
stays through failed attempts, and is cleared when the pod is bound, wherever it lands."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import status_message, wait_for
from tests.test_sim_scheduler import (
    NS,
    bound_node,
    create_priority_class,
    failed_scheduling_message,
    node_body,
    pod_body,
)

pytestmark = pytest.mark.timeout(120)

REBALANCE_TAINT = {"key": "gpuops.io/rebalance", "value": "run-1", "effect": "NoSchedule"}
REBALANCE_TOLERATION = {"key": "gpuops.io/rebalance", "operator": "Equal", "value": "run-1",
                        "effect": "NoSchedule"}


def place(v1: client.CoreV1Api, name: str, node: str, gpus: int, cpu: str = "1") -> None:
    body = pod_body(name, gpus=gpus, cpu=cpu)
    body["spec"]["nodeName"] = node
    v1.create_namespaced_pod(NS, body)


def nominate(v1: client.CoreV1Api, name: str, node: str) -> None:
    v1.patch_namespaced_pod_status(name, NS, {"status": {"nominatedNodeName": node}})


def add_toleration(v1: client.CoreV1Api, name: str) -> None:
    """Add the rebalance toleration to a pod's (the client sends the whole list)."""
    pod = v1.read_namespaced_pod(name, NS)
    tolerations = [{k: v for k, v in t.to_dict().items() if v is not None}
                   for t in pod.spec.tolerations or ()]
    v1.patch_namespaced_pod(name, NS, {"spec": {"tolerations": [*tolerations,
                                                                REBALANCE_TOLERATION]}})


def failed_attempts(v1: client.CoreV1Api, name: str) -> int:
    return sum(e.count or 1 for e in v1.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name}").items if e.reason == "FailedScheduling")


def nomination(v1: client.CoreV1Api, name: str) -> str | None:
    return v1.read_namespaced_pod(name, NS).status.nominated_node_name


def test_a_nominated_pod_lands_on_its_node_and_keeps_the_nomination_while_it_waits(sim):
    v1 = client.CoreV1Api(sim.api)
    for name in ("gpu-a", "gpu-b"):
        v1.create_node(node_body(name))
    place(v1, "on-a", "gpu-a", gpus=4)
    place(v1, "on-b", "gpu-b", gpus=4)
    place(v1, "busy-b", "gpu-b", gpus=0, cpu="60")  # LeastAllocated would rather pick gpu-a
    v1.create_namespaced_pod(NS, pod_body("big", gpus=8))
    failed_scheduling_message(v1, "big")
    nominate(v1, "big", "gpu-b")

    attempts = failed_attempts(v1, "big")
    sim.advance(330)  # an unschedulable pod is retried at least every 5 minutes
    wait_for(lambda: failed_attempts(v1, "big") > attempts, message="another failed attempt")
    assert nomination(v1, "big") == "gpu-b"  # a failed attempt leaves it (KEP-5278)

    # Both nodes free at once: held by a taint until the pod gets its toleration.
    for name in ("gpu-a", "gpu-b"):
        v1.patch_node(name, {"spec": {"taints": [REBALANCE_TAINT]}})
    for name in ("on-a", "on-b"):
        v1.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    add_toleration(v1, "big")
    assert bound_node(v1, "big") == "gpu-b"
    assert nomination(v1, "big") is None  # binding clears it


def test_a_nomination_holds_room_against_equal_priority_pods_not_higher_ones(sim):
    v1 = client.CoreV1Api(sim.api)
    create_priority_class(sim, "urgent", 1000)
    v1.create_node(node_body("gpu-a"))
    place(v1, "half", "gpu-a", gpus=4)
    v1.create_namespaced_pod(NS, pod_body("big", gpus=8))
    failed_scheduling_message(v1, "big")
    nominate(v1, "big", "gpu-a")

    v1.create_namespaced_pod(NS, pod_body("equal", gpus=4))  # 4 GPUs free, but held for big
    assert failed_scheduling_message(v1, "equal").startswith(
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    assert v1.read_namespaced_pod("equal", NS).spec.node_name is None
    v1.create_namespaced_pod(NS, pod_body("higher", gpus=4, priority_class="urgent"))
    assert bound_node(v1, "higher") == "gpu-a"  # a higher priority ignores the hold


def test_a_nominated_pod_that_fits_elsewhere_first_lands_there_and_loses_the_nomination(sim):
    v1 = client.CoreV1Api(sim.api)
    for name in ("gpu-a", "gpu-b"):
        v1.create_node(node_body(name))
    place(v1, "on-a", "gpu-a", gpus=4)
    place(v1, "on-b", "gpu-b", gpus=4)
    v1.create_namespaced_pod(NS, pod_body("big", gpus=8))
    failed_scheduling_message(v1, "big")
    nominate(v1, "big", "gpu-b")

    v1.delete_namespaced_pod("on-a", NS, grace_period_seconds=0)
    assert bound_node(v1, "big") == "gpu-a"
    assert nomination(v1, "big") is None


def test_a_rebalance_taint_keeps_others_off_and_the_added_toleration_lets_the_pod_in(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("gpu-a"))
    place(v1, "small", "gpu-a", gpus=4)
    v1.create_namespaced_pod(NS, pod_body("big", gpus=8))
    failed_scheduling_message(v1, "big")

    v1.patch_node("gpu-a", {"spec": {"taints": [REBALANCE_TAINT]}})
    add_toleration(v1, "big")
    nominate(v1, "big", "gpu-a")
    v1.delete_namespaced_pod("small", NS, grace_period_seconds=0)  # the move: evicted...
    v1.create_namespaced_pod(NS, pod_body("small-again", gpus=4))  # ...and recreated
    assert bound_node(v1, "big") == "gpu-a"
    assert "untolerated taint {gpuops.io/rebalance: run-1}" in failed_scheduling_message(
        v1, "small-again")


def test_an_existing_toleration_cannot_be_removed_from_a_pod(sim):
    v1 = client.CoreV1Api(sim.api)
    body = pod_body("big", gpus=8, tolerations=[REBALANCE_TOLERATION])
    v1.create_namespaced_pod(NS, body)
    with pytest.raises(ApiException) as e:
        v1.patch_namespaced_pod("big", NS, {"spec": {"tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}]}})
    assert e.value.status == 422
    assert status_message(e.value).endswith(
        "spec.tolerations: Forbidden: existing toleration can not be modified except its "
        "tolerationSeconds")
    tolerations = v1.read_namespaced_pod("big", NS).spec.tolerations
    assert any(t.key == "gpuops.io/rebalance" for t in tolerations)
