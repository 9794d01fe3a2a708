"""simcluster's field manager as pure logic (`apiserver/fieldmanager/`): field sets and their
FieldsV1 form, what an applied configuration owns, merging by list keys, conflicts with
kube-apiserver's message, and the removal of what an applier stopped applying."""

from __future__ import annotations

import copy
import json

import pytest

from gpuops.simcluster.apiserver.fieldmanager import entries, fieldset, lastapplied, updater
from gpuops.simcluster.apiserver.fieldmanager.fieldset import FieldSet, field, key, value
from gpuops.simcluster.apiserver.fieldmanager.schema import TypedError, Types
from gpuops.simcluster.apiserver.fieldmanager.typed import compare, merge, to_set
from gpuops.simcluster.apiserver.openapi import documents
from gpuops.simcluster.core.resources import ResourceRegistry

NOW = "2026-12-01T20:00:00Z"
LATER = "2026-12-01T20:05:00Z"


def types(plural: str, group: str = "apps", version: str = "v1") -> Types:
    rt = ResourceRegistry.with_builtins().get(group, version, plural)
    assert rt is not None
    name, schemas = documents.type_schemas(rt, None)
    return Types(schemas[name], schemas)


DEPLOY = types("deployments")


def deployment(replicas: int | None = 2, image: str = "nginx:1.27", **extra) -> dict:
    spec: dict = {"selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": image,
                                 "ports": [{"containerPort": 80}]}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    obj = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "labels": {"app": "web"}}, "spec": spec}
    obj["metadata"].update(extra)
    return obj


def applied(live: dict, config: dict, managed: entries.Managed, manager: str, *,
            force: bool = False, now: str = NOW) -> tuple[dict, entries.Managed]:
    new, managed = updater.apply(DEPLOY, live, config, managed, manager,
                                 api_version="apps/v1", force=force, now=now)
    return (new if new is not None else live), managed


def fields_of(managed: entries.Managed, manager: str) -> dict:
    (entry,) = [e for e in entries.encode(managed) or [] if e["manager"] == manager]
    return entry["fieldsV1"]


# --- field sets ---------------------------------------------------------------------------

def test_a_field_set_round_trips_through_fields_v1_with_dots_where_a_member_has_children():
    s = FieldSet.of((field("spec"), field("replicas")),
                    (field("spec"), field("containers"), key({"name": "app"})),
                    (field("spec"), field("containers"), key({"name": "app"}), field("image")),
                    (field("finalizers"), value("a/b")))
    doc = s.to_fields_v1()
    assert doc == {"f:finalizers": {'v:"a/b"': {}}, "f:spec": {
        "f:containers": {'k:{"name":"app"}': {".": {}, "f:image": {}}}, "f:replicas": {}}}
    assert list(doc["f:spec"]) == ["f:containers", "f:replicas"]  # kube's order
    assert FieldSet.from_fields_v1(doc) == s


def test_key_fields_are_written_sorted_by_name_and_paths_print_as_kube_prints_them():
    pe = key({"protocol": "TCP", "containerPort": 80})
    assert pe.text == 'k:{"containerPort":80,"protocol":"TCP"}'
    path = (field("spec"), field("ports"), pe, field("name"))
    assert fieldset.path_string(path) == '.spec.ports[containerPort=80,protocol="TCP"].name'
    assert value("x").label() == '[="x"]'


def test_set_operations_follow_structured_merge_diff():
    a = FieldSet.of((field("a"),), (field("b"), field("c")), (field("b"), field("d")))
    b = FieldSet.of((field("b"),), (field("b"), field("c")))
    assert [fieldset.path_string(p) for p in a.difference(b).paths()] == [".a", ".b.d"]
    # A member of the other set takes away everything below it only recursively.
    assert [fieldset.path_string(p) for p in a.recursive_difference(b).paths()] == [".a"]
    assert [fieldset.path_string(p) for p in a.intersection(b).paths()] == [".b.c"]


def test_a_fields_v1_key_of_an_unknown_element_type_is_dropped_and_a_bad_one_refused():
    assert FieldSet.from_fields_v1({"z:x": {}, "f:a": {}}) == FieldSet.of((field("a"),))
    with pytest.raises(ValueError):
        FieldSet.from_fields_v1({"k:not-json": {}})


# --- what a configuration owns --------------------------------------------------------------

def test_an_applied_configuration_owns_its_leaves_keyed_items_and_atomic_selector():
    owned = to_set(DEPLOY, deployment()).to_fields_v1()
    assert owned["f:spec"]["f:selector"] == {}  # a LabelSelector is atomic: owned whole
    assert owned["f:metadata"]["f:labels"] == {"f:app": {}}  # no "." for a struct's map
    container = owned["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"app"}']
    assert container["."] == {} and container["f:image"] == {}
    # Ports are keyed by port and protocol, the protocol defaulted to TCP.
    assert list(container["f:ports"]) == ['k:{"containerPort":80,"protocol":"TCP"}']


def test_an_applied_field_the_schema_does_not_declare_is_refused_as_kube_words_it():
    config = deployment()
    config["spec"]["replica"] = 3
    with pytest.raises(TypedError, match=r"^\.spec\.replica: field not declared in schema$"):
        to_set(DEPLOY, config, strict=True)


def test_a_duplicate_item_of_a_keyed_list_is_refused_in_an_applied_configuration():
    config = deployment()
    containers = config["spec"]["template"]["spec"]["containers"]
    containers.append(dict(containers[0]))
    with pytest.raises(TypedError, match=r'duplicate entries for key \[name="app"\]'):
        to_set(DEPLOY, config, strict=True)


def test_a_create_owns_the_maps_it_adds_as_members_too():
    live = updater.empty_like(deployment())
    c = compare(DEPLOY, live, deployment())
    doc = c.added.to_fields_v1()
    assert doc["f:metadata"]["f:labels"] == {".": {}, "f:app": {}}
    assert "." not in doc["f:spec"] and "." not in doc["f:spec"]["f:template"]["f:spec"][
        "f:containers"]


# --- merging --------------------------------------------------------------------------------

def test_merge_merges_containers_by_name_and_keeps_the_live_ones_the_configuration_omits():
    live = deployment()
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar",
                                                           "image": "envoy:1"})
    config = deployment(image="nginx:1.28")
    merged = merge(DEPLOY, live, config)
    containers = merged["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("app", "nginx:1.28"), ("sidecar", "envoy:1")]
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"


def test_merge_replaces_an_atomic_list_whole():
    live = deployment()
    live["spec"]["template"]["spec"]["containers"][0]["args"] = ["--a", "--b"]
    config = deployment()
    config["spec"]["template"]["spec"]["containers"][0]["args"] = ["--c"]
    merged = merge(DEPLOY, live, config)
    assert merged["spec"]["template"]["spec"]["containers"][0]["args"] == ["--c"]


# --- ownership ------------------------------------------------------------------------------

def test_an_apply_that_changes_another_managers_field_conflicts_with_kubes_message():
    live, managed = applied(updater.empty_like(deployment()), deployment(), entries.Managed(),
                            "kubectl")
    with pytest.raises(updater.Conflicts) as err:
        applied(live, deployment(replicas=5, image="nginx:2"), managed, "ci")
    assert err.value.message() == (
        'Apply failed with 2 conflicts: conflicts with "kubectl":\n- .spec.replicas\n'
        '- .spec.template.spec.containers[name="app"].image')
    assert err.value.causes()[0] == {"type": "FieldManagerConflict",
                                     "message": 'conflict with "kubectl"',
                                     "field": ".spec.replicas"}


def test_applying_the_same_value_shares_a_field_and_force_takes_it():
    live, managed = applied(updater.empty_like(deployment()), deployment(), entries.Managed(),
                            "kubectl")
    live, managed = applied(live, deployment(), managed, "ci")  # same values: no conflict
    assert "f:replicas" in fields_of(managed, "ci")["f:spec"]
    assert "f:replicas" in fields_of(managed, "kubectl")["f:spec"]
    live, managed = applied(live, deployment(replicas=7), managed, "ci", force=True)
    assert live["spec"]["replicas"] == 7
    assert "f:replicas" not in fields_of(managed, "kubectl")["f:spec"]


def test_an_updater_is_named_with_its_api_version_in_a_conflict():
    base, managed = applied(updater.empty_like(deployment()), deployment(), entries.Managed(),
                            "kubectl")
    scaled = copy.deepcopy(base)
    scaled["spec"]["replicas"] = 9
    managed = updater.update(DEPLOY, base, scaled, managed, "hpa", api_version="apps/v1",
                             now=LATER)
    with pytest.raises(updater.Conflicts, match=r'^Apply failed with 1 conflict: conflict '
                       r'with "hpa" using apps/v1: \.spec\.replicas$'):
        applied(scaled, deployment(replicas=3), managed, "kubectl")


def test_what_an_applier_stops_applying_is_removed_unless_another_manager_owns_it():
    config = deployment()
    config["spec"]["template"]["spec"]["containers"].append({"name": "sidecar",
                                                             "image": "envoy:1"})
    live, managed = applied(updater.empty_like(config), config, entries.Managed(), "kubectl")
    live, managed = applied(live, {"apiVersion": "apps/v1", "kind": "Deployment",
                                   "metadata": {"name": "web"},
                                   "spec": {"replicas": 2}}, managed, "ci")
    # kubectl no longer applies the label, the replicas nor the sidecar.
    smaller = deployment(replicas=None)
    del smaller["metadata"]["labels"]
    live, managed = applied(live, smaller, managed, "kubectl", now=LATER)
    assert "labels" not in live["metadata"]
    assert live["spec"]["replicas"] == 2  # ci still applies it
    assert [c["name"] for c in live["spec"]["template"]["spec"]["containers"]] == ["app"]


def test_reapplying_the_same_configuration_changes_nothing():
    live, managed = applied(updater.empty_like(deployment()), deployment(), entries.Managed(),
                            "kubectl")
    again, after = updater.apply(DEPLOY, live, deployment(), managed, "kubectl",
                                 api_version="apps/v1", now=LATER)
    assert again is None and entries.encode(after) == entries.encode(managed)


def test_the_first_apply_to_an_untracked_object_leaves_its_fields_to_before_first_apply():
    live = deployment(replicas=4)  # written by no one the field manager saw
    with pytest.raises(updater.Conflicts, match='"before-first-apply" using apps/v1'):
        applied(live, deployment(replicas=2), entries.Managed(), "kubectl")


def test_an_update_owns_what_it_changes_and_nobody_owns_what_it_removes():
    live, managed = applied(updater.empty_like(deployment()), deployment(), entries.Managed(),
                            "kubectl")
    edited = copy.deepcopy(live)
    edited["spec"]["replicas"] = 3
    del edited["metadata"]["labels"]
    managed = updater.update(DEPLOY, live, edited, managed, "kubectl-edit",
                             api_version="apps/v1", now=LATER)
    assert fields_of(managed, "kubectl-edit") == {"f:spec": {"f:replicas": {}}}
    kubectl = fields_of(managed, "kubectl")
    assert "f:replicas" not in kubectl["f:spec"] and "f:labels" not in kubectl.get(
        "f:metadata", {})
    edit = next(e for e in entries.encode(managed) or [] if e["manager"] == "kubectl-edit")
    assert (edit["operation"], edit["apiVersion"], edit["time"]) == ("Update", "apps/v1",
                                                                      LATER)


def test_more_than_ten_updaters_fold_the_oldest_into_ancient_changes():
    live = deployment()
    managed = updater.update(DEPLOY, updater.empty_like(live), live, entries.Managed(),
                             "creator", api_version="apps/v1", now=NOW, start_tracking=True)
    for i in range(11):
        new = copy.deepcopy(live)
        new["metadata"]["annotations"] = {**live["metadata"].get("annotations", {}),
                                          f"n{i}": "x"}
        managed = updater.update(DEPLOY, live, new, managed, f"tool-{i}",
                                 api_version="apps/v1", now=f"2026-12-01T21:{i:02d}:00Z")
        live = new
    names = [e["manager"] for e in entries.encode(managed) or []]
    assert len(names) == 10 and "ancient-changes" in names
    assert "creator" not in names and "tool-0" not in names and "tool-10" in names


# --- from client-side apply -----------------------------------------------------------------

def client_side_applied(config: dict) -> tuple[dict, entries.Managed]:
    """An object as `kubectl apply` (client-side) leaves it: its annotation, and its fields
    owned by the updater kubectl-client-side-apply."""
    live = copy.deepcopy(config)
    live["metadata"]["annotations"] = {lastapplied.ANNOTATION: json.dumps(config)}
    managed = updater.update(DEPLOY, updater.empty_like(live), live, entries.Managed(),
                             "kubectl-client-side-apply", api_version="apps/v1", now=NOW,
                             start_tracking=True)
    return live, managed


def test_kubectl_may_take_the_fields_its_client_side_apply_set_and_left_unchanged():
    live, managed = client_side_applied(deployment())
    new, after = lastapplied.apply(DEPLOY, live, deployment(replicas=3), managed, "kubectl",
                                   api_version="apps/v1", force=False, now=LATER)
    assert new is not None and new["spec"]["replicas"] == 3
    assert "f:replicas" in fields_of(after, "kubectl")["f:spec"]
    # The annotation now records what was applied server-side.
    recorded = json.loads(new["metadata"]["annotations"][lastapplied.ANNOTATION])
    assert recorded["spec"]["replicas"] == 3


def test_another_manager_or_a_field_changed_since_still_conflicts():
    live, managed = client_side_applied(deployment())
    with pytest.raises(updater.Conflicts):
        lastapplied.apply(DEPLOY, live, deployment(replicas=3), managed, "ci",
                          api_version="apps/v1", force=False, now=LATER)
    edited = copy.deepcopy(live)
    edited["spec"]["replicas"] = 7  # changed by hand after the client-side apply
    managed = updater.update(DEPLOY, live, edited, managed, "kubectl-client-side-apply",
                             api_version="apps/v1", now=LATER)
    with pytest.raises(updater.Conflicts, match=r"\.spec\.replicas"):
        lastapplied.apply(DEPLOY, edited, deployment(replicas=3), managed, "kubectl",
                          api_version="apps/v1", force=False, now=LATER)
