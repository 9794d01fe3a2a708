"""kubectl's day-two commands against simcluster: `top nodes` / `top pods` on metrics.k8s.io
(`metrics/resourcemetrics.py`), `events`, `wait --for=condition`, `rollout restart`, with the
real kubectl 1.33 (`tests/kubectl.py`); what it prints is checked against the API's state.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.helpers import wait_for
from tests.kubectl import table
from tests.test_sim_kubectl import NODE, make_node

pytestmark = pytest.mark.timeout(180)
NS = "default"


@pytest.fixture
def cluster(sim):
    make_node(client.CoreV1Api(sim.api), NODE)
    return sim


def deployment(sim, name: str, replicas: int = 2) -> None:
    client.AppsV1Api(sim.api).create_namespaced_deployment(NS, {
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                     {"name": "app", "image": "ghcr.io/acme/api:1.4.2",
                      "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}})


def running_pods(sim, selector: str) -> list:
    pods = client.CoreV1Api(sim.api).list_namespaced_pod(NS, label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running"]


def cores(text: str) -> float:
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def mebibytes(text: str) -> int:
    assert text.endswith("Mi"), text
    return int(text[:-2])


def test_kubectl_top_pods_shows_each_running_pods_use_within_its_requests(cluster, kubectl):
    deployment(cluster, "web")
    wait_for(lambda: len(running_pods(cluster, "app=web")) == 2, timeout=60)
    rows = table(kubectl(cluster, "top", "pods", "-A"))
    names = sorted(p.metadata.name for p in running_pods(cluster, "app=web"))
    assert sorted(r["NAME"] for r in rows) == names
    for row in rows:
        assert row["NAMESPACE"] == NS
        assert 0.1 <= cores(row["CPU(cores)"]) <= 0.36  # 25-65 % of 500m, +-10 %
        assert 500 <= mebibytes(row["MEMORY(bytes)"]) <= 960  # 55-85 % of 1Gi, +-10 %
    [one] = table(kubectl(cluster, "top", "pod", names[0], "--containers"))
    assert (one["POD"], one["NAME"]) == (names[0], "app")
    # A label selector narrows the list, as metrics-server applies it.
    assert table(kubectl(cluster, "top", "pods", "-l", "app=other")) == []


def test_kubectl_top_nodes_shows_the_nodes_use_against_its_allocatable(cluster, kubectl):
    deployment(cluster, "web")
    wait_for(lambda: len(running_pods(cluster, "app=web")) == 2, timeout=60)
    [row] = table(kubectl(cluster, "top", "nodes"))
    assert row["NAME"] == NODE
    cpu = cores(row["CPU(cores)"])
    assert 0.12 + 0.2 <= cpu <= 0.12 + 0.72  # the system share and two pods
    assert row["CPU(%)"] == f"{int(cpu * 1000 * 100 / 96000)}%"  # of 96 allocatable cores
    raw = json.loads(kubectl(cluster, "get", "--raw",
                             f"/apis/metrics.k8s.io/v1beta1/nodes/{NODE}"))
    assert (raw["kind"], raw["metadata"]["name"], raw["window"]) == ("NodeMetrics", NODE, "15s")
    assert raw["usage"]["cpu"].endswith("n") and raw["usage"]["memory"].endswith("Ki")


def test_kubectl_top_of_what_has_no_metrics_says_so_as_metrics_server_does(cluster, kubectl):
    done = kubectl.run(cluster, "top", "node", "no-such-node")
    assert done.returncode == 1
    assert 'nodemetrics.metrics.k8s.io "no-such-node" not found' in done.stderr
    done = kubectl.run(cluster, "top", "pod", "no-such-pod")
    assert 'podmetrics.metrics.k8s.io "default/no-such-pod" not found' in done.stderr
    assert "metrics.k8s.io/v1beta1" in kubectl(cluster, "api-versions")


def test_kubectl_wait_for_available_then_rollout_restart_replaces_the_pods(cluster, kubectl):
    deployment(cluster, "web")
    assert kubectl(cluster, "wait", "--for=condition=Available", "deploy/web",
                   "--timeout=60s").strip() == "deployment.apps/web condition met"
    before = {p.metadata.name for p in running_pods(cluster, "app=web")}
    assert kubectl(cluster, "rollout", "restart", "deploy/web").strip() == \
        "deployment.apps/web restarted"
    kubectl(cluster, "rollout", "status", "deploy/web", "--timeout=60s")
    apps = client.AppsV1Api(cluster.api)
    template = apps.read_namespaced_deployment("web", NS).spec.template
    assert "kubectl.kubernetes.io/restartedAt" in template.metadata.annotations
    wait_for(lambda: len(running_pods(cluster, "app=web")) == 2, timeout=60)
    after = {p.metadata.name for p in running_pods(cluster, "app=web")}
    assert not before & after
    sets = apps.list_namespaced_replica_set(NS, label_selector="app=web").items
    assert sorted(rs.spec.replicas for rs in sets) == [0, 2]


def test_kubectl_events_lists_what_happened_to_an_object(cluster, kubectl):
    deployment(cluster, "web", replicas=1)
    wait_for(lambda: len(running_pods(cluster, "app=web")) == 1, timeout=60)
    rows = table(kubectl(cluster, "events", "--for", "deployment/web"))
    assert [(r["TYPE"], r["REASON"], r["OBJECT"]) for r in rows] == [
        ("Normal", "ScalingReplicaSet", "Deployment/web")]
    assert "Scaled up replica set web-" in rows[0]["MESSAGE"]
    [pod] = running_pods(cluster, "app=web")
    reasons = [r["REASON"] for r in table(kubectl(cluster, "events", "--for",
                                                 f"pod/{pod.metadata.name}"))]
    assert "Scheduled" in reasons and "Started" in reasons
    done = kubectl.run(cluster, "events", "--types=Warning")
    assert (done.returncode, done.stdout) == (0, "")
    assert "No events found" in done.stderr


def test_kubectl_get_of_the_metrics_resources_shows_metrics_servers_columns(cluster, kubectl):
    deployment(cluster, "web", replicas=1)
    wait_for(lambda: len(running_pods(cluster, "app=web")) == 1, timeout=60)
    [node] = table(kubectl(cluster, "get", "nodes.metrics.k8s.io"))
    assert list(node) == ["NAME", "CPU", "MEMORY", "WINDOW"]
    assert (node["NAME"], node["WINDOW"]) == (NODE, "15s")
    [pod] = table(kubectl(cluster, "get", "pods.metrics.k8s.io", "--show-labels"))
    assert pod["NAME"] == running_pods(cluster, "app=web")[0].metadata.name
    assert "app=web" in pod["LABELS"]
    # metrics-server serves get and list only: a watch is refused, not left hanging
    done = kubectl.run(cluster, "get", "pods.metrics.k8s.io", "-w", "--request-timeout=5s")
    assert done.returncode == 1 and "MethodNotAllowed" in done.stderr
