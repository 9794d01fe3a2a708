"""The simulated kubelet builds a container's environment from its env, ConfigMaps and Secrets
and expands `$(VAR)` in its command line, as a real kubelet does; the container echoes that
command line in its log (seen through the official client)."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client

from gpuops.simcluster.kubelet.env import config_values, container_environment, expand
from gpuops.simcluster.kubelet.spec import ConfigRef, parse_env
from tests.helpers import wait_for

NS = "default"


@pytest.mark.parametrize(("text", "expanded"), [
    ("$(A)", "1"),
    ("x$(A)y$(B)z", "x1y2z"),
    ("$(MISSING)", "$(MISSING)"),
    ("$$(A)", "$(A)"),
    ("cost $5 and $(A", "cost $5 and $(A"),
    ("trailing $", "trailing $"),
])
def test_command_line_references_expand_as_the_kubelet_expands_them(text, expanded):
    assert expand(text, {"A": "1", "B": "2"}) == expanded


def test_env_from_comes_first_then_env_in_order_with_earlier_values_expanded():
    env, env_from = parse_env({
        "envFrom": [{"secretRef": {"name": "db"}}, {"configMapRef": {"name": "cfg"},
                                                     "prefix": "CFG_"}],
        "env": [{"name": "USER", "value": "app"},
                {"name": "URL", "value": "postgres://$(USER):$(PASSWORD)@db"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "t"}}},
                {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "none", "key": "k",
                                                                "optional": True}}}]})
    objects = {("secret", "db"): {"PASSWORD": "pw"}, ("configmap", "cfg"): {"MODE": "fast"},
               ("secret", "api"): {"t": "tok"}}

    def lookup(ref: ConfigRef):
        return objects.get((ref.kind, ref.name))
    assert container_environment(env, env_from, lookup) == {
        "PASSWORD": "pw", "CFG_MODE": "fast", "USER": "app", "URL": "postgres://app:pw@db",
        "TOKEN": "tok"}


def test_a_secret_is_seen_decoded_and_a_configmap_as_written():
    secret = {"data": {"a": base64.b64encode(b"s3cret\n").decode(), "bin": "//79"},
              "stringData": {"b": "plain"}}
    assert config_values(secret, "secret") == {"a": "s3cret\n", "b": "plain"}
    assert config_values({"data": {"k": "v"}}, "configmap") == {"k": "v"}


def test_a_container_prints_its_command_line_with_secret_values_expanded(sim):
    core = client.CoreV1Api(sim.api)
    core.create_node({"metadata": {"name": "n1"}, "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "db"}, "data": {
        "DB_PASSWORD": base64.b64encode(b"pw-from-secret").decode()}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "api"}, "data": {
        "token": base64.b64encode(b"tok-from-secret").decode()}})
    core.create_namespaced_pod(NS, {"metadata": {"name": "app"}, "spec": {
        "nodeName": "n1", "containers": [{
            "name": "app", "image": "ghcr.io/acme/api:1.4.2",
            "command": ["/app/serve"],
            "args": ["--db", "postgres://app:$(DB_PASSWORD)@db/main", "--token=$(API_TOKEN)",
                     "--literal=$(LITERAL)", "--undefined=$(NOPE)", "--price=$$(LITERAL)"],
            "envFrom": [{"secretRef": {"name": "db"}}],
            "env": [{"name": "API_TOKEN",
                     "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}},
                    {"name": "LITERAL", "value": "lit-value"}]}]}})
    sim.advance(3)

    def command_line() -> str:
        log = core.read_namespaced_pod_log("app", NS, container="app")
        return next((line for line in log.splitlines() if " INFO command: " in line), "")
    line = wait_for(command_line, message="the command line in the log")
    assert line.endswith(
        "INFO command: /app/serve --db postgres://app:pw-from-secret@db/main "
        "--token=tok-from-secret --literal=lit-value --undefined=$(NOPE) --price=$(LITERAL)")
