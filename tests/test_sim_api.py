"""The Kubernetes API as the official client sees it: every verb, selector and watch rule.

Tests marked `real_cluster` use only the Kubernetes API, so they also run against a real
cluster given by KUBECONFIG_REAL; the others use simcluster's admin endpoints for faults.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from tests.helpers import status_message, wait_for

pytestmark = pytest.mark.timeout(120)


def pod_body(name: str, labels: dict | None = None, image: str = "busybox:1.36") -> dict:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": image}]}}


@pytest.fixture
def ns(kube):
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(kube).delete_namespace(name)  # matters on a real cluster


@pytest.mark.real_cluster
def test_discovery_serves_core_apps_and_inference_groups(kube):
    groups = {g.name for g in client.ApisApi(kube).get_api_versions().groups}
    assert {"apps", "batch", "policy", "scheduling.k8s.io", "events.k8s.io"} <= groups
    core = {r.name for r in client.CoreV1Api(kube).get_api_resources().resources}
    assert {"pods", "pods/log", "pods/eviction", "pods/binding", "nodes", "events"} <= core
    dynamic = DynamicClient(kube)
    pool = dynamic.resources.get(api_version="inference.networking.k8s.io/v1",
                                 kind="InferencePool")
    assert pool.namespaced
    route = dynamic.resources.get(api_version="gateway.networking.k8s.io/v1", kind="HTTPRoute")
    assert route.name == "httproutes"


@pytest.mark.real_cluster
def test_create_sets_identity_and_a_second_create_is_409_already_exists(kube, ns):
    v1 = client.CoreV1Api(kube)
    pod = v1.create_namespaced_pod(ns, pod_body("a"))
    assert pod.metadata.uid and pod.metadata.creation_timestamp
    assert pod.metadata.namespace == ns and pod.status.phase == "Pending"
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(ns, pod_body("a"))
    assert err.value.status == 409
    assert '"a" already exists' in status_message(err.value)


@pytest.mark.real_cluster
def test_invalid_pod_is_422_naming_the_field(kube, ns):
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(kube).create_namespaced_pod(
            ns, {"metadata": {"name": "bad"}, "spec": {"containers": [{"name": "c"}]}})
    assert err.value.status == 422
    assert "spec.containers[0].image" in status_message(err.value)


def test_get_missing_object_is_a_404_status(kube, ns):
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(kube).read_namespaced_pod("nope", ns)
    assert err.value.status == 404
    assert json.loads(err.value.body)["kind"] == "Status"
    assert 'pods "nope" not found' in status_message(err.value)


@pytest.mark.real_cluster
def test_resource_versions_increase_and_stale_put_is_409_conflict(kube, ns):
    v1 = client.CoreV1Api(kube)
    cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"k": "1"}})
    first = int(cm.metadata.resource_version)
    cm.data = {"k": "2"}
    updated = v1.replace_namespaced_config_map("c", ns, cm)
    assert int(updated.metadata.resource_version) > first
    cm.data = {"k": "3"}  # still carries the first resourceVersion
    with pytest.raises(ApiException) as err:
        v1.replace_namespaced_config_map("c", ns, cm)
    assert err.value.status == 409
    assert "the object has been modified" in status_message(err.value)


@pytest.mark.real_cluster
def test_list_paginates_with_limit_and_continue(kube, ns):
    v1 = client.CoreV1Api(kube)
    for i in range(7):
        v1.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}"}})
    names, token, pages = [], None, 0
    while True:
        page = v1.list_namespaced_config_map(ns, limit=3, _continue=token)
        names += [c.metadata.name for c in page.items if c.metadata.name.startswith("cm-")]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert sorted(names) == [f"cm-{i}" for i in range(7)]
    assert pages >= 3


@pytest.mark.real_cluster
@pytest.mark.parametrize("selector, expected", [
    ("app=web", {"a", "b"}), ("app==web", {"a", "b"}), ("app!=web", {"c", "d"}),
    ("tier in (gpu,cpu)", {"a", "c"}), ("tier notin (gpu)", {"b", "c", "d"}),
    ("tier", {"a", "c"}), ("!tier", {"b", "d"}), ("app=web,tier=gpu", {"a"}),
])
def test_label_selectors(kube, ns, selector, expected):
    v1 = client.CoreV1Api(kube)
    for name, labels in {"a": {"app": "web", "tier": "gpu"}, "b": {"app": "web"},
                         "c": {"app": "db", "tier": "cpu"}, "d": {}}.items():
        v1.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    found = {c.metadata.name for c in v1.list_namespaced_config_map(
        ns, label_selector=selector).items}
    assert found - {"kube-root-ca.crt"} == expected


@pytest.mark.real_cluster
def test_field_selectors_on_pods_and_events(kube, ns):
    v1 = client.CoreV1Api(kube)
    v1.create_namespaced_pod(ns, pod_body("p1"))
    v1.create_namespaced_pod(ns, pod_body("p2"))
    names = {p.metadata.name for p in v1.list_namespaced_pod(
        ns, field_selector="metadata.name=p2").items}
    assert names == {"p2"}
    names = {p.metadata.name for p in v1.list_namespaced_pod(
        ns, field_selector="metadata.name!=p2").items}
    assert names == {"p1"}
    unbound = v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName=,metadata.namespace={ns}")
    assert len(unbound.items) == 2
    v1.create_namespaced_event(ns, {"metadata": {"name": "e1"},
                                    "involvedObject": {"kind": "Pod", "name": "p1",
                                                       "namespace": ns},
                                    "reason": "Test", "message": "hello", "type": "Warning"})
    events = v1.list_namespaced_event(ns, field_selector="involvedObject.name=p1,"
                                                         "involvedObject.kind=Pod,reason=Test")
    assert [(e.reason, e.involved_object.name) for e in events.items] == [("Test", "p1")]


def test_unknown_field_selector_is_400(kube, ns):
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(kube).list_namespaced_pod(ns, field_selector="spec.bogus=x")
    assert err.value.status == 400
    assert "field label not supported: spec.bogus" in status_message(err.value)


@pytest.mark.real_cluster
def test_strategic_merge_patch_merges_containers_by_name(kube, ns):
    apps = client.AppsV1Api(kube)
    apps.create_namespaced_deployment(ns, {
        "metadata": {"name": "d"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [
                     {"name": "vllm", "image": "vllm/vllm-openai:v0.10.0",
                      "env": [{"name": "A", "value": "1"}]},
                     {"name": "sidecar", "image": "envoy:1"}]}}}})
    patched = apps.patch_namespaced_deployment("d", ns, {"spec": {"template": {"spec": {
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                        "env": [{"name": "B", "value": "2"}]}]}}}})
    containers = {c.name: c for c in patched.spec.template.spec.containers}
    assert set(containers) == {"vllm", "sidecar"}
    assert containers["vllm"].image == "vllm/vllm-openai:v0.11.0"
    assert {e.name for e in containers["vllm"].env} == {"A", "B"}
    assert patched.metadata.generation == 2


def test_strategic_merge_patch_replaces_a_nodes_taints_whole(sim):
    """NodeSpec.taints has no patch merge key: a strategic merge patch replaces the list, so
    a patch that leaves a taint out removes it (what `kubectl taint ... -` relies on)."""
    v1 = client.CoreV1Api(sim.api)
    v1.create_node({"metadata": {"name": "n1"}, "spec": {"taints": [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "gpuops.io/rebalance", "value": "run-1", "effect": "NoSchedule"}]}})
    patched = v1.patch_node("n1", {"spec": {"taints": [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}})
    assert [(t.key, t.value) for t in patched.spec.taints] == [("nvidia.com/gpu", "present")]


@pytest.mark.real_cluster
def test_merge_patch_replaces_lists_and_json_patch_edits_paths(kube, ns):
    apps = client.AppsV1Api(kube)
    apps.create_namespaced_deployment(ns, {
        "metadata": {"name": "m", "labels": {"a": "1", "b": "2"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "m"}},
                 "template": {"metadata": {"labels": {"app": "m"}}, "spec": {"containers": [
                     {"name": "one", "image": "x:1"}, {"name": "two", "image": "y:1"}]}}}})
    merged = apps.patch_namespaced_deployment(
        "m", ns, {"metadata": {"labels": {"b": None}}, "spec": {"template": {"spec": {
            "containers": [{"name": "one", "image": "x:2"}]}}}},
        _content_type="application/merge-patch+json")
    assert merged.metadata.labels == {"a": "1"}
    assert [c.name for c in merged.spec.template.spec.containers] == ["one"]
    jp = apps.patch_namespaced_deployment(
        "m", ns, [{"op": "replace", "path": "/spec/replicas", "value": 3},
                  {"op": "add", "path": "/metadata/labels/c", "value": "3"}])
    assert jp.spec.replicas == 3 and jp.metadata.labels["c"] == "3"
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_deployment(
            "m", ns, [{"op": "test", "path": "/spec/replicas", "value": 99}])
    assert err.value.status == 422


@pytest.mark.real_cluster
def test_status_subresource_is_separate_from_the_main_resource(kube, ns):
    custom = client.CustomObjectsApi(kube)
    group, version, plural = "inference.networking.k8s.io", "v1", "inferencepools"
    custom.create_namespaced_custom_object(group, version, ns, plural, {
        "apiVersion": f"{group}/{version}", "kind": "InferencePool",
        "metadata": {"name": "pool"}, "spec": {"selector": {"matchLabels": {"app": "x"}},
                                               "targetPorts": [{"number": 8000}]}})
    custom.patch_namespaced_custom_object_status(
        group, version, ns, plural, "pool", {"status": {"parents": []}},
        _content_type="application/merge-patch+json")
    ignored = custom.patch_namespaced_custom_object(
        group, version, ns, plural, "pool", {"status": {"parents": None, "x": 1}},
        _content_type="application/merge-patch+json")
    assert ignored["status"] == {"parents": []}


def test_custom_resources_reject_strategic_merge_patch_like_a_real_apiserver(kube, ns):
    custom = client.CustomObjectsApi(kube)
    custom.create_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", ns, "httproutes",
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": "r"}, "spec": {"rules": []}})
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", ns, "httproutes", "r", {"spec": {"rules": []}},
            _content_type="application/strategic-merge-patch+json")
    assert err.value.status == 415


@pytest.mark.real_cluster
def test_finalizers_hold_deletion_until_removed(kube, ns):
    v1 = client.CoreV1Api(kube)
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "f",
                                                      "finalizers": ["gpuops.io/hold"]}})
    v1.delete_namespaced_config_map("f", ns)
    held = v1.read_namespaced_config_map("f", ns)
    assert held.metadata.deletion_timestamp is not None
    v1.patch_namespaced_config_map("f", ns, {"metadata": {"finalizers": None}},
                                   _content_type="application/merge-patch+json")
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_config_map("f", ns)
    assert err.value.status == 404


@pytest.mark.real_cluster
def test_deletecollection_with_a_label_selector(kube, ns):
    v1 = client.CoreV1Api(kube)
    for i, team in enumerate(["a", "a", "b"]):
        v1.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}",
                                                          "labels": {"team": team}}})
    v1.delete_collection_namespaced_config_map(ns, label_selector="team=a")
    left = {c.metadata.name for c in v1.list_namespaced_config_map(ns, label_selector="team").items}
    assert left == {"c2"}


@pytest.mark.real_cluster
def test_watch_from_a_resource_version_sees_added_modified_deleted(kube, ns):
    v1 = client.CoreV1Api(kube)
    start = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "w"}, "data": {"k": "1"}})
    v1.patch_namespaced_config_map("w", ns, {"data": {"k": "2"}})
    v1.delete_namespaced_config_map("w", ns)
    seen = []
    for event in watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                      resource_version=start, timeout_seconds=2):
        if event["object"].metadata.name == "w":
            seen.append(event["type"])
        if len(seen) == 3:
            break
    assert seen == ["ADDED", "MODIFIED", "DELETED"]


def test_watch_label_selector_turns_leaving_objects_into_deleted(kube, ns):
    v1 = client.CoreV1Api(kube)
    start = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "s", "labels": {"x": "1"}}})
    v1.patch_namespaced_config_map("s", ns, {"metadata": {"labels": {"x": "2"}}})
    seen = [e["type"] for e in watch.Watch().stream(
        v1.list_namespaced_config_map, ns, label_selector="x=1", resource_version=start,
        timeout_seconds=1)]
    assert seen == ["ADDED", "DELETED"]


def test_watch_sends_bookmarks_when_asked(kube, ns):
    v1 = client.CoreV1Api(kube)
    rv = v1.list_namespaced_config_map(ns).metadata.resource_version
    resp = v1.list_namespaced_config_map(ns, watch=True, resource_version=rv,
                                         allow_watch_bookmarks=True, timeout_seconds=6,
                                         _preload_content=False)
    lines = [line for line in resp.read().decode().splitlines() if line]
    assert any('"BOOKMARK"' in line for line in lines)


def test_watch_timeout_seconds_ends_the_stream(kube, ns):
    started = time.monotonic()
    events = list(watch.Watch().stream(client.CoreV1Api(kube).list_namespaced_config_map, ns,
                                       resource_version=None, timeout_seconds=1))
    assert time.monotonic() - started < 5
    assert all(e["type"] == "ADDED" for e in events)


def test_a_resource_version_older_than_the_history_window_is_410_and_relist_recovers(sim, ns):
    v1 = client.CoreV1Api(sim.api)
    old_rv = v1.list_namespaced_config_map(ns).metadata.resource_version
    sim.admin("history", {"window": 5})
    for i in range(20):
        v1.create_namespaced_config_map(ns, {"metadata": {"name": f"h{i}"}})
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, ns,
                                      resource_version=old_rv, timeout_seconds=2):
            pass
    assert err.value.status == 410
    # The relist path: list again, watch from the fresh resourceVersion.
    fresh = v1.list_namespaced_config_map(ns)
    assert len(fresh.items) >= 20
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "after"}})
    names = [e["object"].metadata.name for e in watch.Watch().stream(
        v1.list_namespaced_config_map, ns, resource_version=fresh.metadata.resource_version,
        timeout_seconds=1)]
    assert names == ["after"]


def test_forced_410_and_dropped_watches(sim, ns):
    v1 = client.CoreV1Api(sim.api)
    rv = v1.list_namespaced_config_map(ns).metadata.resource_version
    ended = threading.Event()

    def consume() -> None:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=rv,
                                      timeout_seconds=60, _request_timeout=70):
            pass
        ended.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    time.sleep(0.3)
    assert sim.fault("drop-watches")["dropped"] >= 1
    assert ended.wait(10), "a dropped watch must end the client's stream"
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "later"}})
    sim.fault("force-410")
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=rv,
                                      timeout_seconds=2):
            pass
    assert err.value.status == 410


def test_injected_429_is_retried_by_the_client_after_retry_after(sim, ns):
    v1 = client.CoreV1Api(sim.api)
    sim.fault("api-429", count=1, retry_after=1, path=f"/api/v1/namespaces/{ns}/configmaps")
    started = time.monotonic()
    assert v1.list_namespaced_config_map(ns).items == []
    assert time.monotonic() - started >= 1.0  # urllib3 honoured Retry-After


def test_persistent_429_reaches_the_caller_with_retry_after(sim, ns):
    v1 = client.CoreV1Api(sim.api)
    sim.fault("api-429", count=10, retry_after=0, path=f"/api/v1/namespaces/{ns}/configmaps")
    with pytest.raises(ApiException) as err:
        v1.list_namespaced_config_map(ns)
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "0"
    assert json.loads(err.value.body)["reason"] == "TooManyRequests"


def test_injected_500s_then_recovery(sim, ns):
    v1 = client.CoreV1Api(sim.api)
    sim.fault("api-500", count=2, path=f"/api/v1/namespaces/{ns}/*", method="POST")
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_config_map(ns, {"metadata": {"name": "x"}})
        assert err.value.status == 500
    assert v1.create_namespaced_config_map(ns, {"metadata": {"name": "x"}}).metadata.uid


def test_injected_latency_slows_requests(sim, ns):
    v1 = client.CoreV1Api(sim.api)
    sim.fault("api-latency", seconds=0.3)
    started = time.monotonic()
    v1.list_namespaced_config_map(ns)
    assert time.monotonic() - started >= 0.3
    sim.fault("api-clear")


def test_unknown_fault_kind_is_rejected_with_the_known_kinds(sim):
    import urllib.error
    with pytest.raises(urllib.error.HTTPError) as err:
        sim.fault("meteor-strike")
    body = err.value.read().decode()
    assert "unknown fault kind 'meteor-strike'" in body and "force-410" in body


@pytest.mark.real_cluster
def test_binding_assigns_a_node_once(kube, ns):
    v1 = client.CoreV1Api(kube)
    v1.create_namespaced_pod(ns, {**pod_body("b"), "spec": {
        "schedulerName": "nobody", "containers": [{"name": "main", "image": "busybox:1.36"}]}})
    v1.create_namespaced_binding(ns, {"metadata": {"name": "b"},
                                      "target": {"kind": "Node", "name": "node-x"}},
                                 _preload_content=False)
    assert v1.read_namespaced_pod("b", ns).spec.node_name == "node-x"
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod_binding("b", ns, {"metadata": {"name": "b"},
                                                   "target": {"name": "node-y"}},
                                         _preload_content=False)
    assert err.value.status == 409


def test_custom_resource_definitions_register_new_types(kube):
    ext = client.ApiextensionsV1Api(kube)
    ext.create_custom_resource_definition({
        "metadata": {"name": "runbooks.gpuops.io"},
        "spec": {"group": "gpuops.io", "scope": "Namespaced",
                 "names": {"plural": "runbooks", "singular": "runbook", "kind": "Runbook"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    custom = client.CustomObjectsApi(kube)
    wait_for(lambda: custom.list_namespaced_custom_object("gpuops.io", "v1", "default",
                                                          "runbooks") is not None)
    created = custom.create_namespaced_custom_object(
        "gpuops.io", "v1", "default", "runbooks",
        {"apiVersion": "gpuops.io/v1", "kind": "Runbook", "metadata": {"name": "r1"},
         "spec": {"steps": []}})
    assert created["metadata"]["uid"]
    assert custom.get_namespaced_custom_object("gpuops.io", "v1", "default", "runbooks",
                                               "r1")["spec"] == {"steps": []}
    resources = DynamicClient(kube).resources.get(api_version="gpuops.io/v1", kind="Runbook")
    assert resources.name == "runbooks"


# --- stored objects hold what their Go types can --------------------------------------------

def test_integers_beyond_their_go_type_are_refused_with_the_field_path(sim, ns):
    """As kube-apiserver refuses them: nothing stored can make a LIST or WATCH undecodable."""
    v1, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    body = pod_body("ports")
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 2**40}]
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(ns, body)
    assert err.value.status == 422
    assert json.loads(err.value.body)["details"]["causes"][0]["field"] == \
        "spec.containers[0].ports[0].containerPort"
    deployment = {"metadata": {"name": "big"}, "spec": {
        "replicas": 2**31, "selector": {"matchLabels": {"app": "big"}},
        "template": {"metadata": {"labels": {"app": "big"}}, "spec": pod_body("x")["spec"]}}}
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_deployment(ns, deployment, dry_run="All")
    assert err.value.status == 422 and "spec.replicas" in status_message(err.value)
    v1.create_namespaced_pod(ns, pod_body("counted"))
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_pod_status("counted", ns, {"status": {"containerStatuses": [
            {"name": "main", "image": "busybox:1.36", "imageID": "", "ready": False,
             "restartCount": 2**33}]}})
    assert err.value.status == 422
    assert "status.containerStatuses[0].restartCount" in status_message(err.value)
    assert [p.metadata.name for p in v1.list_pod_for_all_namespaces().items] == ["counted"]


def test_a_list_leaves_out_an_object_it_cannot_encode_instead_of_failing():
    """The last line behind validation on write: one odd stored object must not make every
    LIST fail."""
    from gpuops.simcluster.apiserver.codecs import list_response

    good = {"metadata": {"name": "a"}}
    odd = {"metadata": {"name": "b"}, "status": {"restartCount": 2**70}}
    response = list_response({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                              "items": [good, odd]})

    assert json.loads(response.body)["items"] == [good]


# --- fault kinds describe themselves --------------------------------------------------------

def test_every_fault_kind_lists_what_it_does_and_its_typed_parameters(sim):
    kinds = sim.admin("faults")

    assert {"crashloop", "oom", "gpu-xid", "image-pull", "node-notready", "api-429"} <= set(kinds)
    crashloop = {p["name"]: p for p in kinds["crashloop"]["params"]}
    assert crashloop["exit_code"]["value"] == "an integer from 0 to 255"
    assert crashloop["exit_code"]["default"] == 1
    assert crashloop["once"]["value"] == "true or false"
    reasons = {p["name"]: p for p in kinds["image-pull"]["params"]}["reason"]
    assert reasons["value"] == "one of NotFound, Unauthorized, Timeout"
    assert all(k["description"] and k["target"] for k in kinds.values())
