"""Room for the new version: how many of its replicas fit on free GPUs now, and so which
mode the rollout runs in (pure).

A replica fits on a node that is Ready and schedulable, whose labels its `nodeSelector` asks
for, whose NoSchedule / NoExecute taints it tolerates, and that has its GPUs free (allocatable
minus what the pods there hold: `common.podfacts`). Node affinity and other resources are not
modelled: a fit here can still be refused by the scheduler, which is why the rollout waits for
Ready with a timeout and never leaves a Pending pod behind.

Blue-green needs room for a full copy beside the old version. Without it, fixed-capacity moves
k replicas at a time: the old version shrinks by k, the GPUs it frees take k new replicas. That
needs more than k old replicas (otherwise nothing would serve while the first new ones load).
Or, when the person chose it (`no_room: prewarm`), the capacity side is asked for the GPUs and
the rollout waits for them, then runs blue-green (`choose_prewarm`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuops.common.errors import ConfigError
from gpuops.common.podfacts import holds_resources, node_allocatable_gpus, pod_gpus

Obj = Mapping[str, Any]
ChosenMode = Literal["blue-green", "fixed-capacity"]


def _ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or ())


def _tolerates(tolerations: Sequence[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
                taint.get("value") or ""):
            return True
    return False


def eligible(node: Obj, pod_spec: Obj) -> bool:
    """Could the scheduler put a pod of `pod_spec` on `node` at all (GPUs aside)?"""
    if not _ready(node) or (node.get("spec") or {}).get("unschedulable"):
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = pod_spec.get("tolerations") or ()
    return all(_tolerates(tolerations, t) for t in (node.get("spec") or {}).get("taints") or ()
               if t.get("effect") in ("NoSchedule", "NoExecute"))


@dataclass(frozen=True)
class Room:
    fits: int  # new replicas that fit on free GPUs now
    free_gpus: int  # on the nodes they could go to
    nodes: int  # eligible nodes

    def describe(self, gpus_per_replica: int) -> str:
        return (f"{self.free_gpus} free GPU(s) on {self.nodes} eligible node(s): room for "
                f"{self.fits} replica(s) of {gpus_per_replica} GPU(s)")


def room_for(pod_spec: Obj, gpus_per_replica: int, nodes: Iterable[Obj], pods: Iterable[Obj]
             ) -> Room:
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and holds_resources(pod):
            used[node] = used.get(node, 0) + pod_gpus(pod)
    fits = free = count = 0
    for node in nodes:
        if not eligible(node, pod_spec):
            continue
        name = str((node.get("metadata") or {}).get("name"))
        left = max(0, node_allocatable_gpus(node) - used.get(name, 0))
        count += 1
        free += left
        fits += left // gpus_per_replica if gpus_per_replica > 0 else 1_000_000
    return Room(fits, free, count)


@dataclass(frozen=True)
class Prewarm:
    """Blue-green once the capacity side has added the GPUs `replicas` new replicas lack."""

    replicas: int  # new replicas no free GPU holds now
    gpus_per_replica: int
    timeout_s: float
    fallback: str  # fixed-capacity | fail, when the GPUs have not come by then

    def describe(self) -> str:
        then = ("falls back to fixed-capacity" if self.fallback == "fixed-capacity"
                else "fails")
        return (f"pre-warm: {self.replicas} new replica(s) x {self.gpus_per_replica} GPU(s) "
                f"asked of the capacity side (gpuops.gpu.capacity-needed), placed within "
                f"{self.timeout_s:g} s or the rollout removes them and {then}")


def choose_prewarm(requested: str, no_room: str, fallback: str, timeout_s: float, room: Room,
                   replicas: int, gpus_per_replica: int, k: int) -> Prewarm | None:
    """A pre-warm when there is no room for blue-green and the person chose `prewarm` (mode
    auto or blue-green); None otherwise. Its fallback to fixed-capacity needs what
    fixed-capacity needs (checked now, before anything changes); with mode blue-green asked
    for, a pre-warm that times out fails."""
    if no_room != "prewarm" or requested == "fixed-capacity" or room.fits >= replicas:
        return None
    if requested == "blue-green":
        fallback = "fail"
    if fallback == "fixed-capacity" and replicas <= k:
        raise ConfigError("prewarm_fallback", f"fixed-capacity after a pre-warm moving {k} "
                          f"replica(s) at a time needs more than {k} old replica(s) (there are "
                          f"{replicas}); use `fail`")
    return Prewarm(replicas - room.fits, gpus_per_replica, timeout_s, fallback)


def choose_mode(requested: str, room: Room, replicas: int, gpus_per_replica: int, k: int
                ) -> ChosenMode:
    """The mode to run in, or a `ConfigError` on `mode` saying why the requested one cannot."""
    blue_green_fits = room.fits >= replicas
    if requested == "blue-green" and not blue_green_fits:
        raise ConfigError("mode", f"blue-green needs room for {replicas} new replica(s) of "
                          f"{gpus_per_replica} GPU(s) beside the old; {room.describe(gpus_per_replica)}. "
                          "Use mode `fixed-capacity` (or `auto`), or add GPUs first")
    if requested == "blue-green" or (requested == "auto" and blue_green_fits):
        return "blue-green"
    if replicas <= k:
        raise ConfigError("mode" if requested != "auto" else "capacity_step",
                          f"no room for a new copy ({room.describe(gpus_per_replica)}), and "
                          f"fixed-capacity moving {k} replica(s) at a time needs more than {k} "
                          f"old replica(s) (there are {replicas}): nothing would serve while "
                          "the new ones load")
    return "fixed-capacity"


def capacity_stages(replicas: int, k: int) -> list[tuple[int, int]]:
    """(old replicas, new replicas) after each fixed-capacity stage, k at a time."""
    stages = []
    moved = 0
    while moved < replicas:
        moved = min(replicas, moved + k)
        stages.append((replicas - moved, moved))
    return stages


def capacity_weight(old_ready: int, new_ready: int) -> int:
    """The new version's percentage when weights follow ready replicas (fixed-capacity)."""
    total = old_ready + new_ready
    if total <= 0:
        return 0
    if old_ready == 0:
        return 100
    return max(1, min(99, round(100 * new_ready / total))) if new_ready else 0


def choose_baseline(requested: str, mode: ChosenMode, room: Room, replicas: int,
                    gpus_per_replica: int) -> tuple[bool, str]:
    """Whether the rollout runs with a fresh-copy baseline, and the plan's line saying why
    (not). It needs blue-green and room for the new copy and the baseline both (2 x
    `replicas`): without it the rollout runs without one rather than leave a Pending pod."""
    if requested not in ("fresh-copy", "auto"):
        return False, "none: the new version judged against the old pool"
    asked = "fresh-copy asked" if requested == "fresh-copy" else "auto"
    if mode != "blue-green":
        return False, (f"none ({asked}, but a fresh copy runs beside a blue-green copy only; "
                       "fixed-capacity has no spare GPUs): judged against the old pool")
    if room.fits < 2 * replicas:
        return False, (f"none ({asked}, but a fresh copy needs room for {2 * replicas} "
                       f"replica(s), the new copy's and the baseline's; "
                       f"{room.describe(gpus_per_replica)}): judged against the old pool")
    return True, (f"fresh-copy{' (auto: there is room)' if requested == 'auto' else ''}: "
                  f"{replicas} replica(s) x {gpus_per_replica} GPU(s) of the old "
                  "version, warmed with the new one and given its weight below 50 %; "
                  "the new version judged against it there, against the old pool from 50 % on")
