"""Helm 4 against simcluster, with the real helm 4.1 binary (`tests/kubectl.py`): install,
upgrade, rollback, uninstall, list and status of a small chart (a Deployment, a Service and a
ConfigMap). Helm 4 installs and upgrades with server-side apply (field manager `helm`),
stores each release revision as a Secret of type helm.sh/release.v1 labelled owner=helm, and
`--wait` follows the objects with a streaming list (watch with sendInitialEvents) until
kstatus calls them Current. What helm prints is checked, and what the cluster then holds."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
import urllib3
from kubernetes import client

from tests.kubectl import table
from tests.test_sim_kubectl import make_node

pytestmark = pytest.mark.timeout(240)
NS = "default"

TEMPLATE = """\
{{- if .Values.settings }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
data:
  level: {{ .Values.level | quote }}
---
{{- end }}
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
spec:
  selector: {app: {{ .Release.Name }}}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  labels: {app: {{ .Release.Name }}}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels: {app: {{ .Release.Name }}}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}}
    spec:
      containers:
      - name: app
        image: {{ .Values.image }}
        ports: [{containerPort: 8080}]
"""


@pytest.fixture
def chart(tmp_path: Path) -> str:
    root = tmp_path / "web"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: web\nversion: 0.1.0\n"
                                     'appVersion: "1.4.2"\n')
    (root / "values.yaml").write_text(textwrap.dedent("""\
        replicas: 2
        image: ghcr.io/acme/api:1.4.2
        level: info
        settings: true
        """))
    (root / "templates" / "app.yaml").write_text(TEMPLATE)
    return str(root)


def releases(sim) -> dict[str, dict[str, str]]:
    """The release Secrets helm stored: name -> labels."""
    found = client.CoreV1Api(sim.api).list_namespaced_secret(NS, label_selector="owner=helm")
    return {s.metadata.name: {**(s.metadata.labels or {}), "type": s.type}
            for s in found.items}


def replicas(sim, name: str = "web") -> int:
    return client.AppsV1Api(sim.api).read_namespaced_deployment(name, NS).spec.replicas


def test_helm_install_applies_the_chart_server_side_and_stores_the_release_as_a_secret(
        sim, helm, chart):
    out = helm(sim, "install", "web", chart)
    assert "STATUS: deployed" in out and "REVISION: 1" in out
    apps, core = client.AppsV1Api(sim.api), client.CoreV1Api(sim.api)
    deploy = apps.read_namespaced_deployment("web", NS)
    assert [(m.manager, m.operation) for m in deploy.metadata.managed_fields] == [
        ("helm", "Apply")]
    assert core.read_namespaced_config_map("web-settings", NS).data == {"level": "info"}
    service = core.read_namespaced_service("web", NS)
    assert service.spec.cluster_ip.startswith("10.") and service.spec.type == "ClusterIP"
    assert releases(sim) == {"sh.helm.release.v1.web.v1": {
        "name": "web", "owner": "helm", "status": "deployed", "version": "1",
        "type": "helm.sh/release.v1",
        "modifiedAt": releases(sim)["sh.helm.release.v1.web.v1"]["modifiedAt"]}}
    [row] = [[c.strip() for c in line.split("\t")] for line in
             helm(sim, "list").splitlines()[1:]]
    assert row[:3] == ["web", NS, "1"] and row[4:6] == ["deployed", "web-0.1.0"]
    status = helm(sim, "status", "web")
    assert "STATUS: deployed" in status and "DESCRIPTION: Install complete" in status


def test_helm_upgrade_and_rollback_move_the_deployment_and_the_release_history(
        sim, helm, chart):
    helm(sim, "install", "web", chart)
    out = helm(sim, "upgrade", "web", chart, "--set", "replicas=3,level=debug")
    assert 'Release "web" has been upgraded' in out and "REVISION: 2" in out
    assert replicas(sim) == 3
    core = client.CoreV1Api(sim.api)
    assert core.read_namespaced_config_map("web-settings", NS).data == {"level": "debug"}
    assert {k: v["status"] for k, v in releases(sim).items()} == {
        "sh.helm.release.v1.web.v1": "superseded", "sh.helm.release.v1.web.v2": "deployed"}
    assert "Rollback was a success" in helm(sim, "rollback", "web", "1")
    assert replicas(sim) == 2
    assert core.read_namespaced_config_map("web-settings", NS).data == {"level": "info"}
    history = [line.split("\t") for line in helm(sim, "history", "web").splitlines()[1:]]
    assert [(h[0].strip(), h[2].strip(), h[-1].strip()) for h in history] == [
        ("1", "superseded", "Install complete"), ("2", "superseded", "Upgrade complete"),
        ("3", "deployed", "Rollback to 1")]


def test_helm_upgrade_deletes_what_the_chart_no_longer_renders(sim, helm, chart):
    helm(sim, "install", "web", chart)
    helm(sim, "upgrade", "web", chart, "--set", "settings=false")
    names = [cm.metadata.name for cm in client.CoreV1Api(sim.api).list_namespaced_config_map(
        NS).items]
    assert "web-settings" not in names


def test_helm_upgrade_conflicts_with_a_kubectl_scale_until_forced(sim, helm, kubectl, chart):
    helm(sim, "install", "web", chart)
    kubectl(sim, "scale", "deployment", "web", "--replicas=5")
    done = helm.run(sim, "upgrade", "web", chart, "--set", "image=ghcr.io/acme/api:1.5.0")
    assert done.returncode == 1
    assert 'conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas' in (
        done.stderr)
    assert replicas(sim) == 5
    helm(sim, "upgrade", "web", chart, "--set", "image=ghcr.io/acme/api:1.5.0",
         "--force-conflicts")
    deploy = client.AppsV1Api(sim.api).read_namespaced_deployment("web", NS)
    assert deploy.spec.replicas == 2
    assert deploy.spec.template.spec.containers[0].image == "ghcr.io/acme/api:1.5.0"


def test_helm_uninstall_removes_the_charts_objects_and_its_releases(sim, helm, chart):
    helm(sim, "install", "web", chart)
    helm(sim, "upgrade", "web", chart, "--set", "replicas=1")
    assert helm(sim, "uninstall", "web").strip() == 'release "web" uninstalled'
    core, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    assert not apps.list_namespaced_deployment(NS).items
    assert [s.metadata.name for s in core.list_namespaced_service(NS).items] == []
    assert releases(sim) == {}
    assert table(helm(sim, "list")) == []


def test_helm_install_wait_returns_once_the_deployment_is_available(sim, helm, chart):
    make_node(client.CoreV1Api(sim.api), "node-1")
    running = helm.start(sim, "install", "web", chart, "--wait", "--timeout", "120s")
    while running.poll() is None:  # the simulated image pulls take virtual time
        sim.advance(5)
        time.sleep(0.2)
    out, err = running.communicate()
    assert running.returncode == 0, err
    assert "STATUS: deployed" in out
    status = client.AppsV1Api(sim.api).read_namespaced_deployment("web", NS).status
    assert status.available_replicas == 2


# --- the streaming list `--wait` relies on --------------------------------------------------

def watch_lines(sim, query: str) -> tuple[int, list[dict]]:
    http = urllib3.PoolManager()
    r = http.request("GET", f"{sim.url}/api/v1/namespaces/{NS}/configmaps?watch=true&"
                     f"{query}&timeoutSeconds=1", preload_content=True, timeout=10)
    return r.status, [json.loads(line) for line in r.data.splitlines() if line.strip()]


def test_a_streaming_list_sends_the_objects_then_a_bookmark_ending_the_initial_events(sim):
    core = client.CoreV1Api(sim.api)
    for name in ("a", "b"):
        core.create_namespaced_config_map(NS, {"metadata": {"name": name}})
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    status, events = watch_lines(sim, "sendInitialEvents=true&allowWatchBookmarks=true&"
                                      "resourceVersionMatch=NotOlderThan")
    assert status == 200
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events[:3]] == [
        ("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", None)]
    bookmark = events[2]["object"]["metadata"]
    assert bookmark == {"resourceVersion": rv,
                        "annotations": {"k8s.io/initial-events-end": "true"}}


def test_a_streaming_list_without_its_companion_options_is_refused(sim):
    status, [body] = watch_lines(sim, "sendInitialEvents=true")
    assert status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('ListOptions.meta.k8s.io "" is invalid: '
                                      "[resourceVersionMatch: Forbidden: sendInitialEvents "
                                      "requires setting resourceVersionMatch to NotOlderThan")
