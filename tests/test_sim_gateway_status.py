"""The Gateway API implementation's status on simcluster: Gateways get an address and are
Programmed, HTTPRoutes say per parent whether they were accepted and their backends resolved,
as istio writes them; `kubectl get gateways` and `describe httproute` read them."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.helpers import wait_for
from tests.kubectl import table

pytestmark = pytest.mark.timeout(120)
GROUP, NS = "gateway.networking.k8s.io", "default"
POOLS = "inference.networking.k8s.io"


def create(sim, group: str, plural: str, body: dict) -> None:
    client.CustomObjectsApi(sim.api).create_namespaced_custom_object(group, "v1", NS, plural,
                                                                     body)


def read(sim, group: str, plural: str, name: str) -> dict:
    return client.CustomObjectsApi(sim.api).get_namespaced_custom_object(group, "v1", NS,
                                                                         plural, name)


def gateway(sim) -> None:
    create(sim, GROUP, "gateways", {
        "apiVersion": f"{GROUP}/v1", "kind": "Gateway", "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "istio",
                 "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}})


def route(sim, backend: str) -> None:
    create(sim, GROUP, "httproutes", {
        "apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": {"name": "model"},
        "spec": {"parentRefs": [{"group": GROUP, "kind": "Gateway", "name": "gw"}],
                 "rules": [{"backendRefs": [{"group": POOLS, "kind": "InferencePool",
                                             "name": backend, "weight": 100}]}]}})


def pool(sim, name: str) -> None:
    create(sim, POOLS, "inferencepools", {
        "apiVersion": f"{POOLS}/v1", "kind": "InferencePool", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}}})


def conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def route_conditions(sim) -> dict[str, tuple[str, str]]:
    parents = (read(sim, GROUP, "httproutes", "model").get("status") or {}).get("parents")
    return conditions(parents[0]) if parents else {}


def test_a_gateway_is_programmed_with_an_address_and_counts_its_routes(sim, kubectl):
    gateway(sim)
    pool(sim, "llama")
    route(sim, "llama")
    status = wait_for(lambda: (read(sim, GROUP, "gateways", "gw").get("status") or {}
                               ).get("listeners"), message="gateway status")
    assert status[0]["attachedRoutes"] == 1
    row = table(kubectl(sim, "get", "gateways"))[0]
    assert (row["CLASS"], row["PROGRAMMED"]) == ("istio", "True")
    assert row["ADDRESS"].startswith("10.0.255.")
    assert wait_for(lambda: route_conditions(sim), message="route status") == {
        "Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}


def test_a_route_to_a_missing_pool_is_unresolved_until_the_pool_exists(sim):
    gateway(sim)
    route(sim, "qwen")
    assert wait_for(lambda: route_conditions(sim), message="route status")[
        "ResolvedRefs"] == ("False", "BackendNotFound")
    pool(sim, "qwen")
    wait_for(lambda: route_conditions(sim)["ResolvedRefs"] == ("True", "ResolvedRefs"),
             message="resolved once the pool exists")


def test_a_weight_patch_is_not_followed_by_a_status_write(sim):
    gateway(sim)
    pool(sim, "llama")
    route(sim, "llama")
    wait_for(lambda: route_conditions(sim), message="route status")
    patched = client.CustomObjectsApi(sim.api).patch_namespaced_custom_object(
        GROUP, "v1", NS, "httproutes", "model",
        {"spec": {"rules": [{"backendRefs": [{"group": POOLS, "kind": "InferencePool",
                                              "name": "llama", "weight": 50}]}]}})
    time.sleep(1.5)  # the controller looks every second
    assert read(sim, GROUP, "httproutes", "model")["metadata"]["resourceVersion"] == (
        patched["metadata"]["resourceVersion"])
