"""Server-side dry-run (`dryRun=All`) through the official client, as kube-apiserver answers
it: every write is checked and admitted as a real one and answers with the object it would
store, but nothing is stored, no resourceVersion moves and no watcher sees an event."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.helpers import status_message

pytestmark = pytest.mark.timeout(120)
NS = "default"


def deployment(name: str, replicas: int = 1) -> dict:
    labels = {"app": name}
    return {"metadata": {"name": name, "labels": labels}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": "app", "image": "ghcr.io/acme/api:1.4.2"}]}}}}


def pod(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": {
        "containers": [{"name": "app", "image": "ghcr.io/acme/api:1.4.2"}]}}


def first_event(list_call, resource_version: str, **kwargs) -> tuple[str, str]:
    """(type, name) of the first event after `resource_version`."""
    w = watch.Watch()
    for event in w.stream(list_call, resource_version=resource_version, timeout_seconds=30,
                          **kwargs):
        w.stop()
        return event["type"], event["object"].metadata.name
    raise AssertionError("no event at all")


def test_a_dry_run_create_answers_the_would_be_object_and_stores_nothing(sim):
    apps = client.AppsV1Api(sim.api)
    before = apps.list_namespaced_deployment(NS).metadata.resource_version
    made = apps.create_namespaced_deployment(NS, deployment("web", 2), dry_run="All")
    # Admitted as a real create: identity, defaults, generation; not yet versioned.
    assert made.metadata.uid and made.metadata.creation_timestamp
    assert made.metadata.generation == 1 and made.metadata.resource_version is None
    assert made.spec.replicas == 2
    with pytest.raises(ApiException) as err:
        apps.read_namespaced_deployment("web", NS)
    assert err.value.status == 404
    # No watcher saw it, and no controller acted on it: the first event is the real create.
    apps.create_namespaced_deployment(NS, deployment("real"))
    assert first_event(apps.list_namespaced_deployment, before, namespace=NS) == (
        "ADDED", "real")
    assert [rs.metadata.name.rsplit("-", 1)[0] for rs in
            apps.list_namespaced_replica_set(NS).items] in ([], ["real"])


def test_a_dry_run_create_is_refused_as_the_real_one_would_be(sim):
    core, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    apps.create_namespaced_deployment(NS, deployment("web"))
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_deployment(NS, deployment("web"), dry_run="All")
    assert err.value.status == 409 and "already exists" in status_message(err.value)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("nowhere", {"metadata": {"name": "c"}},
                                          dry_run="All")
    assert err.value.status == 404 and 'namespaces "nowhere" not found' in status_message(
        err.value)
    big = deployment("big")
    big["spec"]["replicas"] = 2**31
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_deployment(NS, big, dry_run="All")
    assert err.value.status == 422 and "spec.replicas" in status_message(err.value)


def test_dry_run_updates_patches_and_subresources_change_nothing(sim):
    apps = client.AppsV1Api(sim.api)
    apps.create_namespaced_deployment(NS, deployment("web"))
    stored = apps.read_namespaced_deployment("web", NS)

    patched = apps.patch_namespaced_deployment(
        "web", NS, {"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "ghcr.io/acme/api:1.5.0"}]}}}}, dry_run="All")
    assert patched.spec.template.spec.containers[0].image == "ghcr.io/acme/api:1.5.0"
    assert patched.metadata.generation == stored.metadata.generation + 1

    stored.metadata.labels["tier"] = "front"
    stored.metadata.resource_version = None  # unconditional: the controller writes status
    replaced = apps.replace_namespaced_deployment("web", NS, stored, dry_run="All")
    assert replaced.metadata.labels["tier"] == "front"

    scale = apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 7}},
                                                   dry_run="All")
    assert scale.spec.replicas == 7
    status = apps.patch_namespaced_deployment_status(
        "web", NS, {"status": {"observedGeneration": 99}}, dry_run="All")
    assert status.status.observed_generation == 99

    # A stale resourceVersion conflicts as it would for real.
    stale = apps.read_namespaced_deployment("web", NS)
    stale.metadata.resource_version = "1"
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment("web", NS, stale, dry_run="All")
    assert err.value.status == 409

    now = apps.read_namespaced_deployment("web", NS)
    assert now.metadata.generation == stored.metadata.generation
    assert now.spec.replicas == 1 and "tier" not in now.metadata.labels
    assert now.spec.template.spec.containers[0].image == "ghcr.io/acme/api:1.4.2"
    assert now.status is None or now.status.observed_generation != 99


def test_a_dry_run_delete_answers_as_the_delete_would_and_keeps_the_object(sim):
    core = client.CoreV1Api(sim.api)
    core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    bound = pod("p")
    bound["spec"]["nodeName"] = "gpu-node-1"  # a pod on a node terminates gracefully
    core.create_namespaced_pod(NS, bound)
    before = core.list_namespaced_pod(NS).metadata.resource_version

    # An updated object keeps the version it was read at (no controller writes ConfigMaps).
    rv = core.read_namespaced_config_map("c", NS).metadata.resource_version
    changed = core.patch_namespaced_config_map("c", NS, {"data": {"a": "2"}}, dry_run="All")
    assert changed.data == {"a": "2"} and changed.metadata.resource_version == rv
    gone = core.delete_namespaced_config_map("c", NS, dry_run="All")
    assert gone["status"] == "Success" and gone["details"]["name"] == "c"
    # A pod is deleted gracefully: the answer is the pod as it would be, terminating.
    # kubectl sends dryRun in the DeleteOptions body rather than the query.
    terminating = core.delete_namespaced_pod("p", NS, body=client.V1DeleteOptions(
        dry_run=["All"], grace_period_seconds=30))
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30

    assert core.read_namespaced_config_map("c", NS).data == {"a": "1"}
    assert core.read_namespaced_pod("p", NS).metadata.deletion_timestamp is None
    core.create_namespaced_pod(NS, pod("q"))
    assert first_event(core.list_namespaced_pod, before, namespace=NS) == ("ADDED", "q")


def test_a_dry_run_eviction_evicts_nothing(sim):
    """kubectl drain --dry-run=server asks in the Eviction's deleteOptions; the query works
    too."""
    core = client.CoreV1Api(sim.api)
    core.create_namespaced_pod(NS, pod("p"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "p", "namespace": NS},
                "deleteOptions": {"dryRun": ["All"]}}
    core.create_namespaced_pod_eviction("p", NS, eviction)
    assert core.read_namespaced_pod("p", NS).metadata.deletion_timestamp is None
    assert not any(c.type == "DisruptionTarget" for c in
                   core.read_namespaced_pod("p", NS).status.conditions or [])
    del eviction["deleteOptions"]
    core.create_namespaced_pod_eviction("p", NS, eviction, dry_run="All")
    assert core.read_namespaced_pod("p", NS).metadata.deletion_timestamp is None


def test_an_unknown_dry_run_value_is_refused_with_kube_apiservers_message(sim):
    core = client.CoreV1Api(sim.api)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}}, dry_run="Some")
    assert err.value.status == 422
    body = json.loads(err.value.body)
    assert body["message"] == ('CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported '
                               'value: []string{"Some"}: supported values: "All"')
    assert body["details"]["causes"][0]["field"] == "dryRun"
    core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map("c", NS, body=client.V1DeleteOptions(
            dry_run=["Server"]))
    assert status_message(err.value).startswith('DeleteOptions.meta.k8s.io "" is invalid')
    assert core.read_namespaced_config_map("c", NS).metadata.name == "c"
