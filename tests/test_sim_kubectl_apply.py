"""kubectl's server-side apply against simcluster, with the real kubectl 1.33
(`tests/kubectl.py`): `apply --server-side`, conflicts between field managers and
`--force-conflicts`, `diff --server-side`, fields removed when no longer applied, and
`get --show-managed-fields`. What kubectl prints is checked, and what is stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.timeout(180)

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {labels}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: app
        image: {image}
        ports: [{{containerPort: 8080}}]
"""


def manifest(tmp_path: Path, replicas: int = 2, image: str = "ghcr.io/acme/api:1.4.2",
             labels: str = "{app: web, tier: front}") -> str:
    path = tmp_path / f"web-{replicas}-{image.rsplit(':', 1)[-1]}-{len(labels)}.yaml"
    path.write_text(MANIFEST.format(replicas=replicas, image=image, labels=labels))
    return str(path)


def stored(kubectl, sim) -> dict:
    return json.loads(kubectl(sim, "get", "deployment", "web", "-o", "json"))


def test_apply_server_side_creates_and_get_shows_managed_fields_only_when_asked(
        sim, kubectl, tmp_path):
    out = kubectl(sim, "apply", "--server-side", "-f", manifest(tmp_path))
    assert out.strip() == "deployment.apps/web serverside-applied"
    shown = yaml.safe_load(kubectl(sim, "get", "deployment", "web", "-o", "yaml",
                                   "--show-managed-fields"))
    (entry,) = shown["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["apiVersion"],
            entry["fieldsType"]) == ("kubectl", "Apply", "apps/v1", "FieldsV1")
    spec = entry["fieldsV1"]["f:spec"]
    assert spec["f:replicas"] == {} and spec["f:selector"] == {}
    container = spec["f:template"]["f:spec"]["f:containers"]['k:{"name":"app"}']
    assert container["."] == {} and "f:image" in container
    assert 'k:{"containerPort":8080,"protocol":"TCP"}' in container["f:ports"]
    plain = yaml.safe_load(kubectl(sim, "get", "deployment", "web", "-o", "yaml"))
    assert "managedFields" not in plain["metadata"]


def test_a_conflict_between_field_managers_is_refused_with_kubes_message_until_forced(
        sim, kubectl, tmp_path):
    kubectl(sim, "apply", "--server-side", "--field-manager=ci", "-f", manifest(tmp_path))
    done = kubectl.run(sim, "apply", "--server-side", "-f", manifest(tmp_path, replicas=4))
    assert done.returncode == 1
    assert done.stderr.startswith('error: Apply failed with 1 conflict: conflict with "ci": '
                                  ".spec.replicas\n")
    assert "--force-conflicts" in done.stderr
    assert stored(kubectl, sim)["spec"]["replicas"] == 2
    out = kubectl(sim, "apply", "--server-side", "--force-conflicts",
                  "-f", manifest(tmp_path, replicas=4))
    assert out.strip() == "deployment.apps/web serverside-applied"
    obj = stored(kubectl, sim)
    assert obj["spec"]["replicas"] == 4


def test_kubectl_scale_owns_the_replicas_so_a_later_apply_of_them_conflicts(
        sim, kubectl, tmp_path):
    kubectl(sim, "apply", "--server-side", "-f", manifest(tmp_path))
    kubectl(sim, "scale", "deployment", "web", "--replicas=5")
    done = kubectl.run(sim, "apply", "--server-side", "-f", manifest(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith(
        'error: Apply failed with 1 conflict: conflict with "kubectl" with subresource '
        '"scale" using apps/v1: .spec.replicas\n')
    # The scaled replicas stay as they were.
    assert stored(kubectl, sim)["spec"]["replicas"] == 5


def test_fields_a_manifest_no_longer_holds_are_removed_by_the_next_apply(
        sim, kubectl, tmp_path):
    kubectl(sim, "apply", "--server-side", "-f", manifest(tmp_path))
    assert stored(kubectl, sim)["metadata"]["labels"] == {"app": "web", "tier": "front"}
    kubectl(sim, "apply", "--server-side", "-f", manifest(tmp_path, labels="{app: web}"))
    assert stored(kubectl, sim)["metadata"]["labels"] == {"app": "web"}


def test_diff_server_side_shows_the_applied_change_and_stores_nothing(sim, kubectl, tmp_path):
    kubectl(sim, "apply", "--server-side", "-f", manifest(tmp_path))
    done = kubectl.run(sim, "diff", "--server-side",
                       "-f", manifest(tmp_path, image="ghcr.io/acme/api:1.5.0"))
    assert done.returncode == 1, done.stderr  # 1: there are differences
    changed = [line for line in done.stdout.splitlines()
               if line.startswith(("-", "+")) and "image:" in line]
    assert [line.split()[-1] for line in changed] == ["ghcr.io/acme/api:1.4.2",
                                                      "ghcr.io/acme/api:1.5.0"]
    image = stored(kubectl, sim)["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "ghcr.io/acme/api:1.4.2"


def test_apply_server_side_with_dry_run_server_stores_nothing(sim, kubectl, tmp_path):
    out = kubectl(sim, "apply", "--server-side", "--dry-run=server", "-f", manifest(tmp_path))
    assert out.strip() == "deployment.apps/web serverside-applied (server dry run)"
    done = kubectl.run(sim, "get", "deployment", "web")
    assert done.returncode == 1 and "NotFound" in done.stderr


SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data: {data}
"""


def test_a_manifest_applied_client_side_moves_to_server_side_apply_and_back(
        sim, kubectl, tmp_path):
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(SETTINGS.format(data="{level: info, old: x}"))
    second.write_text(SETTINGS.format(data="{level: debug}"))

    def data() -> dict:
        return json.loads(kubectl(sim, "get", "configmap", "settings", "-o", "json"))["data"]

    kubectl(sim, "apply", "-f", str(first))
    # The changed value is no conflict with kubectl's own client-side apply, and the key the
    # manifest dropped goes.
    out = kubectl(sim, "apply", "--server-side", "-f", str(second))
    assert out.strip() == "configmap/settings serverside-applied"
    assert data() == {"level": "debug"}
    assert kubectl(sim, "apply", "-f", str(first)).strip() == "configmap/settings configured"
    assert data() == {"level": "info", "old": "x"}


POOL_SCENARIO = """\
cluster: {name: sim}
namespaces: [default]
pools:
  - name: cpu
    instanceType: m6i.4xlarge
    cpu: 16
    memory: 64Gi
    minSize: 1
    maxSize: 1
    desiredSize: 1
    backing: none
"""


def test_a_cordon_of_a_node_the_cluster_made_is_recorded_in_its_managed_fields(
        sim_factory, kubectl, tmp_path):
    scenario = tmp_path / "pool.yaml"
    scenario.write_text(POOL_SCENARIO)
    sim = sim_factory(str(scenario))
    [node] = json.loads(kubectl(sim, "get", "nodes", "-o", "json"))["items"]
    name = node["metadata"]["name"]
    kubectl(sim, "cordon", name)
    shown = yaml.safe_load(kubectl(sim, "get", "node", name, "-o", "yaml",
                                   "--show-managed-fields"))
    # (cordon names no field manager: kube records the User-Agent's product, as here)
    assert [(e["manager"], e["operation"], e["fieldsV1"])
            for e in shown["metadata"]["managedFields"]] == [
        ("kubectl", "Update", {"f:spec": {"f:unschedulable": {}}})]
