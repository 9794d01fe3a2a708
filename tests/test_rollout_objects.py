"""The rollout's objects, the pure part: InferencePools of both served shapes, their model
servers, the routes that name them, and the JSON patch that moves a weight split (applied here
with the `jsonpatch` library, as an API server applies it)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.objects import (
    ApiVersion,
    PoolRef,
    parse_pool,
    parse_route,
    pool_view,
    served_apis,
)
from gpuops.tasks.rollout.weights import (
    WeightSplit,
    current_split,
    parse_split,
    split_applied,
    weight_patch,
)

NS = "inference"
V1 = "inference.networking.k8s.io"
ALPHA = "inference.networking.x-k8s.io"
OLD, NEW = PoolRef(V1, NS, "llama-v1"), PoolRef(V1, NS, "llama-v2")

V1_POOL = {
    "apiVersion": f"{V1}/v1", "kind": "InferencePool",
    "metadata": {"name": "llama-v1", "namespace": NS, "uid": "u1"},
    "spec": {"selector": {"matchLabels": {"app": "llama", "version": "v1"}},
             "targetPorts": [{"number": 8000}],
             "endpointPickerRef": {"name": "llama-v1-epp", "port": {"number": 9002},
                                   "failureMode": "FailOpen"}}}
ALPHA_POOL = {
    "apiVersion": f"{ALPHA}/v1alpha2", "kind": "InferencePool",
    "metadata": {"name": "llama-v1", "namespace": NS},
    "spec": {"selector": {"app": "llama", "version": "v1"}, "targetPortNumber": 8000,
             "extensionRef": {"name": "llama-v1-epp", "portNumber": 9002}}}


def route(*backends: dict, extra_rules: tuple = ()) -> dict:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "llama", "namespace": NS, "resourceVersion": "7"},
            "spec": {"parentRefs": [{"name": "inference-gateway"}],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                "backendRefs": list(backends)}, *extra_rules]}}


def pool_ref(name: str, weight: int | None = None, group: str = V1) -> dict:
    ref = {"group": group, "kind": "InferencePool", "name": name}
    return ref if weight is None else {**ref, "weight": weight}


def apply(obj: dict, patch: list) -> dict:
    return jsonpatch.apply_patch(copy.deepcopy(obj), patch)


def weights_in(obj: dict, rule: int = 0) -> dict[str, int]:
    return {b["name"]: b.get("weight", 1) for b in obj["spec"]["rules"][rule]["backendRefs"]}


def test_both_pool_shapes_read_into_the_same_pool():
    v1, alpha = parse_pool(V1_POOL), parse_pool(ALPHA_POOL)
    for pool in (v1, alpha):
        assert pool.selector == {"app": "llama", "version": "v1"}
        assert pool.target_ports == (8000,)
        assert pool.endpoint_picker is not None
        assert (pool.endpoint_picker.name, pool.endpoint_picker.port) == ("llama-v1-epp", 9002)
        assert pool.label_selector == "app=llama,version=v1"
    assert v1.ref == PoolRef(V1, NS, "llama-v1") and alpha.ref == PoolRef(ALPHA, NS, "llama-v1")
    assert v1.endpoint_picker and v1.endpoint_picker.failure_mode == "FailOpen"


@pytest.mark.parametrize(("spec", "field"), [
    ({"targetPorts": [{"number": 8000}]}, "spec.selector"),
    ({"selector": {"matchLabels": {"app": 1}}, "targetPorts": [{"number": 8000}]},
     "spec.selector.matchLabels"),
    ({"selector": {"matchLabels": {"app": "a"}}, "targetPorts": []}, "spec.targetPorts"),
    ({"selector": {"matchLabels": {"app": "a"}}, "targetPorts": [{"number": 0}]},
     "spec.targetPorts[0].number"),
    ({"selector": {"matchLabels": {"app": "a"}}, "targetPorts": [{"number": 8000}],
      "endpointPickerRef": {"port": {"number": 9002}}}, "spec.endpointPickerRef.name"),
])
def test_a_malformed_pool_is_refused_naming_the_object_and_field(spec, field):
    with pytest.raises(ConfigError) as err:
        parse_pool({**V1_POOL, "spec": spec})
    assert err.value.field == f"InferencePool {NS}/llama-v1.{field}"


def test_served_versions_prefer_v1_and_fall_back_to_the_older_shape():
    both = served_apis({V1: ["v1"], ALPHA: ["v1alpha2"], "gateway.networking.k8s.io": ["v1"]})
    assert both.inference_pool == ApiVersion(V1, "v1") and both.leader_worker_set is None
    old = served_apis({ALPHA: ["v1alpha2"], "gateway.networking.k8s.io": ["v1beta1"],
                       "leaderworkerset.x-k8s.io": ["v1"]})
    assert old.inference_pool.api_version == f"{ALPHA}/v1alpha2"
    assert old.http_route.version == "v1beta1" and old.leader_worker_set is not None
    with pytest.raises(ConfigError, match="no InferencePool API"):
        served_apis({"gateway.networking.k8s.io": ["v1"]})


def test_a_pools_model_server_is_the_workload_whose_pods_it_selects():
    def deployment(name: str, labels: dict) -> dict:
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"replicas": 2, "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]}}},
                "status": {"readyReplicas": 1}}
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "big", "namespace": NS},
           "spec": {"replicas": 1, "leaderWorkerTemplate": {"workerTemplate": {
               "metadata": {"labels": {"app": "big"}},
               "spec": {"containers": [{"image": "vllm/vllm-openai:v0.12.0"}]}}}}}
    pod = {"metadata": {"name": "llama-v1-abc", "namespace": NS,
                        "labels": {"app": "llama", "version": "v1"}},
           "spec": {"containers": [{"image": "vllm/vllm-openai:v0.11.0"}], "nodeName": "n1"},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    view = pool_view(parse_pool(V1_POOL),
                     [deployment("llama-v1", {"app": "llama", "version": "v1", "x": "y"}),
                      deployment("llama-v1-epp", {"app": "llama-v1-epp"}), lws],
                     [pod], [parse_route(route(pool_ref("llama-v1", 100))),
                             parse_route({**route(pool_ref("other", 1)),
                                          "metadata": {"name": "other", "namespace": NS}})])
    server = view.model_server()
    assert (server.kind, server.name, server.replicas, server.ready_replicas) == (
        "Deployment", "llama-v1", 2, 1)
    assert server.images == ("vllm/vllm-openai:v0.11.0",)
    assert [p.name for p in view.pods] == ["llama-v1-abc"] and view.pods[0].ready
    assert [r.name for r in view.routes] == ["llama"]
    big = pool_view(parse_pool({**V1_POOL, "spec": {**V1_POOL["spec"], "selector": {
        "matchLabels": {"app": "big"}}}}), [lws], [], [])
    assert big.model_server().kind == "LeaderWorkerSet"
    with pytest.raises(ConfigError, match="found none") as err:
        pool_view(parse_pool(V1_POOL), [], [], []).model_server()
    assert err.value.field == "pool"


def test_the_first_step_adds_the_new_pool_beside_the_old_one():
    obj = route(pool_ref("llama-v1", 100))
    after = apply(obj, weight_patch(parse_route(obj), OLD, NEW, WeightSplit(99, 1)))
    assert weights_in(after) == {"llama-v1": 99, "llama-v2": 1}
    assert after["spec"]["rules"][0]["backendRefs"][1] == pool_ref("llama-v2", 1)
    assert split_applied(parse_route(after), OLD, NEW, WeightSplit(99, 1))


def test_a_split_moves_weights_of_every_rule_naming_the_pools_and_leaves_others_alone():
    other_rule = {"matches": [{"path": {"type": "PathPrefix", "value": "/v2"}}],
                  "backendRefs": [pool_ref("llama-v1"), pool_ref("llama-v2", 0)]}
    unrelated = {"backendRefs": [pool_ref("qwen", 100)]}
    obj = route(pool_ref("llama-v1", 95), pool_ref("llama-v2", 5),
                extra_rules=(other_rule, unrelated))
    after = apply(obj, weight_patch(parse_route(obj), OLD, NEW, WeightSplit(50, 50)))
    assert weights_in(after, 0) == weights_in(after, 1) == {"llama-v1": 50, "llama-v2": 50}
    assert after["spec"]["rules"][2] == unrelated
    assert current_split(parse_route(after), OLD, NEW) == {0: (50, 50), 1: (50, 50)}


def test_the_last_step_keeps_the_old_pool_at_weight_zero_and_annotations_ride_along():
    obj = route(pool_ref("llama-v1", 50), pool_ref("llama-v2", 50))
    patch = weight_patch(parse_route(obj), OLD, NEW, WeightSplit(0, 100),
                         annotations={"gpuops.io/rollout": '{"step": 5}'})
    after = apply(obj, patch)
    assert weights_in(after) == {"llama-v1": 0, "llama-v2": 100}
    assert after["metadata"]["annotations"] == {"gpuops.io/rollout": '{"step": 5}'}
    done = parse_route(after)
    assert weight_patch(done, OLD, NEW, WeightSplit(0, 100),
                        annotations={"gpuops.io/rollout": '{"step": 5}'}) == []
    cleared = apply(after, weight_patch(done, OLD, NEW, WeightSplit(100, 0),
                                        annotations={"gpuops.io/rollout": None}))
    assert cleared["metadata"]["annotations"] == {}
    assert weights_in(cleared) == {"llama-v1": 100, "llama-v2": 0}


def test_a_route_edited_since_it_was_read_refuses_the_patch():
    obj = route(pool_ref("llama-v1", 90), pool_ref("llama-v2", 10))
    patch = weight_patch(parse_route(obj), OLD, NEW, WeightSplit(75, 25))
    edited = copy.deepcopy(obj)
    edited["spec"]["rules"][0]["backendRefs"][1]["weight"] = 30  # someone else moved it
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(edited, patch)


def test_pools_of_the_older_api_group_are_matched_by_their_own_group():
    obj = route(pool_ref("llama-v1", 100, group=ALPHA))
    old, new = PoolRef(ALPHA, NS, "llama-v1"), PoolRef(ALPHA, NS, "llama-v2")
    after = apply(obj, weight_patch(parse_route(obj), old, new, WeightSplit(90, 10)))
    assert after["spec"]["rules"][0]["backendRefs"][1]["group"] == ALPHA
    with pytest.raises(ConfigError) as err:  # a v1 ref does not name the v1alpha2 pool
        weight_patch(parse_route(obj), OLD, NEW, WeightSplit(90, 10))
    assert err.value.field == "old_pool"


@pytest.mark.parametrize(("old", "new", "field", "words"), [
    (90, 11, "weights", "must be 100, got 90 + 11 = 101"),
    (90.0, 10, "weights.old", "integer"),
    (True, 10, "weights.old", "integer"),
    (101, -1, "weights.old", "0..100"),
    (100, 0, "weights", None),
    (50, "50", "weights.new", "integer"),
])
def test_a_split_is_two_integer_percentages_that_sum_to_100(old, new, field, words):
    if words is None:
        assert parse_split(old, new) == WeightSplit(100, 0)
        return
    with pytest.raises(ConfigError) as err:
        parse_split(old, new)
    assert err.value.field == field and words in str(err.value)


def test_a_route_that_does_not_name_the_pool_is_refused_listing_what_it_routes_to():
    obj = route(pool_ref("qwen", 100))
    with pytest.raises(ConfigError) as err:
        weight_patch(parse_route(obj), OLD, NEW, WeightSplit(90, 10))
    assert err.value.field == "old_pool" and "routes to: inference/qwen" in str(err.value)
    with pytest.raises(ConfigError) as same:
        weight_patch(parse_route(obj), OLD, OLD, WeightSplit(90, 10))
    assert same.value.field == "new_pool"


def test_a_rule_that_also_sends_traffic_elsewhere_is_refused():
    obj = route(pool_ref("llama-v1", 80), {"kind": "Service", "name": "legacy", "weight": 20})
    with pytest.raises(ConfigError) as err:
        weight_patch(parse_route(obj), OLD, NEW, WeightSplit(90, 10))
    assert err.value.field == f"HTTPRoute {NS}/llama.spec.rules[0].backendRefs[1]"
    assert "Service inference/legacy (weight 20)" in str(err.value)
    parked = route(pool_ref("llama-v1", 100), {"kind": "Service", "name": "legacy", "weight": 0})
    assert weights_in(apply(parked, weight_patch(parse_route(parked), OLD, NEW,
                                                 WeightSplit(90, 10)))) == {
        "llama-v1": 90, "legacy": 0, "llama-v2": 10}


def test_a_negative_or_fractional_route_weight_is_refused_naming_it():
    with pytest.raises(ConfigError) as err:
        parse_route(route(pool_ref("llama-v1", 100), {**pool_ref("llama-v2"), "weight": 1.5}))
    assert err.value.field == f"HTTPRoute {NS}/llama.spec.rules[0].backendRefs[1].weight"
