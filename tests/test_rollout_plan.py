"""The rollout's pure planning: parameters, the new version derived from the old objects, room
for it on free GPUs, the record kept on the route. Plain data in, plain data out."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from gpuops.common.annotations import ROLLOUT, ROLLOUT_BASE, ROLLOUT_LAST, ROLLOUT_RUN
from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.capacity import (
    capacity_stages,
    capacity_weight,
    choose_mode,
    room_for,
)
from gpuops.tasks.rollout.derive import derive, served_model
from gpuops.tasks.rollout.objects import parse_pool, parse_route
from gpuops.tasks.rollout.params import VersionChange, parse_spec
from gpuops.tasks.rollout.state import (
    RolloutRecord,
    ended_annotations,
    read_record,
    record_annotations,
)
from gpuops.tasks.rollout.weights import annotation_patch, remove_backend_patch

LABELS = {"app": "llama", "app.kubernetes.io/name": "vllm"}
POOL = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "llama", "namespace": "inference", "labels": {"team": "ml"},
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                                     "sim.gpuops.io/model": "llama"}},
        "spec": {"selector": {"matchLabels": {"app": "llama"}},
                 "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": "llama-epp", "port": {"number": 9002}}}}
DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "llama", "namespace": "inference", "labels": dict(LABELS)},
    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "llama"}},
             "template": {"metadata": {"labels": dict(LABELS)}, "spec": {
                 "nodeSelector": {"gpu": "l4"},
                 "containers": [
                     {"name": "proxy", "image": "envoy:1"},
                     {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                      "args": ["--model", "meta-llama/Llama-3.1-8B", "--port", "8000",
                               "--max-num-seqs", "256"],
                      "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                          "name": "hf", "key": "token"}}}],
                      "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}
EPP_SERVICE = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "llama-epp", "namespace": "inference"},
               "spec": {"selector": {"app": "llama-epp"}, "clusterIP": "10.0.0.7",
                        "ports": [{"port": 9002, "targetPort": 9002}]}}
EPP = {"apiVersion": "apps/v1", "kind": "Deployment",
       "metadata": {"name": "llama-epp", "namespace": "inference"},
       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llama-epp"}},
                "template": {"metadata": {"labels": {"app": "llama-epp"}}, "spec": {
                    "containers": [{"name": "epp", "image": "epp:v1",
                                    "args": ["--pool-name", "llama", "--grpc-port", "9002"]}]}}}}


def derived(change: VersionChange, **kw):
    objs = {"pool_obj": copy.deepcopy(POOL), "deployment": copy.deepcopy(DEPLOYMENT),
            "epp_service": copy.deepcopy(EPP_SERVICE), "epp_deployment": copy.deepcopy(EPP)}
    objs.update(kw)
    return derive(pool=parse_pool(objs["pool_obj"]), change=change, run_id="run-1", **objs)


def test_the_new_version_gets_its_own_labels_pool_and_picker_and_keeps_the_rest():
    new = derived(VersionChange(image="vllm/vllm-openai:v0.12.0", args=("--max-num-seqs=512",)))
    name = new.pool_name
    assert name.startswith("llama-") and len(name) == len("llama-") + 6
    template = new.deployment["spec"]["template"]
    # The old pool's and the old Deployment's selectors do not select the new pods.
    assert template["metadata"]["labels"] == {"app": name, "app.kubernetes.io/name": "vllm"}
    assert new.deployment["spec"]["selector"] == {"matchLabels": {"app": name}}
    assert new.pool["spec"]["selector"]["matchLabels"] == {"app": name}
    vllm = template["spec"]["containers"][1]
    assert vllm["image"] == "vllm/vllm-openai:v0.12.0"
    assert vllm["args"] == ["--model", "meta-llama/Llama-3.1-8B", "--port", "8000",
                            "--max-num-seqs", "512"]  # set where it was, in its form
    assert vllm["env"] == DEPLOYMENT["spec"]["template"]["spec"]["containers"][1]["env"]
    assert template["spec"]["nodeSelector"] == {"gpu": "l4"}
    assert (new.replicas, new.gpus_per_replica) == (3, 2)
    meta = new.pool["metadata"]
    assert meta["labels"] == {"team": "ml", ROLLOUT_BASE: "llama"}
    assert meta["annotations"] == {"sim.gpuops.io/model": "llama", ROLLOUT_RUN: "run-1"}
    assert new.pool["spec"]["endpointPickerRef"] == {"name": f"{name}-epp",
                                                     "port": {"number": 9002}}
    assert new.epp_service is not None and new.epp_deployment is not None
    assert "clusterIP" not in new.epp_service["spec"]
    assert new.epp_service["spec"]["selector"] == {"app": f"{name}-epp"}
    epp = new.epp_deployment["spec"]["template"]["spec"]["containers"][0]
    assert epp["args"] == ["--pool-name", name, "--grpc-port", "9002"]
    assert EPP["spec"]["template"]["spec"]["containers"][0]["args"][1] == "llama"  # not mutated


def test_a_new_model_keeps_the_served_model_name_clients_ask_for():
    new = derived(VersionChange(model="meta-llama/Llama-3.1-8B-Instruct-v2"))
    args = new.deployment["spec"]["template"]["spec"]["containers"][1]["args"]
    assert args[:2] == ["--model", "meta-llama/Llama-3.1-8B-Instruct-v2"]
    assert served_model(new.version) == "meta-llama/Llama-3.1-8B" == served_model(
        new.old_version)


def test_a_rollout_of_a_rollout_keeps_short_names_and_the_same_version_is_refused():
    first = derived(VersionChange(image="vllm/vllm-openai:v0.12.0"))
    second = derived(VersionChange(image="vllm/vllm-openai:v0.13.0"),
                     pool_obj=first.pool, deployment=first.deployment)
    assert second.pool_name.count("-") == 1 and second.pool_name != first.pool_name
    with pytest.raises(ConfigError) as err:
        derived(VersionChange(image="vllm/vllm-openai:v0.11.0"))
    assert err.value.field == "image" and "the one serving now" in str(err.value)


def test_a_picker_the_rollout_cannot_copy_is_refused_naming_the_pool():
    with pytest.raises(ConfigError) as err:
        derived(VersionChange(image="x:1"), epp_service=None, epp_deployment=None)
    assert err.value.field == "pool" and "endpoint picker" in str(err.value)


@pytest.mark.parametrize(("params", "field"), [
    ({"pool": "Inference/llama"}, "pool"),
    ({"steps": [0, 100]}, "steps[0]"),
    ({"steps": [5, 5, 100]}, "steps[1]"),
    ({"steps": [True, 100]}, "steps[0]"),
    ({"args": ["--model=x"]}, "args[0]"),
    ({"args": ["--a=1", "--a=2"]}, "args[1]"),
    ({"window_s": 60, "step_timeout_s": 30}, "step_timeout_s"),
    ({"mode": "canary"}, "mode"),
    ({"approve": "always"}, "approve"),
    ({"min_requests": 0}, "min_requests"),
    ({"gates": [{"metric": "ttft_p90"}]}, "gates[0]"),
])
def test_bad_parameters_name_their_field(params, field):
    with pytest.raises(ConfigError) as err:
        parse_spec(**{"pool": "inference/llama", "image": "vllm/vllm-openai:v0.12.0", **params})
    assert err.value.field == field


def _node(name: str, gpus: int, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(node: str, gpus: int, phase: str = "Running") -> dict:
    return {"metadata": {"name": f"p-{node}-{gpus}"},
            "spec": {"nodeName": node, "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def test_room_counts_whole_replicas_on_nodes_the_pods_may_use():
    spec = {"nodeSelector": {"gpu": "l4"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    nodes = [_node("a", 8, gpu="l4"), _node("b", 8, gpu="l4"), _node("c", 8, gpu="h100")]
    pods = [_pod("a", 5), _pod("b", 2), _pod("b", 4, phase="Succeeded"), _pod("c", 0)]
    room = room_for(spec, 2, nodes, pods)
    assert (room.fits, room.free_gpus, room.nodes) == (1 + 3, 3 + 6, 2)
    untolerated = room_for({"nodeSelector": {"gpu": "l4"}}, 2, nodes, pods)
    assert untolerated.fits == 0
    assert choose_mode("auto", room, 4, 2, 1) == "blue-green"
    assert choose_mode("auto", room, 5, 2, 1) == "fixed-capacity"
    with pytest.raises(ConfigError) as err:
        choose_mode("blue-green", room, 5, 2, 1)
    assert err.value.field == "mode"
    with pytest.raises(ConfigError) as err:
        choose_mode("fixed-capacity", room, 1, 2, 1)  # nothing would serve meanwhile
    assert err.value.field == "mode"


def test_fixed_capacity_moves_k_replicas_at_a_time_with_weights_following_ready_replicas():
    assert capacity_stages(4, 1) == [(3, 1), (2, 2), (1, 3), (0, 4)]
    assert capacity_stages(5, 2) == [(3, 2), (1, 4), (0, 5)]
    assert [capacity_weight(o, n) for o, n in [(3, 1), (2, 2), (1, 3), (0, 4), (3, 0)]] == [
        25, 50, 75, 100, 0]


def test_the_route_record_round_trips_and_a_hand_edited_one_is_named():
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    record = RolloutRecord("run-1", "llama", "llama-1a2b3c", "llama", "llama-1a2b3c",
                           "llama-1a2b3c-epp", "1a2b3c", "blue-green", "shifting", 25, 3, now,
                           now + timedelta(hours=1), passed=True)
    annotations = {k: v for k, v in record_annotations(record).items() if v is not None}
    assert read_record(annotations, "HTTPRoute inference/llama") == record
    assert read_record({}, "HTTPRoute inference/llama") is None
    ended = ended_annotations(record, "rolled-back", now, "step 3 failed")
    assert ended[ROLLOUT] is None and ended[ROLLOUT_LAST] is not None
    assert ended[ROLLOUT_LAST].startswith("rolled-back 2026-05-01T12:00:00Z run run-1")
    for text, field in (("{", ""), ('{"phase": "flying"}', ".phase")):
        with pytest.raises(ConfigError) as err:
            read_record({ROLLOUT: text}, "HTTPRoute inference/llama")
        assert err.value.field.startswith("HTTPRoute inference/llama.metadata.annotations")
        assert err.value.field.endswith(field) or field == ""


ROUTE = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": "llama", "namespace": "inference", "resourceVersion": "7"},
         "spec": {"rules": [{"backendRefs": [
             {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "a",
              "weight": 0},
             {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "b",
              "weight": 100}]}]}}


def test_annotation_patches_are_pinned_and_a_serving_backend_is_never_removed():
    route = parse_route(ROUTE)
    assert annotation_patch(route, {ROLLOUT: "{}"}) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/metadata/annotations", "value": {ROLLOUT: "{}"}}]
    assert annotation_patch(route, {ROLLOUT: None}) == []
    a, b = (parse_pool({**POOL, "metadata": {"name": n, "namespace": "inference"}}).ref
            for n in ("a", "b"))
    assert remove_backend_patch(route, a) == [
        {"op": "test", "path": "/spec/rules/0/backendRefs/0/name", "value": "a"},
        {"op": "remove", "path": "/spec/rules/0/backendRefs/0"}]
    with pytest.raises(ConfigError):
        remove_backend_patch(route, b)
