"""CPU and memory use of running containers and of nodes, as metrics-server reports them.

simcluster simulates GPU use (`dcgm.py`) and serving load (`serving.py`), not CPU or memory:
this model gives each running container a use that a reader of `kubectl top` finds plausible
and that a test can rely on. A container uses a stable share of what it asked for (its request,
else its limit, else a small default), drawn from its pod's uid and its name so that repeated
reads agree, plus a slow swing with virtual time (a 10-minute period, ±10 % of the share): CPU
between 25 % and 65 % of its request, memory between 55 % and 85 %. A node uses what its
running pods use plus what kubelet, the container runtime and the system daemons take.

Pure: pod and node objects and the time in, nanocores and bytes out.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from gpuops.common.quantity import parse_quantity

DEFAULT_CPU_MILLI = 100  # what a container without CPU request or limit is taken to ask
DEFAULT_MEMORY = 128 * 2**20
CPU_SHARE = (0.25, 0.65)
MEMORY_SHARE = (0.55, 0.85)
SWING_PERIOD_S = 600.0
SWING = 0.10
# kubelet, containerd and the system daemons on every node
NODE_SYSTEM_CPU_MILLI = 120
NODE_SYSTEM_MEMORY = 700 * 2**20


@dataclass(frozen=True)
class Usage:
    cpu_nanocores: int
    memory_bytes: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_nanocores + other.cpu_nanocores,
                     self.memory_bytes + other.memory_bytes)


def running_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's containers that are running now (none unless the pod is Running)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return []
    running = {s.get("name") for s in status.get("containerStatuses") or []
               if "running" in (s.get("state") or {})}
    return [c for c in (pod.get("spec") or {}).get("containers") or []
            if c.get("name") in running]


def container_usage(pod_uid: str, container: dict[str, Any], t: float) -> Usage:
    resources = container.get("resources") or {}
    cpu = _asked(resources, "cpu", DEFAULT_CPU_MILLI / 1000) * 10**9
    memory = _asked(resources, "memory", DEFAULT_MEMORY)
    name = container.get("name", "")
    return Usage(round(cpu * _share(pod_uid, name, "cpu", CPU_SHARE, t)),
                 round(memory * _share(pod_uid, name, "memory", MEMORY_SHARE, t)))


def pod_usage(pod: dict[str, Any], t: float) -> dict[str, Usage]:
    """Container name -> its use, for the running containers."""
    uid = (pod.get("metadata") or {}).get("uid", "")
    return {c["name"]: container_usage(uid, c, t) for c in running_containers(pod)}


def node_usage(pods_on_node: list[dict[str, Any]], t: float) -> Usage:
    total = Usage(NODE_SYSTEM_CPU_MILLI * 10**6, NODE_SYSTEM_MEMORY)
    for pod in pods_on_node:
        for usage in pod_usage(pod, t).values():
            total += usage
    return total


def _asked(resources: dict[str, Any], name: str, default: float) -> float:
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get(name)
        if value is not None:
            try:
                return float(parse_quantity(value))
            except ValueError:
                break  # validation keeps such pods out; a default is enough here
    return default


def _share(uid: str, container: str, resource: str, bounds: tuple[float, float],
           t: float) -> float:
    digest = hashlib.blake2b(f"{uid}/{container}/{resource}".encode(), digest_size=4).digest()
    draw = int.from_bytes(digest, "big") / 0xFFFFFFFF
    low, high = bounds
    base = low + (high - low) * draw
    phase = 2 * math.pi * draw
    return base * (1 + SWING * math.sin(2 * math.pi * t / SWING_PERIOD_S + phase))
