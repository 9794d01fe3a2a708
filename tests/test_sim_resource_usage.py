"""The CPU and memory use simcluster simulates for metrics.k8s.io (`metrics/resourceusage.py`):
plain pod and node objects in, nanocores and bytes out."""

from __future__ import annotations

from gpuops.simcluster.metrics.resourceusage import (
    NODE_SYSTEM_CPU_MILLI,
    NODE_SYSTEM_MEMORY,
    container_usage,
    node_usage,
    pod_usage,
)

GI = 2**30


def pod(uid: str, *, phase: str = "Running", running: tuple[str, ...] = ("app",),
        resources: dict | None = None) -> dict:
    containers = [{"name": name, "resources": resources or {}} for name in ("app", "sidecar")]
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default"},
            "spec": {"containers": containers},
            "status": {"phase": phase, "containerStatuses": [
                {"name": c["name"], "state": {"running": {}} if c["name"] in running
                 else {"waiting": {"reason": "ContainerCreating"}}} for c in containers]}}


def test_a_container_uses_a_stable_share_of_its_requests_within_the_model_bounds():
    container = {"name": "app", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}
    for uid in ("a", "b", "c", "d", "e"):
        usage = container_usage(uid, container, t=100.0)
        assert 0.25 * 0.9 * 2e9 <= usage.cpu_nanocores <= 0.65 * 1.1 * 2e9
        assert 0.55 * 0.9 * 4 * GI <= usage.memory_bytes <= 0.85 * 1.1 * 4 * GI
        assert container_usage(uid, container, t=100.0) == usage  # the same read twice
    assert len({container_usage(u, container, 100.0) for u in "abcde"}) == 5


def test_use_swings_slowly_with_virtual_time():
    container = {"name": "app", "resources": {"requests": {"cpu": "1"}}}
    at = [container_usage("a", container, t).cpu_nanocores for t in (0, 150, 300, 450)]
    assert len(set(at)) == 4
    assert max(at) / min(at) <= 1.1 / 0.9 + 1e-9


def test_a_limit_stands_in_for_a_missing_request_and_nothing_asked_gets_the_default():
    limited = container_usage("a", {"name": "app", "resources": {"limits": {"cpu": "4"}}}, 0)
    asked = container_usage("a", {"name": "app", "resources": {"requests": {"cpu": "4"}}}, 0)
    assert limited == asked
    bare = container_usage("a", {"name": "app"}, 0)
    assert 0 < bare.cpu_nanocores < 0.1 * 1e9 and 0 < bare.memory_bytes < 128 * 2**20


def test_only_running_containers_of_running_pods_use_anything():
    assert set(pod_usage(pod("p", running=("app",)), 0)) == {"app"}
    assert pod_usage(pod("p", phase="Pending", running=()), 0) == {}
    assert pod_usage(pod("p", phase="Succeeded", running=("app", "sidecar")), 0) == {}


def test_a_node_uses_its_pods_and_the_system_share():
    pods = [pod("p", running=("app", "sidecar")), pod("q", phase="Pending", running=())]
    total = node_usage(pods, 10.0)
    containers = pod_usage(pods[0], 10.0).values()
    assert total.cpu_nanocores == NODE_SYSTEM_CPU_MILLI * 10**6 + sum(
        u.cpu_nanocores for u in containers)
    assert total.memory_bytes == NODE_SYSTEM_MEMORY + sum(u.memory_bytes for u in containers)
    assert node_usage([], 10.0).cpu_nanocores == NODE_SYSTEM_CPU_MILLI * 10**6


def test_cpu_quantities_are_written_in_canonical_form():
    from gpuops.simcluster.metrics.metricstable import cpu_quantity
    assert [cpu_quantity(n) for n in (2 * 10**9, 250 * 10**6, 136_250_000 + 1_000,
                                      25_015_161, 0)] == ["2", "250m", "136251u",
                                                          "25015161n", "0"]
