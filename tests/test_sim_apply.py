"""Server-side apply and managedFields through the official client, as kube-apiserver answers
them: `PATCH application/apply-patch+yaml` creates or merges, owns exactly what it applied,
conflicts (409, a cause per field) unless forced, honours dryRun; every create, update and
patch records its manager in `metadata.managedFields`."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import status_message

pytestmark = pytest.mark.timeout(120)
NS = "default"
APPLY = "application/apply-patch+yaml"


def config(replicas: int = 2, image: str = "nginx:1.27") -> dict:
    labels = {"app": "web"}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "containers": [{"name": "app", "image": image}]}}}}


def apply(sim, body: dict, manager: str | None = "ci", **kwargs):
    extra = {"field_manager": manager} if manager is not None else {}
    return client.AppsV1Api(sim.api).patch_namespaced_deployment(
        body["metadata"]["name"], NS, body, _content_type=APPLY, **extra, **kwargs)


def managers(obj) -> list[tuple[str, str]]:
    return [(m.manager, m.operation) for m in obj.metadata.managed_fields or []]


def test_an_apply_creates_a_missing_object_and_owns_what_it_applied(sim):
    made = apply(sim, config())
    assert made.spec.replicas == 2 and made.metadata.uid
    (entry,) = made.metadata.managed_fields
    assert (entry.manager, entry.operation, entry.api_version, entry.fields_type) == (
        "ci", "Apply", "apps/v1", "FieldsV1")
    assert entry.fields_v1["f:spec"]["f:selector"] == {}
    assert 'k:{"name":"app"}' in entry.fields_v1["f:spec"]["f:template"]["f:spec"][
        "f:containers"]


def test_reapplying_the_same_configuration_changes_nothing_not_even_the_resource_version(sim):
    core = client.CoreV1Api(sim.api)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
            "data": {"level": "info"}}
    made = core.patch_namespaced_config_map("settings", NS, body, field_manager="ci",
                                            _content_type=APPLY)
    again = core.patch_namespaced_config_map("settings", NS, body, field_manager="ci",
                                             _content_type=APPLY)
    assert again.metadata.resource_version == made.metadata.resource_version
    assert again.metadata.managed_fields[0].time == made.metadata.managed_fields[0].time


def test_an_apply_without_a_field_manager_is_refused_and_creates_nothing(sim):
    with pytest.raises(ApiException) as err:
        apply(sim, config(), manager=None)
    assert err.value.status == 422
    assert status_message(err.value) == ('PatchOptions.meta.k8s.io "" is invalid: '
                                         'fieldManager: Required value: is required for '
                                         'apply patch')
    with pytest.raises(ApiException) as missing:
        client.AppsV1Api(sim.api).read_namespaced_deployment("web", NS)
    assert missing.value.status == 404


def test_force_is_refused_on_a_patch_that_is_not_an_apply(sim):
    apply(sim, config())
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(sim.api).patch_namespaced_deployment(
            "web", NS, {"spec": {"replicas": 3}}, force=True,
            _content_type="application/merge-patch+json")
    assert err.value.status == 422
    assert status_message(err.value).endswith(
        "force: Forbidden: may not be specified for non-apply patch")


def test_a_conflicting_apply_is_a_409_with_a_cause_per_field_and_force_takes_the_fields(sim):
    apply(sim, config(), manager="kubectl")
    with pytest.raises(ApiException) as err:
        apply(sim, config(replicas=5), manager="ci")
    assert err.value.status == 409
    status = json.loads(err.value.body)
    assert status["reason"] == "Conflict"
    assert status["message"] == ('Apply failed with 1 conflict: conflict with "kubectl": '
                                 ".spec.replicas")
    assert status["details"]["causes"] == [{"type": "FieldManagerConflict",
                                            "message": 'conflict with "kubectl"',
                                            "field": ".spec.replicas"}]
    apps = client.AppsV1Api(sim.api)
    assert apps.read_namespaced_deployment("web", NS).spec.replicas == 2
    forced = apply(sim, config(replicas=5), manager="ci", force=True)
    assert forced.spec.replicas == 5
    owners = {m.manager: m.fields_v1 for m in forced.metadata.managed_fields}
    assert "f:replicas" in owners["ci"]["f:spec"]
    assert "f:replicas" not in owners["kubectl"]["f:spec"]


def test_a_dry_run_apply_answers_the_merged_object_and_stores_nothing(sim):
    apps = client.AppsV1Api(sim.api)
    would = apply(sim, config(), dry_run="All")
    assert would.spec.replicas == 2 and would.metadata.managed_fields
    with pytest.raises(ApiException) as err:
        apps.read_namespaced_deployment("web", NS)
    assert err.value.status == 404
    made = apply(sim, config())
    changed = apply(sim, config(image="nginx:1.28"), dry_run="All")
    assert changed.spec.template.spec.containers[0].image == "nginx:1.28"
    stored = apps.read_namespaced_deployment("web", NS)
    assert stored.spec.template.spec.containers[0].image == "nginx:1.27"
    assert stored.metadata.managed_fields[0].time == made.metadata.managed_fields[0].time


def test_an_applied_field_the_kind_does_not_declare_is_refused_as_kube_refuses_it(sim):
    body = config()
    body["spec"]["replica"] = 3
    with pytest.raises(ApiException) as err:
        apply(sim, body)
    assert err.value.status == 500
    assert status_message(err.value) == (
        "failed to create typed patch object (default/web; apps/v1, Kind=Deployment): "
        ".spec.replica: field not declared in schema")


def test_an_apply_naming_another_kind_is_refused(sim):
    body = {**config(), "kind": "StatefulSet"}
    with pytest.raises(ApiException) as err:
        apply(sim, body)
    assert err.value.status == 400
    assert status_message(err.value) == "invalid object type: apps/v1, Kind=StatefulSet"


def test_creates_and_patches_record_their_manager_as_updates(sim):
    apps = client.AppsV1Api(sim.api)
    body = config()
    del body["apiVersion"], body["kind"]
    made = apps.create_namespaced_deployment(NS, body)  # no fieldManager: the User-Agent's
    assert managers(made) == [("OpenAPI-Generator", "Update")]
    entry = made.metadata.managed_fields[0]
    assert entry.fields_v1["f:metadata"]["f:labels"] == {".": {}, "f:app": {}}
    patched = apps.patch_namespaced_deployment("web", NS, {"spec": {"replicas": 4}},
                                               field_manager="ops")
    owners = {m.manager: m.fields_v1 for m in patched.metadata.managed_fields}
    assert owners["ops"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in owners["OpenAPI-Generator"]["f:spec"]
    # An apply that changes the replicas now conflicts with the updater, named with its
    # apiVersion as kube names an updater.
    with pytest.raises(ApiException) as err:
        apply(sim, config(replicas=2))
    assert status_message(err.value) == ('Apply failed with 1 conflict: conflict with "ops" '
                                         "using apps/v1: .spec.replicas")


def test_a_status_write_is_recorded_with_its_subresource(sim):
    core = client.CoreV1Api(sim.api)
    core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}, "data": {"a": "1"}},
                                      field_manager="seed")
    apps = client.AppsV1Api(sim.api)
    apply(sim, config(replicas=0))
    status = {"status": {"observedGeneration": 1, "replicas": 0, "conditions": [
        {"type": "Progressing", "status": "True", "reason": "Test"}]}}
    done = apps.patch_namespaced_deployment_status("web", NS, status, field_manager="tester")
    entry = next(m for m in done.metadata.managed_fields if m.manager == "tester")
    assert (entry.operation, entry.subresource) == ("Update", "status")
    assert "f:status" in entry.fields_v1


def test_a_write_of_empty_managed_fields_forgets_every_owner(sim):
    apply(sim, config())
    apps = client.AppsV1Api(sim.api)
    reset = apps.patch_namespaced_deployment(
        "web", NS, [{"op": "replace", "path": "/metadata/managedFields", "value": [{}]}])
    assert not reset.metadata.managed_fields
    # Untracked now: the next apply finds the fields held by `before-first-apply`.
    with pytest.raises(ApiException) as err:
        apply(sim, config(replicas=3))
    assert '"before-first-apply" using apps/v1' in status_message(err.value)


def test_a_custom_resources_keyed_list_merges_by_its_crds_list_map_keys(sim):
    """Two managers apply one item each of a list its CRD declares a map keyed by name: each
    owns its own item, and an item its applier stops applying goes, the other stays."""
    client.ApiextensionsV1Api(sim.api).create_custom_resource_definition({
        "metadata": {"name": "routes.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "routes", "singular": "route", "kind": "Route"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                     "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                         "type": "object", "properties": {"backends": {
                             "type": "array", "x-kubernetes-list-type": "map",
                             "x-kubernetes-list-map-keys": ["name"],
                             "items": {"type": "object", "properties": {
                                 "name": {"type": "string"},
                                 "weight": {"type": "integer"}}}}}}}}}}]}})
    custom = client.CustomObjectsApi(sim.api)

    def route(*backends: tuple[str, int]) -> dict:
        return {"apiVersion": "example.com/v1", "kind": "Route", "metadata": {"name": "r"},
                "spec": {"backends": [{"name": n, "weight": w} for n, w in backends]}}

    def apply_route(body: dict, manager: str) -> dict:
        return custom.patch_namespaced_custom_object(
            "example.com", "v1", NS, "routes", "r", body, field_manager=manager,
            _content_type=APPLY)

    apply_route(route(("v1", 100)), "platform")
    merged = apply_route(route(("v2", 0)), "rollout")
    assert merged["spec"]["backends"] == [{"name": "v1", "weight": 100},
                                          {"name": "v2", "weight": 0}]
    owners = {m["manager"]: m["fieldsV1"] for m in merged["metadata"]["managedFields"]}
    assert list(owners["rollout"]["f:spec"]["f:backends"]) == ['k:{"name":"v2"}']
    after = apply_route({**route(), "spec": {}}, "rollout")  # rollout stops applying v2
    assert after["spec"]["backends"] == [{"name": "v1", "weight": 100}]


def test_an_apply_naming_an_old_resource_version_is_a_conflict(sim):
    core = client.CoreV1Api(sim.api)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
            "data": {"level": "info"}}
    made = core.patch_namespaced_config_map("settings", NS, body, field_manager="ci",
                                            _content_type=APPLY)
    core.patch_namespaced_config_map("settings", NS, {"data": {"level": "warn"}})
    stale = {**body, "metadata": {"name": "settings",
                                  "resourceVersion": made.metadata.resource_version}}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("settings", NS, stale, field_manager="ci",
                                         force=True, _content_type=APPLY)
    assert err.value.status == 409
    assert "the object has been modified" in status_message(err.value)
    assert core.read_namespaced_config_map("settings", NS).data == {"level": "warn"}


def test_an_apply_naming_another_namespace_or_name_than_its_url_is_refused(sim):
    apply(sim, config())
    wrong_namespace = ("the namespace of the provided object does not match the namespace "
                       "sent on the request")
    wrong_name = "the name of the object (api) does not match the name on the URL (web)"
    for meta, message in (({"namespace": "other"}, wrong_namespace),
                          ({"name": "api"}, wrong_name)):
        body = config()
        body["metadata"].update(meta)
        with pytest.raises(ApiException) as err:
            client.AppsV1Api(sim.api).patch_namespaced_deployment(
                "web", NS, body, field_manager="ci", _content_type=APPLY)
        assert err.value.status == 400 and status_message(err.value) == message
