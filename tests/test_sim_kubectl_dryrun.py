"""kubectl's server-side dry-run against simcluster: `apply --dry-run=server`, `diff`,
`delete`/`scale --dry-run=server`, with the real kubectl 1.33 (`tests/kubectl.py`). What
kubectl prints is checked, and what the official client then reads shows nothing changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)
NS = "default"

MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  level: {level}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
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
        image: ghcr.io/acme/api:1.4.2
"""


def manifest(tmp_path: Path, level: str = "info", replicas: int = 2) -> str:
    path = tmp_path / f"app-{level}-{replicas}.yaml"
    path.write_text(MANIFEST.format(level=level, replicas=replicas))
    return str(path)


def test_apply_dry_run_server_on_new_objects_creates_nothing(sim, kubectl, tmp_path):
    out = kubectl(sim, "apply", "--dry-run=server",
                  "-f", manifest(tmp_path))
    assert out.splitlines() == ["configmap/settings created (server dry run)",
                                "deployment.apps/web created (server dry run)"]
    core, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    for read in (lambda: core.read_namespaced_config_map("settings", NS),
                 lambda: apps.read_namespaced_deployment("web", NS)):
        with pytest.raises(ApiException) as err:
            read()
        assert err.value.status == 404
    assert apps.list_namespaced_replica_set(NS).items == []


def test_apply_dry_run_server_on_changed_objects_shows_the_result_and_keeps_them(
        sim, kubectl, tmp_path):
    kubectl(sim, "apply", "-f", manifest(tmp_path))
    changed = manifest(tmp_path, level="debug", replicas=3)
    out = kubectl(sim, "apply", "--dry-run=server", "-f", changed)
    assert out.splitlines() == ["configmap/settings configured (server dry run)",
                                "deployment.apps/web configured (server dry run)"]
    shown = kubectl(sim, "apply", "--dry-run=server", "-f", changed,
                    "-o", "jsonpath={.items[0].data.level} {.items[1].spec.replicas}")
    assert shown == "debug 3"
    core, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    assert core.read_namespaced_config_map("settings", NS).data == {"level": "info"}
    assert apps.read_namespaced_deployment("web", NS).spec.replicas == 2


def test_diff_shows_what_apply_would_change_and_nothing_when_in_sync(sim, kubectl, tmp_path):
    kubectl(sim, "apply", "-f", manifest(tmp_path))
    same = kubectl.run(sim, "diff", "-f", manifest(tmp_path))
    assert (same.returncode, same.stdout) == (0, "")

    done = kubectl.run(sim, "diff", "-f", manifest(tmp_path, level="debug", replicas=3))
    assert done.returncode == 1, done.stderr  # 1: there are differences
    changed = {line for line in done.stdout.splitlines()
               if line[:1] in "+-" and not line.startswith(("---", "+++"))}
    assert changed == {"-  level: info", "+  level: debug",
                       "-  replicas: 2", "+  replicas: 3",
                       "-  generation: 1", "+  generation: 2"}
    assert client.AppsV1Api(sim.api).read_namespaced_deployment("web", NS).spec.replicas == 2


def test_delete_and_scale_dry_run_server_leave_the_objects_as_they_are(sim, kubectl, tmp_path):
    kubectl(sim, "apply", "-f", manifest(tmp_path))
    assert kubectl(sim, "delete", "configmap", "settings", "--dry-run=server").strip() == \
        'configmap "settings" deleted (server dry run)'
    assert kubectl(sim, "scale", "deployment", "web", "--replicas=9",
                   "--dry-run=server").strip() == "deployment.apps/web scaled (server dry run)"
    core, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    assert core.read_namespaced_config_map("settings", NS).data == {"level": "info"}
    assert apps.read_namespaced_deployment("web", NS).spec.replicas == 2


def test_drain_dry_run_server_cordons_and_evicts_nothing(sim, kubectl):
    core = client.CoreV1Api(sim.api)
    core.create_node({"metadata": {"name": "gpu-node-1"}, "status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "capacity": {"cpu": "8", "memory": "64Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}})
    core.create_namespaced_pod(NS, {"metadata": {"name": "p1"}, "spec": {
        "nodeName": "gpu-node-1", "containers": [{"name": "app", "image": "busybox:1.36"}]}})
    wait_for(lambda: core.read_namespaced_pod("p1", NS).status.phase == "Running",
             timeout=30, message="p1 running")
    done = kubectl.run(sim, "drain", "gpu-node-1", "--dry-run=server", "--force")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["node/gpu-node-1 cordoned (server dry run)",
                                        "evicting pod default/p1 (server dry run)",
                                        "node/gpu-node-1 drained (server dry run)"]
    assert not (core.read_node("gpu-node-1").spec or client.V1NodeSpec()).unschedulable
    pod = core.read_namespaced_pod("p1", NS)
    assert pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"
