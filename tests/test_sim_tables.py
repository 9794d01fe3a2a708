"""Server-side printing over HTTP, through the official client's ApiClient with the Accept
header kubectl sends: meta.k8s.io Tables for lists, single objects and watch streams,
`includeObject`, paging, PartialObjectMetadata, and the errors for what is not served."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import status_message

pytestmark = pytest.mark.timeout(120)
NS = "default"
KUBECTL_ACCEPT = ("application/json;as=Table;v=v1;g=meta.k8s.io,"
                  "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")


def request(sim, path: str, accept: str, query: dict[str, str]) -> bytes:
    """GET with the client's own serializer and auth; an error status raises ApiException."""
    method, url, headers, _, _ = sim.api.param_serialize(
        "GET", path, query_params=list(query.items()), header_params={"Accept": accept},
        auth_settings=["BearerToken"])
    response = sim.api.call_api(method, url, headers)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=response.data.decode(),
                                         data=None)
    return response.data


def get(sim, path: str, accept: str = KUBECTL_ACCEPT, **query: str) -> dict:
    return json.loads(request(sim, path, accept, query))


def pods(sim, *names: str) -> None:
    core = client.CoreV1Api(sim.api)
    for name in names:
        core.create_namespaced_pod(NS, {
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}})


def test_a_list_asked_as_a_table_is_a_meta_v1_table_with_metadata_rows(sim):
    pods(sim, "a", "b")
    body = get(sim, f"/api/v1/namespaces/{NS}/pods")
    assert (body["kind"], body["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert body["metadata"]["resourceVersion"]
    columns = body["columnDefinitions"]
    assert [(c["name"], c["priority"]) for c in columns] == [
        ("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1),
        ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)]
    assert columns[0]["format"] == "name"
    assert [r["cells"][:3] for r in body["rows"]] == [["a", "0/1", "Pending"],
                                                     ["b", "0/1", "Pending"]]
    first = body["rows"][0]["object"]
    assert (first["kind"], first["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
    assert first["metadata"]["labels"] == {"app": "a"}
    assert "spec" not in first


def test_include_object_gives_the_whole_object_or_none(sim):
    pods(sim, "a")
    whole = get(sim, f"/api/v1/namespaces/{NS}/pods", includeObject="Object")
    assert whole["rows"][0]["object"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    bare = get(sim, f"/api/v1/namespaces/{NS}/pods", includeObject="None")
    assert bare["rows"][0]["object"] is None


def test_an_unknown_include_object_is_a_400_naming_the_supported_values(sim):
    with pytest.raises(ApiException) as e:
        get(sim, f"/api/v1/namespaces/{NS}/pods", includeObject="Everything")
    assert e.value.status == 400
    assert status_message(e.value) == (
        'Unable to convert to Table as requested: includeObject: Unsupported value: '
        '"Everything": supported values: "Metadata", "None", "Object"')


def test_one_object_asked_as_a_table_is_a_one_row_table(sim):
    pods(sim, "a")
    body = get(sim, f"/api/v1/namespaces/{NS}/pods/a")
    pod = client.CoreV1Api(sim.api).read_namespaced_pod("a", NS)
    assert body["kind"] == "Table"
    assert body["metadata"] == {"resourceVersion": pod.metadata.resource_version}
    assert [r["cells"][0] for r in body["rows"]] == ["a"]


def test_table_pages_carry_the_continue_token(sim):
    pods(sim, "a", "b", "c")
    first = get(sim, f"/api/v1/namespaces/{NS}/pods", limit="2")
    assert [r["cells"][0] for r in first["rows"]] == ["a", "b"]
    token = first["metadata"]["continue"]
    rest = get(sim, f"/api/v1/namespaces/{NS}/pods", limit="2", **{"continue": token})
    assert [r["cells"][0] for r in rest["rows"]] == ["c"]
    assert "continue" not in rest["metadata"]


def test_the_v1beta1_table_is_served_when_asked_first(sim):
    pods(sim, "a")
    body = get(sim, f"/api/v1/namespaces/{NS}/pods",
               "application/json;as=Table;v=v1beta1;g=meta.k8s.io")
    assert (body["kind"], body["apiVersion"]) == ("Table", "meta.k8s.io/v1beta1")
    assert body["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"


def test_plain_json_when_asked_or_when_the_table_is_only_a_lower_preference(sim):
    pods(sim, "a")
    assert get(sim, f"/api/v1/namespaces/{NS}/pods", "application/json")["kind"] == "PodList"
    lower = "application/json;q=0.9;as=Table;v=v1;g=meta.k8s.io,application/json"
    assert get(sim, f"/api/v1/namespaces/{NS}/pods", lower)["kind"] == "PodList"
    protobuf_first = "application/vnd.kubernetes.protobuf,application/json"
    assert get(sim, f"/api/v1/namespaces/{NS}/pods", protobuf_first)["kind"] == "PodList"


def test_asking_only_for_a_conversion_that_is_not_served_is_406(sim):
    with pytest.raises(ApiException) as e:
        get(sim, f"/api/v1/namespaces/{NS}/pods", "application/json;as=Table;v=v1;g=example.com")
    assert e.value.status == 406
    assert json.loads(e.value.body)["reason"] == "NotAcceptable"


def test_partial_object_metadata_lists_and_objects(sim):
    pods(sim, "a")
    listed = get(sim, f"/api/v1/namespaces/{NS}/pods",
                 "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io")
    assert listed["kind"] == "PartialObjectMetadataList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a"]
    one = get(sim, f"/api/v1/namespaces/{NS}/pods/a",
              "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io")
    assert (one["kind"], one["metadata"]["name"]) == ("PartialObjectMetadata", "a")
    with pytest.raises(ApiException) as e:
        get(sim, f"/api/v1/namespaces/{NS}/pods",
            "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io")
    assert e.value.status == 406


def test_a_table_watch_sends_column_definitions_with_the_first_event_only(sim):
    core = client.CoreV1Api(sim.api)
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    pods(sim, "a", "b")
    data = request(sim, f"/api/v1/namespaces/{NS}/pods", KUBECTL_ACCEPT,
                   {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "2"})
    events = [json.loads(line) for line in data.splitlines() if line.strip()]
    assert {e["object"]["kind"] for e in events} == {"Table"}
    assert [e["object"]["rows"][0]["cells"][0] for e in events if e["type"] == "ADDED"] == [
        "a", "b"]
    assert [c["name"] for c in events[0]["object"]["columnDefinitions"]][:2] == ["Name",
                                                                                 "Ready"]
    assert len(events) > 1
    assert all(e["object"]["columnDefinitions"] is None for e in events[1:])
