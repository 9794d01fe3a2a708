"""What kubectl reads from discovery besides the resources (categories, short names) and the
access and identity reviews (`kubectl auth can-i`, `auth whoami`), through the official
client: simcluster has no RBAC, so every review allows and says why."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuops.simcluster.apiserver.access import from_protobuf
from gpuops.simcluster.core.errors import ApiError
from tests.helpers import status_message

pytestmark = pytest.mark.timeout(120)


def resources(sim, group_version: str) -> dict[str, client.V1APIResource]:
    """A group version's discovery document, read into the client's own model."""
    path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    method, url, headers, _, _ = sim.api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"])
    response = sim.api.call_api(method, url, headers)
    response.read()
    found = sim.api.deserialize(response.data.decode(), "V1APIResourceList",
                                "application/json")
    return {r.name: r for r in found.resources}


def test_discovery_puts_the_workloads_in_the_all_category(sim):
    core = resources(sim, "v1")
    apps = resources(sim, "apps/v1")
    batch = resources(sim, "batch/v1")
    in_all = {name for group in (core, apps, batch) for name, r in group.items()
              if "all" in (r.categories or [])}
    assert in_all == {"pods", "services", "deployments", "replicasets", "statefulsets",
                      "daemonsets", "jobs"}
    gateway = resources(sim, "gateway.networking.k8s.io/v1")
    assert gateway["httproutes"].categories == ["gateway-api"]
    assert gateway["gateways"].short_names == ["gtw"]


def test_discovery_lists_the_short_names_kube_apiserver_gives(sim):
    short = {(gv, name): r.short_names
             for gv in ("v1", "apps/v1", "policy/v1", "scheduling.k8s.io/v1",
                        "apiextensions.k8s.io/v1")
             for name, r in resources(sim, gv).items() if r.short_names}
    assert short == {
        ("v1", "pods"): ["po"], ("v1", "nodes"): ["no"], ("v1", "namespaces"): ["ns"],
        ("v1", "events"): ["ev"], ("v1", "services"): ["svc"], ("v1", "configmaps"): ["cm"],
        ("v1", "serviceaccounts"): ["sa"], ("v1", "replicationcontrollers"): ["rc"],
        ("apps/v1", "deployments"): ["deploy"],
        ("apps/v1", "replicasets"): ["rs"], ("apps/v1", "statefulsets"): ["sts"],
        ("apps/v1", "daemonsets"): ["ds"], ("policy/v1", "poddisruptionbudgets"): ["pdb"],
        ("scheduling.k8s.io/v1", "priorityclasses"): ["pc"],
        ("apiextensions.k8s.io/v1", "customresourcedefinitions"): ["crd", "crds"]}


def test_a_crds_categories_and_short_names_reach_discovery(sim):
    client.ApiextensionsV1Api(sim.api).create_custom_resource_definition({
        "metadata": {"name": "modelcaches.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "modelcaches", "singular": "modelcache",
                           "kind": "ModelCache", "shortNames": ["mc"],
                           "categories": ["all", "models"]},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    found = resources(sim, "example.com/v1")["modelcaches"]
    assert (found.categories, found.short_names) == (["all", "models"], ["mc"])


def test_the_review_resources_can_only_be_created(sim):
    authz = resources(sim, "authorization.k8s.io/v1")
    assert {n: r.verbs for n, r in authz.items()} == {
        "selfsubjectaccessreviews": ["create"], "selfsubjectrulesreviews": ["create"]}
    assert resources(sim, "authentication.k8s.io/v1")["selfsubjectreviews"].verbs == ["create"]
    method, url, headers, _, _ = sim.api.param_serialize(
        "GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        auth_settings=["BearerToken"])
    response = sim.api.call_api(method, url, headers)
    response.read()
    assert response.status == 405
    assert json.loads(response.data)["reason"] == "MethodNotAllowed"


def test_a_self_subject_access_review_is_allowed_and_says_there_is_no_rbac(sim):
    review = client.AuthorizationV1Api(sim.api).create_self_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": "default", "verb": "delete",
                                        "resource": "nodes"}}})
    assert review.status.allowed is True
    assert review.status.reason == "simcluster has no RBAC: every request is allowed"
    assert review.spec.resource_attributes.verb == "delete"


def test_a_review_naming_neither_or_both_kinds_of_attributes_is_invalid(sim):
    authz = client.AuthorizationV1Api(sim.api)
    with pytest.raises(ApiException) as e:
        authz.create_self_subject_access_review({"spec": {}})
    assert e.value.status == 422
    assert status_message(e.value) == (
        'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: '
        'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes '
        "must be specified")
    with pytest.raises(ApiException) as e:
        authz.create_self_subject_access_review({"spec": {
            "resourceAttributes": {"verb": "get"},
            "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}})
    assert "cannot be specified in combination with resourceAttributes" in status_message(
        e.value)


def test_rules_and_identity_reviews(sim):
    rules = client.AuthorizationV1Api(sim.api).create_self_subject_rules_review(
        {"spec": {"namespace": "default"}})
    [rule] = rules.status.resource_rules
    assert (rule.verbs, rule.api_groups, rule.resources) == (["*"], ["*"], ["*"])
    assert rules.status.incomplete is False
    me = client.AuthenticationV1Api(sim.api).create_self_subject_review({})
    assert me.status.user_info.username == "simcluster-admin"
    assert "system:authenticated" in me.status.user_info.groups


# kubectl 1.33's request body for `kubectl auth can-i list deployments.apps -n serving`
# (from `-v=9`): the k8s envelope around the SelfSubjectAccessReview message
KUBECTL_SSAR = bytes.fromhex(
    "6b387300 0a320a17 617574686f72697a6174696f6e2e6b38732e696f2f7631 1217"
    "53656c665375626a6563744163636573735265766965 77 1248 0a10 0a00 1200 1a00 2200 2a00 3200"
    "3800 4200 122a 0a28 0a07 73657276696e67 1204 6c697374 1a04 61707073 2200 2a0b"
    "6465706c6f796d656e7473 3200 3a00 1a08 0800 1200 1a00 2000 1a00 2200".replace(" ", ""))


def test_kubectls_protobuf_review_reads_as_the_json_it_stands_for():
    assert from_protobuf("authorization.k8s.io", "SelfSubjectAccessReview", KUBECTL_SSAR) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "metadata": {}, "spec": {"resourceAttributes": {
            "namespace": "serving", "verb": "list", "group": "apps",
            "resource": "deployments"}}}


@pytest.mark.parametrize(("body", "message"), [
    (b'{"spec": {}}', "it does not start with the k8s\\x00 envelope"),
    (KUBECTL_SSAR[:40], "a field runs past the end"),
    (b"k8s\x00\x0a", "a varint runs past the end")])
def test_a_broken_protobuf_body_is_a_400_saying_what_is_wrong(body, message):
    with pytest.raises(ApiError) as e:
        from_protobuf("authorization.k8s.io", "SelfSubjectAccessReview", body)
    assert (e.value.code, e.value.message) == (
        400, f"the request body is not valid protobuf: {message}")
