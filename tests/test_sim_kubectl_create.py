"""kubectl's imperative commands against simcluster: `create namespace|job|deployment|
configmap|secret|...` and `run` send built-in kinds as protobuf (client-go's typed clients
prefer it), which simcluster reads with the schemas of `apiserver/protobuf/`. What the official
client then reads is checked, and the protobuf path is compared with the JSON one.
"""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client

pytestmark = pytest.mark.timeout(180)


def test_kubectl_create_namespace_job_deployment_configmap_and_secret_are_stored(sim, kubectl):
    assert kubectl(sim, "create", "namespace", "team-a").strip() == "namespace/team-a created"
    assert kubectl(sim, "create", "job", "train", "-n", "team-a", "--image=busybox:1.36",
                   "--", "python", "train.py", "--epochs=3").strip() == \
        "job.batch/train created"
    assert kubectl(sim, "create", "deployment", "web", "-n", "team-a",
                   "--image=ghcr.io/acme/api:1.4.2", "--replicas=0", "--port=8080"
                   ).strip() == "deployment.apps/web created"
    kubectl(sim, "create", "configmap", "settings", "-n", "team-a",
            "--from-literal=level=debug")
    kubectl(sim, "create", "secret", "generic", "db", "-n", "team-a",
            "--from-literal=password=hunter2")

    core, apps, batch = (client.CoreV1Api(sim.api), client.AppsV1Api(sim.api),
                         client.BatchV1Api(sim.api))
    assert core.read_namespace("team-a").status.phase == "Active"
    job = batch.read_namespaced_job("train", "team-a")
    assert job.spec.template.spec.containers[0].command == ["python", "train.py",
                                                           "--epochs=3"]
    assert job.spec.template.spec.restart_policy == "Never"
    deploy = apps.read_namespaced_deployment("web", "team-a")
    assert deploy.spec.replicas == 0  # a pointer set to zero, not "no replicas given"
    assert deploy.spec.template.spec.containers[0].ports[0].container_port == 8080
    assert deploy.spec.selector.match_labels == {"app": "web"}
    assert core.read_namespaced_config_map("settings", "team-a").data == {"level": "debug"}
    secret = core.read_namespaced_secret("db", "team-a")
    assert base64.b64decode(secret.data["password"]) == b"hunter2"


def test_kubectl_run_starts_a_pod_with_its_labels_and_env(sim, kubectl):
    assert kubectl(sim, "run", "shell", "--image=busybox:1.36", "--labels=team=ml",
                   "--env=MODE=debug", "--restart=Never", "--", "sleep", "3600"
                   ).strip() == "pod/shell created"
    pod = client.CoreV1Api(sim.api).read_namespaced_pod("shell", "default")
    assert pod.metadata.labels == {"team": "ml"}
    container = pod.spec.containers[0]
    assert (container.image, container.args) == ("busybox:1.36", ["sleep", "3600"])
    assert [(e.name, e.value) for e in container.env] == [("MODE", "debug")]


def test_a_protobuf_create_stores_what_the_same_object_sent_as_json_stores(
        sim, kubectl, tmp_path):
    """`create deployment` (typed client: protobuf) and `create -f` of the same object's
    client-side JSON (unstructured client: JSON) store the same object."""
    args = ("--image=ghcr.io/acme/api:1.4.2", "--replicas=0", "--port=8080")
    manifest = json.loads(kubectl(sim, "create", "deployment", "web", *args,
                                  "--dry-run=client", "-o", "json"))
    manifest["metadata"]["name"] = "web-json"
    (tmp_path / "web.json").write_text(json.dumps(manifest))
    kubectl(sim, "create", "deployment", "web", *args)
    kubectl(sim, "create", "-f", str(tmp_path / "web.json"))

    def stored(name: str) -> dict:
        obj = json.loads(kubectl(sim, "get", "deployment", name, "-o", "json"))
        for volatile in ("name", "uid", "creationTimestamp", "resourceVersion",
                         "managedFields"):
            obj["metadata"].pop(volatile, None)
        obj.pop("status", None)  # the controller's
        return obj

    via_protobuf = stored("web")
    assert via_protobuf == stored("web-json")
    assert via_protobuf["spec"]["replicas"] == 0


def test_kubectl_create_with_dry_run_server_stores_nothing(sim, kubectl):
    assert kubectl(sim, "create", "namespace", "scratch", "--dry-run=server").strip() == \
        "namespace/scratch created (server dry run)"
    names = [ns.metadata.name for ns in client.CoreV1Api(sim.api).list_namespace().items]
    assert "scratch" not in names
