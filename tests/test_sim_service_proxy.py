"""The API server's service proxy on simcluster (`services/<name>:<port>/proxy/<path>`), the
way to reach an in-cluster server from outside without `kubectl port-forward` (which needs a
kubelet simcluster does not have): forwarded to a Ready pod behind the Service."""

from __future__ import annotations

import json

import pytest

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)
SPEED = 30  # llama-3-8b pulls for 90 s and loads for 40 s


def test_a_services_proxy_reaches_vllm_on_a_ready_replica(sim_factory, kubectl):
    sim = sim_factory("default", speed=SPEED)
    path = "/api/v1/namespaces/inference/services/llama-3-8b:8000/proxy/v1/models"

    def models() -> list[str]:
        done = kubectl.run(sim, "get", "--raw", path)
        return [m["id"] for m in json.loads(done.stdout)["data"]] if done.returncode == 0 else []

    assert wait_for(models, timeout=60, message="a Ready llama-3-8b replica") == ["llama-3-8b"]


def test_a_service_without_ready_pods_has_no_endpoints(sim, kubectl):
    kubectl(sim, "create", "service", "clusterip", "lonely", "--tcp=80:8080")
    done = kubectl.run(sim, "get", "--raw", "/api/v1/namespaces/default/services/lonely:80/proxy/")
    assert done.returncode == 1
    assert ('Error from server (ServiceUnavailable): no endpoints available for service '
            '"lonely"') in done.stderr
    missing = kubectl.run(sim, "get", "--raw", "/api/v1/namespaces/default/services/nope/proxy/")
    assert 'services "nope" not found' in missing.stderr
