"""Which idle GPU nodes consolidation removes, and which it keeps and why (pure).

A node is removed only when all of these hold:
- no GPU pod runs on it, and the other pods a drain would move (if any) may move (a
  controller recreates them, no opt-out annotation: `constraints.why_unmovable`) and fit on
  the other schedulable nodes, placed one by one as kube-scheduler's default scoring would
  (`placement.Placer`, the planner's prediction; nodes removed in the same run excluded).
  DaemonSet pods and capacity placeholders do not count: they leave with the node;
- it has been so for at least `idle_for` (the time recorded on the node when a run first saw
  it unused, `gpuops.io/gpu-unused-since`);
- it is not cordoned by someone else (a person's cordon means maintenance, not removal);
- its pool keeps at least what the capacity pre-warm plan holds for its next lead-time
  window (the `target` of the latest `capacity-targets` artifact), and never goes below
  the pool's minimum (the configured one and the AWS group's).

Pools without a readable plan are held whole: removing a node the plan wants warm would cost
the lead time to get it back. Emptiest and newest nodes go first (`removable.node_loads`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from gpuops.common.annotations import SCALE_IN_RUN
from gpuops.tasks.actions.removable import node_loads
from gpuops.tasks.rebalance.constraints import why_unmovable
from gpuops.tasks.rebalance.from_kube import ClusterView
from gpuops.tasks.rebalance.placement import Placer
from gpuops.tasks.rebalance.state import PackState

Obj = Mapping[str, Any]
GPU_UNUSED_SINCE = "gpuops.io/gpu-unused-since"


@dataclass(frozen=True)
class PoolView:
    name: str
    desired: int  # the group's desired size now
    floor: int  # max(configured min_size, the AWS group's minimum)
    held: int | None  # what the capacity plan holds now; None: no readable plan
    price_per_hour: float
    nodes: tuple[Obj, ...] = field(default=())


@dataclass(frozen=True)
class Candidate:
    node: str
    pool: str
    unused_since: datetime
    price_per_hour: float
    moves: tuple[str, ...] = ()  # ns/name of the pods the drain moves elsewhere


@dataclass(frozen=True)
class Kept:
    node: str
    pool: str
    why: str


def parse_since(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None  # unreadable: counted from now, as if first seen


def unused_since(node: Obj, now: datetime) -> datetime:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return parse_since(annotations.get(GPU_UNUSED_SINCE)) or now


def fits_elsewhere(view: ClusterView, node: str, excluded: Iterable[str]) -> str | None:
    """None when every pod on `node` but DaemonSet pods may move and fits on another node
    (not `excluded`, not cordoned), placed one at a time, largest first, by kube-scheduler's
    default scoring; else why not."""
    state, pods = PackState.from_cluster(view.cluster)
    mask = np.array([n not in {node, *excluded} for n in state.node_names], dtype=bool)
    moving = [i for i, pod in enumerate(view.cluster.running)
              if pod.node == node and pod.owner_kind != "DaemonSet"]
    for i in moving:
        why = why_unmovable(pods[i])
        if why:
            return f"{pods[i].key} may not move: {why}"
    for i in moving:
        state.unbind(i)
    placer = Placer(state, "default")
    for i in sorted(moving, key=lambda i: (-pods[i].gpu_total_milli, -pods[i].cpu_milli,
                                           pods[i].key)):
        if not placer.place(i, mask):
            return f"{pods[i].key} fits on no other node"
    return None


def choose(pools: Sequence[PoolView], pods: Iterable[Obj], *, now: datetime,
           idle_for: timedelta, view: ClusterView | None = None
           ) -> tuple[list[Candidate], list[Kept]]:
    """The nodes to remove and the pool nodes kept, each with its reason. Without `view`
    (the planner's model of the whole cluster) only nodes running nothing are removed."""
    pods = list(pods)
    chosen: list[Candidate] = []
    kept: list[Kept] = []
    for pool in pools:
        keep = max(pool.floor, pool.held if pool.held is not None else pool.desired)
        room = pool.desired - keep
        by_name = {n["metadata"]["name"]: n for n in pool.nodes}
        for load in node_loads(list(pool.nodes), pods):
            node = by_name[load.node]
            annotations = node["metadata"].get("annotations") or {}
            since = unused_since(node, now)
            unfit = None
            if load.other_pods and not load.gpu_pods:
                unfit = ("no cluster model to place them" if view is None else
                         fits_elsewhere(view, load.node, [c.node for c in chosen]))
            if load.gpu_pods:
                why = "runs GPU pods: " + ", ".join(load.gpu_pods)
            elif unfit:
                why = f"runs pods a drain would move ({', '.join(load.other_pods)}): {unfit}"
            elif load.cordoned and not annotations.get(SCALE_IN_RUN):
                why = "cordoned by someone else"
            elif now - since < idle_for:
                why = (f"unused for {(now - since).total_seconds():.0f}s, less than "
                       f"{idle_for.total_seconds():.0f}s")
            elif room <= 0:
                why = _held_reason(pool, keep)
            else:
                chosen.append(Candidate(load.node, pool.name, since, pool.price_per_hour,
                                        load.other_pods))
                room -= 1
                continue
            kept.append(Kept(load.node, pool.name, why))
    return chosen, kept


def _held_reason(pool: PoolView, keep: int) -> str:
    if pool.held is None:
        return "no capacity plan to read: the pool is held as it is"
    if pool.held >= pool.floor:
        return (f"the capacity plan holds {pool.held} node(s) in this pool for its next "
                f"lead-time window ({pool.desired} now)")
    return f"the pool is at its minimum {keep}"


def held_by_plan(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Pool -> nodes held, from the rows of the `capacity-targets` table artifact."""
    held = {}
    for i, row in enumerate(rows):
        try:
            held[str(row["pool"])] = int(row["target"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"capacity-targets row {i}: no integer `target` for a `pool` "
                             f"({row!r})") from e
    return held
