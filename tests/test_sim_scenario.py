"""Scenario files as a client sees their result: the default cluster's pools, nodes, serving
stack and training jobs; the empty one; and bad files refused whole, naming field and line."""

from __future__ import annotations

import json
import textwrap
import urllib.error
from collections import Counter
from pathlib import Path

import pytest
from kubernetes import client

from gpuops.simcluster.config import SimConfig
from gpuops.simcluster.testing import SimClusterThread

pytestmark = pytest.mark.timeout(120)


def nodes_by_pool(api: client.ApiClient) -> dict[str, list]:
    result: dict[str, list] = {}
    for node in client.CoreV1Api(api).list_node().items:
        result.setdefault(node.metadata.labels.get("gpuops.io/pool"), []).append(node)
    return result


def admin_error(sim, path: str, body: dict) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as err:
        sim.admin(path, body)
    return err.value.code, json.loads(err.value.read())["message"]


def test_default_scenario_has_four_pools_of_ready_nodes_labelled_like_eks_gpu_nodes(sim_factory):
    sim = sim_factory("default")
    pools = nodes_by_pool(sim.api)
    assert {name: len(nodes) for name, nodes in pools.items()} == {
        "h100": 3, "a100": 3, "l4": 4, "cpu": 2}
    h100 = pools["h100"][0]
    labels = h100.metadata.labels
    assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert labels["eks.amazonaws.com/nodegroup"] == "h100"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert h100.spec.provider_id.startswith("aws:///us-east-1a/i-")
    assert [(t.key, t.value, t.effect) for t in h100.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")]
    ready = next(c for c in h100.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("True", "KubeletReady")
    assert h100.status.node_info.kubelet_version.startswith("v1.")
    assert h100.status.allocatable["pods"] == "110"
    for name, gpus in (("h100", "8"), ("a100", "8"), ("l4", "4")):
        assert {n.status.allocatable.get("nvidia.com/gpu") for n in pools[name]} == {gpus}
    assert all("nvidia.com/gpu" not in n.status.allocatable for n in pools["cpu"])
    assert not pools["cpu"][0].spec.taints
    # l4 is a self-managed Auto Scaling group: no EKS node group label.
    assert "eks.amazonaws.com/nodegroup" not in pools["l4"][0].metadata.labels


def test_default_scenario_serves_two_models_through_inference_pools_and_http_routes(
        sim_factory):
    sim = sim_factory("default")
    custom = client.CustomObjectsApi(sim.api)
    inference_pools = custom.list_namespaced_custom_object(
        "inference.networking.k8s.io", "v1", "inference", "inferencepools")["items"]
    assert {p["metadata"]["name"] for p in inference_pools} == {"llama-3-8b", "qwen-72b"}
    llama_pool = next(p for p in inference_pools if p["metadata"]["name"] == "llama-3-8b")
    assert llama_pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert llama_pool["spec"]["endpointPickerRef"]["port"] == {"number": 9002}
    routes = custom.list_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", "inference", "httproutes")["items"]
    for route in routes:
        assert route["spec"]["parentRefs"][0]["name"] == "inference-gateway"
        backend = route["spec"]["rules"][0]["backendRefs"][0]
        assert (backend["group"], backend["kind"], backend["weight"]) == (
            "inference.networking.k8s.io", "InferencePool", 100)
    assert {r["spec"]["rules"][0]["backendRefs"][0]["name"] for r in routes} == {
        "llama-3-8b", "qwen-72b"}

    deployments = {d.metadata.name: d for d in
                   client.AppsV1Api(sim.api).list_namespaced_deployment("inference").items}
    qwen = deployments["qwen-72b"]
    container = qwen.spec.template.spec.containers[0]
    assert container.image == "vllm/vllm-openai:v0.11.0"
    assert container.resources.limits["nvidia.com/gpu"] == "4"
    assert container.readiness_probe.http_get.path == "/health"
    assert qwen.spec.replicas == 2 and deployments["llama-3-8b"].spec.replicas == 4
    assert qwen.spec.template.metadata.annotations["sim.gpuops.io/load-seconds"] == "180"
    pdbs = client.PolicyV1Api(sim.api).list_namespaced_pod_disruption_budget("inference").items
    assert {p.metadata.name for p in pdbs} == {"llama-3-8b", "qwen-72b"}
    jobs = client.BatchV1Api(sim.api).list_namespaced_job("training").items
    assert len(jobs) == 2
    assert all(j.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"
               for j in jobs)

    classes = {pc.metadata.name: pc.value for pc in
               client.SchedulingV1Api(sim.api).list_priority_class().items}
    assert classes == {"inference-critical": 1000, "training-batch": 100,
                       "gpuops-placeholder": -10}
    namespaces = client.CoreV1Api(sim.api).list_namespace().items
    assert {ns.metadata.name: ns.status.phase for ns in namespaces} == {
        "default": "Active", "kube-system": "Active", "inference": "Active",
        "training": "Active", "kube-node-lease": "Active"}  # the kubelets' leases


def test_empty_scenario_has_only_the_default_namespace(sim):
    v1 = client.CoreV1Api(sim.api)
    assert [ns.metadata.name for ns in v1.list_namespace().items] == ["default"]
    assert v1.list_node().items == []


BAD_POOL = textwrap.dedent("""\
    cluster: {name: broken}
    namespaces: [default, serving]
    pools:
      - name: good
        instanceType: m6i.4xlarge
        cpu: 16
        memory: 64Gi
        maxSize: 2
        desiredSize: 1
      - name: bad
        instanceType: p5.48xlarge
        gpuProduct: NVIDIA-H100-80GB-HBM3
        gpusPerNode: -1
        cpu: 192
        memory: 2048Gi
        maxSize: 2
        desiredSize: 1
        colour: blue
    """)


def test_a_bad_scenario_file_fails_at_start_naming_each_field_and_its_line(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_POOL)
    sim = SimClusterThread(SimConfig(scenario=str(path)), tmp_path / "kubeconfig")
    try:
        with pytest.raises(ValueError) as err:
            sim.start()
    finally:
        sim.stop()
    message = str(err.value)
    assert "line 13: pools[1].gpusPerNode: Input should be greater than or equal to 0 " \
           "(got -1)" in message
    assert "line 18: pools[1].colour: Extra inputs are not permitted" in message
    assert "nothing was created" in message


def test_a_scenario_with_a_yaml_syntax_error_reports_its_line(sim):
    code, message = admin_error(sim, "scenario", {"yaml": "namespaces: [a, b\npools: []\n"})
    assert code == 422
    assert "line 2" in message and "not valid YAML" in message


def test_an_unknown_kind_refuses_the_whole_scenario_and_creates_nothing(sim):
    text = textwrap.dedent("""\
        namespaces: [default, serving]
        priorityClasses:
          - {name: high, value: 1000}
        pools:
          - {name: cpu, instanceType: m6i.4xlarge, cpu: 16, memory: 64Gi, maxSize: 3,
             desiredSize: 2}
        objects:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: settings, namespace: serving}
          - apiVersion: example.com/v1
            kind: Widget
            metadata: {name: w, namespace: serving}
        """)
    code, message = admin_error(sim, "scenario", {"yaml": text})
    assert code == 422
    assert 'line 12: objects[1].kind: no matches for kind "Widget" in version ' \
           '"example.com/v1"' in message
    assert_nothing_was_created(sim)


def test_an_object_admission_rejects_rolls_back_everything_created_before_it(sim):
    text = textwrap.dedent("""\
        namespaces: [default, serving]
        priorityClasses:
          - {name: high, value: 1000}
        pools:
          - {name: cpu, instanceType: m6i.4xlarge, cpu: 16, memory: 64Gi, maxSize: 3,
             desiredSize: 2}
        objects:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: settings, namespace: serving}
          - apiVersion: apps/v1
            kind: Deployment
            metadata: {name: web, namespace: serving}
            spec:
              selector: {matchLabels: {app: web}}
              template:
                metadata: {labels: {app: other}}
                spec:
                  containers: [{name: web, image: nginx:1.27}]
        """)
    code, message = admin_error(sim, "scenario", {"yaml": text})
    assert code == 422
    assert "line 11: objects[1]:" in message and "does not match template" in message
    assert_nothing_was_created(sim)


def assert_nothing_was_created(sim) -> None:
    v1 = client.CoreV1Api(sim.api)
    assert [ns.metadata.name for ns in v1.list_namespace().items] == ["default"]
    assert v1.list_node().items == []
    assert client.SchedulingV1Api(sim.api).list_priority_class().items == []
    assert v1.list_config_map_for_all_namespaces().items == []


def test_a_scenario_loaded_into_a_running_cluster_adds_its_pool_and_objects(sim):
    text = textwrap.dedent("""\
        namespaces: [serving]
        pools:
          - {name: l4, instanceType: g6.12xlarge, gpuProduct: NVIDIA-L4, gpusPerNode: 4,
             cpu: 48, memory: 192Gi, maxSize: 4, desiredSize: 2}
        objects:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {name: settings, namespace: serving}
            data: {mode: fast}
        """)
    summary = sim.admin("scenario", {"yaml": text})
    assert summary["nodes"] == 2 and summary["objects"] == 1
    pools = nodes_by_pool(sim.api)
    assert [n.status.allocatable["nvidia.com/gpu"] for n in pools["l4"]] == ["4", "4"]
    v1 = client.CoreV1Api(sim.api)
    assert v1.read_namespaced_config_map("settings", "serving").data == {"mode": "fast"}
    code, message = admin_error(sim, "scenario", {"yaml": text})
    assert code == 422 and "pool 'l4' already exists" in message


def test_an_unknown_scenario_name_lists_the_shipped_ones(sim):
    code, message = admin_error(sim, "scenario", {"name": "no-such-scenario"})
    assert code == 422
    assert "default" in message and "empty" in message


def test_default_scenario_nodes_spread_over_the_pools_zones(sim_factory):
    sim = sim_factory("default")
    zones = Counter(n.metadata.labels["topology.kubernetes.io/zone"]
                    for n in nodes_by_pool(sim.api)["l4"])
    assert zones == Counter({"us-east-1a": 2, "us-east-1b": 1, "us-east-1c": 1})
