"""Bulk population of a large cluster in-process (for the scale benchmark), and pod churn.

Going through HTTP for 100,000 creates would measure the benchmark's client, not the server.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic import Field

from .core.clock import rfc3339
from .core.faults import FaultParams

if TYPE_CHECKING:
    from .cluster import SimCluster


class ChurnParams(FaultParams):
    count: int = Field(1000, ge=0, le=10_000_000, description="status updates to make")


def _node(i: int, gpus: int) -> dict[str, Any]:
    name = f"gpu-node-{i:05d}"
    capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "gpuops.io/pool": f"pool-{i % 10}",
                                                  "nvidia.com/gpu.product": "NVIDIA-H100"}},
            "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}"},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}]}}


def _pod(i: int, node: str, now: str) -> dict[str, Any]:
    return {"metadata": {"name": f"worker-{i:06d}", "namespace": f"team-{i % 20}",
                         "labels": {"app": f"app-{i % 500}", "gpuops.io/bench": "scale"}},
            "spec": {"nodeName": node, "schedulerName": "default-scheduler",
                     "containers": [{"name": "main", "image": "vllm/vllm-openai:v0.11.0",
                                     "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}]},
            "status": {"phase": "Running", "startTime": now, "podIP": f"10.{i >> 16 & 255}."
                       f"{i >> 8 & 255}.{i & 255}",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                              "image": "vllm/vllm-openai:v0.11.0",
                                              "state": {"running": {"startedAt": now}}}]}}


def populate(cluster: SimCluster, nodes: int, pods: int, gpus_per_node: int = 8) -> None:
    store = cluster.store
    now = rfc3339(cluster.clock.now())
    ns_type, node_type, pod_type = store.type("namespaces"), store.type("nodes"), store.type("pods")
    for t in range(20):
        if store.find(ns_type, None, f"team-{t}") is None:
            store.create(ns_type, {"metadata": {"name": f"team-{t}"},
                                   "status": {"phase": "Active"}})
    for i in range(nodes):
        store.create(node_type, _node(i, gpus_per_node))
    for i in range(pods):
        store.create(pod_type, _pod(i, f"gpu-node-{i % max(nodes, 1):05d}", now))


def register_churn(cluster: SimCluster) -> None:
    """A `pod-churn` fault: N status updates to existing pods, as fast as the loop allows."""
    store = cluster.store
    pod_type = store.type("pods")

    async def churn(count: int) -> None:
        keys = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in store.list(pod_type)]
        for n in range(count):
            ns, name = keys[n % len(keys)]

            def tick(p: dict[str, Any], n: int = n) -> None:  # (mypy types no lambda default)
                p["status"]["message"] = f"tick {n}"

            store.mutate(pod_type, ns, name, tick, subresource="status")
            if n % 500 == 499:
                await asyncio.sleep(0)

    def start(_target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        count = params["count"]
        asyncio.get_running_loop().create_task(churn(count))
        return {"updates": count}

    cluster.faults.register("pod-churn", start, "update `count` pods' status, one write "
                            "each (a load test of watches)", params=ChurnParams)
