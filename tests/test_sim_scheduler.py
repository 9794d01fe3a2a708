"""simcluster's scheduler as a client sees it: bindings, FailedScheduling messages, preemption.

Everything goes through the official client over HTTP; nodes are created directly, as nodes
self-register in a real cluster. Only scheduling is asserted (spec.nodeName, conditions,
events, nominatedNodeName, victims' deletion), not what the kubelet does next.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)

NS = "default"
GPU = "nvidia.com/gpu"


def node_body(name: str, *, gpus: int = 8, cpu: str = "96", memory: str = "1024Gi",
              labels: dict | None = None, taints: list | None = None,
              unschedulable: bool = False, ready: bool = True) -> dict:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus),
                   "ephemeral-storage": "500Gi"}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  **(labels or {})}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"capacity": allocatable, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "reason": "KubeletReady" if ready
                                       else "KubeletNotReady"}]}}


def pod_body(name: str, *, gpus: int = 0, cpu: str | None = None, memory: str | None = None,
             node_selector: dict | None = None, affinity: dict | None = None,
             tolerations: list | None = None, priority_class: str | None = None) -> dict:
    limits = {GPU: str(gpus)} if gpus else {}
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    spec: dict = {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.9.1",
                                  "resources": {"limits": limits, "requests": requests}}],
                  "terminationGracePeriodSeconds": 30}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = tolerations
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def bound_node(v1: client.CoreV1Api, name: str, timeout: float = 10) -> str:
    return wait_for(lambda: v1.read_namespaced_pod(name, NS).spec.node_name, timeout,
                    message=f"pod {name} to be bound")


def scheduled_condition(v1: client.CoreV1Api, name: str):
    pod = v1.read_namespaced_pod(name, NS)
    return next((c for c in pod.status.conditions or () if c.type == "PodScheduled"), None)


def events_for(v1: client.CoreV1Api, name: str, reason: str) -> list:
    return [e for e in v1.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name}").items if e.reason == reason]


def failed_scheduling_message(v1: client.CoreV1Api, name: str, timeout: float = 10) -> str:
    events = wait_for(lambda: events_for(v1, name, "FailedScheduling"), timeout,
                      message=f"a FailedScheduling event for {name}")
    return events[-1].message


def test_gpu_pod_is_bound_to_the_node_with_free_gpus(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("cpu-node", gpus=0))
    v1.create_node(node_body("gpu-node", gpus=8))
    v1.create_namespaced_pod(NS, pod_body("llm", gpus=4, cpu="8", memory="64Gi"))

    assert bound_node(v1, "llm") == "gpu-node"
    condition = scheduled_condition(v1, "llm")
    assert condition.status == "True" and condition.last_transition_time
    [event] = wait_for(lambda: events_for(v1, "llm", "Scheduled"), 10)
    assert event.type == "Normal"
    assert event.message == "Successfully assigned default/llm to gpu-node"
    assert event.source.component == "default-scheduler"


def test_failed_scheduling_counts_each_reason_like_kube_scheduler(sim):
    v1 = client.CoreV1Api(sim.api)
    h100 = {"gpuops.io/pool": "h100"}
    for i in range(4):  # match the selector, but 2 GPUs are fewer than the pod asks
        v1.create_node(node_body(f"small-{i}", gpus=2, labels=h100))
    for i in range(2):
        v1.create_node(node_body(f"tainted-{i}", labels=h100, taints=[
            {"key": GPU, "value": "present", "effect": "NoSchedule"}]))
    for i in range(3):
        v1.create_node(node_body(f"a100-{i}", labels={"gpuops.io/pool": "a100"}))
    for i in range(3):
        v1.create_node(node_body(f"cordoned-{i}", labels=h100, unschedulable=True))
    v1.create_namespaced_pod(NS, pod_body("big", gpus=4, node_selector=h100))

    expected = ("0/12 nodes are available: "
                "2 node(s) had untolerated taint {nvidia.com/gpu: present}, "
                "3 node(s) didn't match Pod's node affinity/selector, "
                "3 node(s) were unschedulable, 4 Insufficient nvidia.com/gpu. "
                "preemption: 0/12 nodes are available: "
                "12 Preemption is not helpful for scheduling.")
    assert failed_scheduling_message(v1, "big") == expected
    condition = scheduled_condition(v1, "big")
    assert (condition.status, condition.reason, condition.message) == (
        "False", "Unschedulable", expected)
    [event] = events_for(v1, "big", "FailedScheduling")
    assert event.type == "Warning" and event.source.component == "default-scheduler"
    assert v1.read_namespaced_pod("big", NS).spec.node_name is None


def test_full_nodes_without_lower_priority_pods_have_no_preemption_victims(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("n1", gpus=8))
    v1.create_node(node_body("n2", gpus=8))
    for name in ("a", "b"):
        v1.create_namespaced_pod(NS, pod_body(name, gpus=6))
        bound_node(v1, name)
    v1.create_namespaced_pod(NS, pod_body("c", gpus=4))

    assert failed_scheduling_message(v1, "c") == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are "
        "available: 2 No preemption victims found for incoming pod.")


def test_without_nodes_the_message_is_no_nodes_available(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_namespaced_pod(NS, pod_body("lonely", gpus=1))
    assert failed_scheduling_message(v1, "lonely") == "no nodes available to schedule pods"


def test_pending_pod_is_bound_soon_after_a_node_is_added(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_namespaced_pod(NS, pod_body("waiting", gpus=1))
    failed_scheduling_message(v1, "waiting")
    sim.advance(60)  # several failed attempts: the back-off is at its 10 s cap

    v1.create_node(node_body("fresh", gpus=8))
    sim.advance(10)
    assert bound_node(v1, "waiting", timeout=5) == "fresh"
    assert scheduled_condition(v1, "waiting").status == "True"


def test_node_selector_and_required_affinity_pick_the_matching_node(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("a100", labels={"pool": "a100", "gpu-memory-gb": "40"}))
    v1.create_node(node_body("h100", labels={"pool": "h100", "gpu-memory-gb": "80"}))
    v1.create_node(node_body("h100-old", labels={"pool": "h100", "gpu-memory-gb": "40"}))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]},
                                  {"key": "gpu-memory-gb", "operator": "Gt", "values": ["64"]}]},
            {"matchExpressions": [{"key": "no-such-label", "operator": "Exists"}]},
        ]}}}
    v1.create_namespaced_pod(NS, pod_body("by-affinity", gpus=1, affinity=affinity))
    v1.create_namespaced_pod(NS, pod_body("by-selector", gpus=1,
                                          node_selector={"pool": "a100"}))

    assert bound_node(v1, "by-affinity") == "h100"
    assert bound_node(v1, "by-selector") == "a100"


def test_taints_keep_pods_off_unless_tolerated(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("gpu", taints=[{"key": GPU, "value": "present",
                                             "effect": "NoSchedule"}]))
    v1.create_namespaced_pod(NS, pod_body("intolerant", gpus=1))
    v1.create_namespaced_pod(NS, pod_body("tolerant", gpus=1, tolerations=[
        {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]))
    v1.create_namespaced_pod(NS, pod_body("equal", gpus=1, tolerations=[
        {"key": GPU, "operator": "Equal", "value": "present"}]))
    v1.create_namespaced_pod(NS, pod_body("tolerates-all", gpus=1,
                                          tolerations=[{"operator": "Exists"}]))

    for name in ("tolerant", "equal", "tolerates-all"):
        assert bound_node(v1, name) == "gpu"
    assert failed_scheduling_message(v1, "intolerant").startswith(
        "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}.")


def test_cordoned_and_not_ready_nodes_are_skipped(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("cordoned", unschedulable=True))
    v1.create_node(node_body("not-ready", ready=False))
    v1.create_node(node_body("ok", gpus=8))
    for i in range(3):
        v1.create_namespaced_pod(NS, pod_body(f"p{i}", gpus=1, cpu="4", memory="32Gi"))
    assert {bound_node(v1, f"p{i}") for i in range(3)} == {"ok"}

    v1.patch_node("ok", {"spec": {"unschedulable": True}})
    v1.create_namespaced_pod(NS, pod_body("late", gpus=1))
    assert failed_scheduling_message(v1, "late").startswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }, 2 node(s) were unschedulable.")


def test_least_allocated_spreads_gpu_pods_so_gpus_fragment(sim):
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("n1", gpus=8))
    v1.create_node(node_body("n2", gpus=8))
    v1.create_namespaced_pod(NS, pod_body("first", gpus=1, cpu="8", memory="64Gi"))
    first = bound_node(v1, "first")
    v1.create_namespaced_pod(NS, pod_body("second", gpus=1, cpu="8", memory="64Gi"))
    second = bound_node(v1, "second")
    assert {first, second} == {"n1", "n2"}

    # Each node now has 7 free GPUs: an 8-GPU pod fits nowhere although 14 are idle.
    v1.create_namespaced_pod(NS, pod_body("whole-node", gpus=8))
    assert "2 Insufficient nvidia.com/gpu" in failed_scheduling_message(v1, "whole-node")


def test_most_allocated_scoring_packs_pods(sim_factory):
    sim = sim_factory("empty", extra={"scheduler_scoring": "MostAllocated"})
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node_body("n1", gpus=8))
    v1.create_node(node_body("n2", gpus=8))
    v1.create_namespaced_pod(NS, pod_body("first", gpus=1, cpu="8", memory="64Gi"))
    first = bound_node(v1, "first")
    v1.create_namespaced_pod(NS, pod_body("second", gpus=1, cpu="8", memory="64Gi"))
    assert bound_node(v1, "second") == first


def create_priority_class(sim, name: str, value: int, policy: str | None = None) -> None:
    body: dict = {"metadata": {"name": name}, "value": value}
    if policy:
        body["preemptionPolicy"] = policy
    client.SchedulingV1Api(sim.api).create_priority_class(body)


def deletion_under_way(v1: client.CoreV1Api, name: str) -> bool:
    try:
        return v1.read_namespaced_pod(name, NS).metadata.deletion_timestamp is not None
    except ApiException as e:
        if e.status == 404:
            return True
        raise


def finish_deletion(v1: client.CoreV1Api, name: str) -> None:
    """What the kubelet does once the grace period is over (done here to not wait for it)."""
    try:
        v1.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    except ApiException as e:
        if e.status != 404:
            raise


def test_high_priority_pod_preempts_a_low_priority_pod_and_is_bound(sim):
    v1 = client.CoreV1Api(sim.api)
    create_priority_class(sim, "batch-low", -10)
    create_priority_class(sim, "serving-high", 1000)
    v1.create_node(node_body("n1", gpus=8))
    v1.create_namespaced_pod(NS, pod_body("training", gpus=8, priority_class="batch-low"))
    bound_node(v1, "training")

    serving = v1.create_namespaced_pod(NS, pod_body("serving", gpus=8,
                                                    priority_class="serving-high"))
    assert serving.spec.priority == 1000
    wait_for(lambda: deletion_under_way(v1, "training"), 10, message="the victim's deletion")
    assert wait_for(lambda: v1.read_namespaced_pod("serving", NS).status.nominated_node_name,
                    10) == "n1"
    [preempted] = wait_for(lambda: events_for(v1, "training", "Preempted"), 10)
    assert preempted.message == f"Preempted by pod {serving.metadata.uid} on node n1"
    assert preempted.source.component == "default-scheduler"
    try:
        victim = v1.read_namespaced_pod("training", NS)
        target = next(c for c in victim.status.conditions if c.type == "DisruptionTarget")
        assert (target.status, target.reason) == ("True", "PreemptionByScheduler")
    except ApiException as e:
        assert e.status == 404  # the kubelet already finished it
    assert failed_scheduling_message(v1, "serving") == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")

    finish_deletion(v1, "training")
    assert bound_node(v1, "serving") == "n1"


def test_preemption_evicts_the_fewest_pods_and_spares_pdb_protected_ones(sim):
    v1 = client.CoreV1Api(sim.api)
    create_priority_class(sim, "high", 1000)
    v1.create_node(node_body("two-pods", gpus=8))
    v1.create_node(node_body("protected", gpus=8))
    v1.create_node(node_body("one-pod", gpus=8))
    for name, node in (("a", "two-pods"), ("b", "two-pods"), ("guarded", "protected"),
                       ("c", "one-pod")):
        body = pod_body(name, gpus=8 if name in ("guarded", "c") else 4)
        body["spec"]["nodeName"] = node  # placed directly, as by a DaemonSet or a test
        v1.create_namespaced_pod(NS, body)
    client.PolicyV1Api(sim.api).create_namespaced_pod_disruption_budget(NS, {
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})

    v1.create_namespaced_pod(NS, pod_body("urgent", gpus=8, priority_class="high"))
    wait_for(lambda: deletion_under_way(v1, "c"), 10, message="the single victim's deletion")
    assert v1.read_namespaced_pod("urgent", NS).status.nominated_node_name == "one-pod"
    for spared in ("a", "b", "guarded"):
        assert v1.read_namespaced_pod(spared, NS).metadata.deletion_timestamp is None


def test_a_never_preempting_pod_waits_instead_of_evicting(sim):
    v1 = client.CoreV1Api(sim.api)
    create_priority_class(sim, "high-polite", 1000, policy="Never")
    v1.create_node(node_body("n1", gpus=8))
    v1.create_namespaced_pod(NS, pod_body("training", gpus=8))
    bound_node(v1, "training")

    v1.create_namespaced_pod(NS, pod_body("polite", gpus=8, priority_class="high-polite"))
    assert failed_scheduling_message(v1, "polite") == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: not eligible due to preemptionPolicy=Never.")
    sim.advance(30)
    assert v1.read_namespaced_pod("training", NS).metadata.deletion_timestamp is None
    polite = v1.read_namespaced_pod("polite", NS)
    assert polite.spec.node_name is None and polite.status.nominated_node_name is None
