"""Aggregated discovery (apidiscovery.k8s.io/v2) on simcluster's `/api` and `/apis`: what
client-go 1.33 asks for first, in the shape it reads (responseKind, scope, verbs, short names,
categories, subresources, freshness), and kubectl's discovery on it.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

pytestmark = pytest.mark.timeout(180)
V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
KUBECTL_ACCEPT = f"{V2},{V2BETA1},application/json"


def get(sim, path: str, accept: str) -> tuple[str, dict]:
    req = urllib.request.Request(sim.url + path, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Content-Type"], json.loads(resp.read())


def resources(doc: dict, group: str, version: str) -> dict[str, dict]:
    [item] = [i for i in doc["items"] if i["metadata"]["name"] == group]
    [ver] = [v for v in item["versions"] if v["version"] == version]
    assert ver["freshness"] == "Current"
    return {r["resource"]: r for r in ver["resources"]}


def test_apis_answers_every_group_with_its_resources_when_asked_as_kubectl_asks(sim):
    ctype, doc = get(sim, "/apis", KUBECTL_ACCEPT)
    assert ctype == V2
    assert (doc["kind"], doc["apiVersion"]) == ("APIGroupDiscoveryList", "apidiscovery.k8s.io/v2")
    deployments = resources(doc, "apps", "v1")["deployments"]
    assert deployments["responseKind"] == {"group": "apps", "version": "v1",
                                           "kind": "Deployment"}
    assert deployments["scope"] == "Namespaced"
    assert deployments["singularResource"] == "deployment"
    assert deployments["shortNames"] == ["deploy"]
    assert deployments["categories"] == ["all"]
    assert {"create", "get", "list", "watch", "patch", "delete"} <= set(deployments["verbs"])
    subs = {s["subresource"]: s for s in deployments["subresources"]}
    assert subs["scale"]["responseKind"] == {"group": "autoscaling", "version": "v1",
                                             "kind": "Scale"}
    assert subs["status"]["responseKind"]["kind"] == "Deployment"
    assert resources(doc, "scheduling.k8s.io", "v1")["priorityclasses"]["scope"] == "Cluster"
    assert "" not in [i["metadata"]["name"] for i in doc["items"]]  # the core group is /api's


def test_api_answers_the_core_group_with_pod_subresources(sim):
    ctype, doc = get(sim, "/api", KUBECTL_ACCEPT)
    assert ctype == V2
    pods = resources(doc, "", "v1")["pods"]
    subs = {s["subresource"]: s["responseKind"] for s in pods["subresources"]}
    assert subs["eviction"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert subs["log"]["kind"] == "Pod"
    assert resources(doc, "", "v1")["nodes"]["scope"] == "Cluster"


def test_a_client_that_asks_for_plain_json_or_v2beta1_gets_that(sim):
    ctype, doc = get(sim, "/apis", "application/json")
    assert ctype.startswith("application/json") and doc["kind"] == "APIGroupList"
    ctype, doc = get(sim, "/api", "application/json")
    assert doc["kind"] == "APIVersions"
    ctype, doc = get(sim, "/apis", f"{V2BETA1},application/json")
    assert ctype == V2BETA1 and doc["apiVersion"] == "apidiscovery.k8s.io/v2beta1"


def test_kubectl_discovers_everything_in_two_requests_and_resolves_short_names_and_all(
        sim, kubectl):
    kubectl(sim, "create", "deployment", "web", "--image=ghcr.io/acme/api:1.4.2")
    done = kubectl.run(sim, "get", "deploy", "-v=6")
    assert done.returncode == 0, done.stderr
    discovery = [u for u in re.findall(r'url="[^"]*?(/apis?[^"?]*)', done.stderr)
                 if "/namespaces/" not in u]
    assert discovery == ["/api", "/apis"]  # no request per group version
    assert "web" in done.stdout
    assert "deployment.apps/web" in kubectl(sim, "get", "all")
    listed = kubectl(sim, "api-resources", "--categories=all", "-o", "name").split()
    assert {"pods", "deployments.apps", "jobs.batch"} <= set(listed)
    assert "infpool" in kubectl(sim, "api-resources", "--api-group=inference.networking.k8s.io")
