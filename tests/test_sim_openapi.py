"""simcluster's OpenAPI documents (v3 index and per group version, v2) and server-side field
validation, through the official client. The expectations come from the client's own models
(what a field is called and typed as there), not from a copy of the documents."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuops.simcluster.apiserver.openapi import models
from tests.helpers import status_message, wait_for

pytestmark = pytest.mark.timeout(120)
NS = "default"


def call(sim, method: str, path: str, body: dict | None = None,
         accept: str = "application/json", content_type: str = "application/json"
         ) -> tuple[int, dict, dict]:
    """(status, JSON body or {}, headers) of a request sent as is: the client's own methods
    check a body against its models first, and these bodies carry fields no model has."""
    method, url, headers, data, _ = sim.api.param_serialize(
        method, path, header_params={"Accept": accept, "Content-Type": content_type},
        body=body, auth_settings=["BearerToken"])
    response = sim.api.call_api(method, url, headers, data)
    response.read()
    ctype = response.getheader("Content-Type") or ""
    return (response.status, json.loads(response.data) if "json" in ctype else {},
            dict(response.getheaders()))


def get(sim, path: str, accept: str = "application/json") -> tuple[int, dict, str]:
    """(status, JSON body or {}, Content-Type) of a GET."""
    status, body, headers = call(sim, "GET", path, accept=accept)
    return status, body, headers.get("Content-Type", "")


def v3(sim, gv: str) -> dict:
    status, index, _ = get(sim, "/openapi/v3")
    assert status == 200
    url = index["paths"][gv]["serverRelativeURL"]
    status, doc, _ = get(sim, url)
    assert status == 200
    return doc


def schema_of(doc: dict, group: str, version: str, kind: str) -> dict:
    schemas = doc["components"]["schemas"]
    found = [s for s in schemas.values() if {"group": group, "version": version, "kind": kind}
             in s.get("x-kubernetes-group-version-kind", [])]
    assert len(found) == 1, f"{kind}: {len(found)} schemas"
    return found[0]


def resolve(doc: dict, schema: dict) -> dict:
    ref = schema.get("$ref") or next(s["$ref"] for s in schema.get("allOf", []))
    return doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def runbook_crd(schema: dict) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "runbooks.gpuops.io"},
            "spec": {"group": "gpuops.io", "scope": "Namespaced",
                     "names": {"plural": "runbooks", "singular": "runbook", "kind": "Runbook"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}}]}}


RUNBOOK_SCHEMA = {"type": "object", "properties": {"spec": {
    "type": "object", "properties": {"steps": {"type": "array", "items": {"type": "string"}},
                                     "approval": {"type": "boolean"}}}}}


# --- documents ---------------------------------------------------------------------------------

def test_the_v3_index_links_every_group_version_to_its_document(sim):
    _, index, _ = get(sim, "/openapi/v3")
    assert {"api/v1", "apis/apps/v1", "apis/batch/v1", "apis/policy/v1"} <= set(index["paths"])
    for gv, link in index["paths"].items():
        assert link["serverRelativeURL"].startswith(f"/openapi/v3/{gv}?hash=")
    doc = v3(sim, "apis/apps/v1")
    assert doc["openapi"].startswith("3.")
    # Every served kind has its schema, tagged with its group, version and kind.
    for kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        schema_of(doc, "apps", "v1", kind)


def test_a_pod_schema_has_the_clients_fields_and_the_strategic_merge_extensions(sim):
    doc = v3(sim, "api/v1")
    pod = schema_of(doc, "", "v1", "Pod")
    assert set(pod["properties"]) == set(client.V1Pod.attribute_map.values())
    spec = resolve(doc, pod["properties"]["spec"])
    assert set(spec["properties"]) == set(client.V1PodSpec.attribute_map.values())
    assert "containers" in spec["required"]
    containers = spec["properties"]["containers"]
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-list-type"] == "map"
    container = resolve(doc, containers["items"])
    assert container["properties"]["image"]["type"] == "string"
    assert container["properties"]["ports"]["x-kubernetes-patch-merge-key"] == "containerPort"
    # A merge key only where the items have that field: a node's addresses merge by type,
    # an Endpoints subset's (no type field) are replaced whole, as kubectl then computes.
    node_status = resolve(doc, schema_of(doc, "", "v1", "Node")["properties"]["status"])
    assert node_status["properties"]["addresses"]["x-kubernetes-patch-merge-key"] == "type"
    endpoints = models.definitions(models.model_class("", "v1", "Endpoints"))
    assert "x-kubernetes-patch-merge-key" not in endpoints["v1.EndpointSubset"][
        "properties"]["addresses"]
    # The PATCH of pods says the server validates fields, which is what kubectl looks for.
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1",
                                                        "kind": "Pod"}
    assert {"fieldValidation", "dryRun", "fieldManager"} <= {
        p["name"] for p in patch["parameters"] if p["in"] == "query"}


def test_a_crds_schema_is_served_from_the_crd_object_and_follows_its_changes(sim):
    ext = client.ApiextensionsV1Api(sim.api)
    ext.create_custom_resource_definition(runbook_crd(RUNBOOK_SCHEMA))
    wait_for(lambda: "apis/gpuops.io/v1" in get(sim, "/openapi/v3")[1]["paths"], timeout=10,
             message="the CRD's group in the v3 index")
    runbook = schema_of(v3(sim, "apis/gpuops.io/v1"), "gpuops.io", "v1", "Runbook")
    assert set(runbook["properties"]["spec"]["properties"]) == {"steps", "approval"}
    before = get(sim, "/openapi/v3")[1]["paths"]["apis/gpuops.io/v1"]["serverRelativeURL"]

    changed = json.loads(json.dumps(RUNBOOK_SCHEMA))
    changed["properties"]["spec"]["properties"]["owner"] = {"type": "string"}
    crd = ext.read_custom_resource_definition("runbooks.gpuops.io")
    crd.spec.versions[0].schema.open_apiv3_schema = changed
    ext.replace_custom_resource_definition("runbooks.gpuops.io", crd)
    after = get(sim, "/openapi/v3")[1]["paths"]["apis/gpuops.io/v1"]["serverRelativeURL"]
    assert after != before  # a new hash: a client's cached copy is stale
    runbook = schema_of(v3(sim, "apis/gpuops.io/v1"), "gpuops.io", "v1", "Runbook")
    assert "owner" in runbook["properties"]["spec"]["properties"]


def test_openapi_v2_is_served_as_json_or_as_the_protobuf_client_go_asks_for(sim):
    status, doc, ctype = get(sim, "/openapi/v2")
    assert status == 200 and ctype.startswith("application/json")
    assert doc["swagger"] == "2.0"
    deployments = [d for d in doc["definitions"].values() if {
        "group": "apps", "version": "v1", "kind": "Deployment"} in d.get(
        "x-kubernetes-group-version-kind", [])]
    assert len(deployments) == 1
    assert deployments[0]["properties"]["spec"]["$ref"].startswith("#/definitions/")
    # (kubectl reading the protobuf is tested in test_sim_kubectl_openapi)
    status, _, ctype = get(sim, "/openapi/v2",
                           accept="application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
    assert status == 200
    assert ctype == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    status, _, _ = get(sim, "/openapi/v2", accept="application/xml")
    assert status == 406


# --- field validation --------------------------------------------------------------------------

def bad_pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "app", "image": "ghcr.io/acme/api:1.4.2", "imagePullPolicyy": "Always"}]}}


PODS = f"/api/v1/namespaces/{NS}/pods"


def test_strict_field_validation_refuses_an_unknown_field_with_kubes_message(sim):
    core = client.CoreV1Api(sim.api)
    status, body, _ = call(sim, "POST", f"{PODS}?fieldValidation=Strict", bad_pod("p"))
    assert status == 400
    assert body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field '
        '"spec.containers[0].imagePullPolicyy"')
    assert core.list_namespaced_pod(NS).items == []

    core.create_namespaced_pod(NS, {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "app", "image": "ghcr.io/acme/api:1.4.2"}]}}, field_validation="Strict")
    status, body, _ = call(sim, "PATCH", f"{PODS}/p?fieldValidation=Strict",
                           {"metadata": {"labelz": {"a": "b"}}},
                           content_type="application/strategic-merge-patch+json")
    assert status == 400
    assert body["message"] == 'strict decoding error: unknown field "metadata.labelz"'


def test_warn_answers_a_warning_per_unknown_field_and_drops_them(sim):
    core = client.CoreV1Api(sim.api)
    status, _, headers = call(sim, "POST", f"{PODS}?fieldValidation=Warn", bad_pod("p"))
    assert status == 201
    assert headers["Warning"] == '299 - "unknown field \\"spec.containers[0].imagePullPolicyy\\""'
    stored = sim.api.sanitize_for_serialization(core.read_namespaced_pod("p", NS))
    assert "imagePullPolicyy" not in stored["spec"]["containers"][0]
    # Without fieldValidation the server warns too (kube's default).
    status, _, headers = call(sim, "POST", PODS, bad_pod("q"))
    assert status == 201 and "unknown field" in headers["Warning"]


def test_a_custom_resource_is_validated_against_its_crds_schema(sim):
    client.ApiextensionsV1Api(sim.api).create_custom_resource_definition(
        runbook_crd(RUNBOOK_SCHEMA))
    custom = client.CustomObjectsApi(sim.api)
    wait_for(lambda: custom.list_namespaced_custom_object("gpuops.io", "v1", NS, "runbooks")
             is not None, timeout=10, message="runbooks served")
    body = {"apiVersion": "gpuops.io/v1", "kind": "Runbook", "metadata": {"name": "r"},
            "spec": {"steps": ["drain"], "aproval": True}}
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object("gpuops.io", "v1", NS, "runbooks", body,
                                               field_validation="Strict")
    assert err.value.status == 400
    assert status_message(err.value).endswith(
        'strict decoding error: unknown field "spec.aproval"')
    body["spec"] = {"steps": ["drain"], "approval": True}
    made = custom.create_namespaced_custom_object("gpuops.io", "v1", NS, "runbooks", body,
                                                  field_validation="Strict")
    assert made["spec"] == {"steps": ["drain"], "approval": True}


def test_an_unknown_field_validation_value_is_refused_with_kubes_message(sim):
    core = client.CoreV1Api(sim.api)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}},
                                          field_validation="Loose")
    assert err.value.status == 422
    assert status_message(err.value) == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: '
        '"Loose": supported values: "", "Ignore", "Strict", "Warn"')
