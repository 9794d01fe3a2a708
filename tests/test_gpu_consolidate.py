"""Consolidation of GPU nodes whose pods may all move and fit elsewhere, end to end:
simcluster over HTTP with moto behind its node pools, a real Prometheus and Prefect server,
the Slack fake (the fixtures of test_scale_in.py: three l4 nodes of 4 GPUs, the capacity plan
holding two; one h100 node, held; one a100 node, not held)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from gpuops.common.annotations import SCALE_IN_RUN
from tests.helpers import wait_for
from tests.test_capacity_prewarm import boto, moto_url, prometheus  # noqa: F401 (fixtures)
from tests.test_scale_in import (  # noqa: F401 (fixtures)
    L4_GROUP,
    Cluster,
    ConsolidateThread,
    _blocks,
    approve,
    cluster,
    consolidate,
    publish_plan,
)

pytestmark = pytest.mark.timeout(240)
L4 = "NVIDIA-L4"


def gpu_deployment(env: Cluster, name: str, node: str, gpus: int, *, product: str = L4,
                   annotations: dict[str, str] | None = None) -> str:
    """A one-replica Deployment of `gpus` L4 GPUs whose pod runs on `node` (the other nodes
    cordoned while it is scheduled); returns the pod's name."""
    core = env.core()
    others = [n.metadata.name for n in core.list_node().items if n.metadata.name != node]
    for other in others:
        core.patch_node(other, {"spec": {"unschedulable": True}})
    client.AppsV1Api(env.sim.api).create_namespaced_deployment("default", {
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name},
                                           "annotations": annotations or {}},
                              "spec": {"nodeSelector": {"nvidia.com/gpu.product": product},
                                       "containers": [{"name": "main", "image": "vllm:1",
                                                       "resources": {"limits": {
                                                           "nvidia.com/gpu": str(gpus)}}}]}}}})
    pod = wait_for(lambda: next((p.metadata.name for p in core.list_namespaced_pod(
        "default", label_selector=f"app={name}", field_selector=f"spec.nodeName={node}").items
        if p.status.phase == "Running"), None), timeout=30,
        message=f"{name}'s pod running on {node}")
    for other in others:
        core.patch_node(other, {"spec": {"unschedulable": None}})
    return pod


def snapshot(env: Cluster) -> Any:
    """Everything a consolidation could change: groups, nodes (annotations, cordons), pods."""
    core = env.core()
    return (env.groups(), {n.metadata.name: (n.metadata.annotations, n.spec.unschedulable)
                           for n in core.list_node().items},
            sorted((p.metadata.name, p.metadata.uid, p.spec.node_name)
                   for p in core.list_namespaced_pod("default").items))


def l4_nodes(env: Cluster) -> list[str]:
    return sorted(env.node_names("l4"))


def test_a_gpu_node_whose_pod_fits_elsewhere_is_emptied_and_removed_after_approval(
        cluster, slack_fake):  # noqa: F811
    env = cluster(slack_url=slack_fake.base_url)
    a, b, c = l4_nodes(env)
    env.gpu_pod("job-a", a, gpus=2)  # bare pods: never moved, their nodes stay
    env.gpu_pod("job-b", b, gpus=2)
    env.gpu_pod("job-a100", next(iter(env.node_names("a100"))), gpus=1)
    publish_plan(env)  # with two l4 nodes in use: it holds two
    llama = gpu_deployment(env, "llama", c, gpus=2)
    instance = env.instance_of(c)

    before = snapshot(env)
    dry = consolidate(env, dry_run=True)
    assert dry.is_completed(), dry.message
    assert dry.result()["chosen"] == [c]
    planned = dry.result()["moves"][c][f"default/{llama}"]
    assert planned in (a, b)
    assert f"node {c} ({instance}): would remove" in dry.message
    assert snapshot(env) == before  # the dry run changed nothing
    assert slack_fake.messages() == []

    run = ConsolidateThread(idle_for_s=0, **_blocks(env))
    message = approve(slack_fake)
    text = json.dumps(message["blocks"], ensure_ascii=False)
    assert f"{c} (pool l4, 4 GPU(s)) goes" in text
    assert f"default/{llama} (2 GPU) → {planned}" in text
    assert "-4.60 $/h, 4 GPU-hours saved per hour" in text
    state = run.result()
    assert state.is_completed(), state.message
    assert state.result()["removed"] == [c]
    kept = state.result()["kept"]
    assert "default/job-a may not move: no controller would recreate it" in kept[a]

    wait_for(lambda: c not in env.node_names("l4"), timeout=30, message=f"{c} gone")
    assert instance not in env.live_instances(L4_GROUP)
    assert env.asg(L4_GROUP)["DesiredCapacity"] == 2
    [replacement] = env.core().list_namespaced_pod("default", label_selector="app=llama").items
    assert replacement.metadata.name != llama and replacement.status.phase == "Running"
    assert replacement.spec.node_name in (a, b)  # a node that stays
    assert env.pods_on(a) | env.pods_on(b) == {"job-a", "job-b", replacement.metadata.name}
    assert not any(env.core().read_node(n).spec.unschedulable for n in (a, b))


def test_nodes_whose_pods_fit_nowhere_or_are_protected_are_kept_and_nothing_changes(
        cluster):  # noqa: F811
    env = cluster()
    a, b, c = l4_nodes(env)
    h100 = next(iter(env.node_names("h100")))
    env.gpu_pod("job-a", a, gpus=2)
    env.gpu_pod("job-a100", next(iter(env.node_names("a100"))), gpus=1)
    publish_plan(env)  # before the l4 nodes are all in use: it holds two
    big = gpu_deployment(env, "big", b, gpus=3)  # only L4 nodes; 2 GPUs free on each other
    pinned = gpu_deployment(env, "pinned", c, gpus=2,
                            annotations={"karpenter.sh/do-not-disrupt": "true"})
    gpu_deployment(env, "guarded", h100, gpus=1, product="NVIDIA-H100-80GB-HBM3")
    client.PolicyV1Api(env.sim.api).create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    wait_for(lambda: client.PolicyV1Api(env.sim.api).read_namespaced_pod_disruption_budget(
        "guarded", "default").status.expected_pods == 1, message="the PDB's status")
    groups = env.groups()
    pods = {n: env.pods_on(n) for n in (a, b, c, h100)}

    state = consolidate(env)
    assert state.name == "NothingToConsolidate", state.message
    kept = state.result()["kept"]
    assert f"default/{big} fits on no node that stays" in kept[b]
    assert f"default/{pinned} may not move: karpenter.sh/do-not-disrupt: true" in kept[c]
    assert "PodDisruptionBudget default/guarded allows 0 more disruption(s)" in kept[h100]
    assert env.groups() == groups
    assert {n: env.pods_on(n) for n in (a, b, c, h100)} == pods
    for name in (a, b, c, h100):
        node = env.core().read_node(name)
        assert not node.spec.unschedulable
        assert SCALE_IN_RUN not in (node.metadata.annotations or {})
