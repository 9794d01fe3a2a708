"""Which GPU nodes consolidation removes, where their pods go, and which nodes stay and why
(pure).

A node is removed only when all of these hold:
- every pod a drain would move (GPU pods included; DaemonSet pods and capacity placeholders
  leave with the node) may move — a controller recreates it, no opt-out annotation, no local
  storage (`constraints.why_unmovable`) — and the run's PodDisruptionBudgets allow that many
  disruptions, counted over every node the run removes;
- each of those pods has a place on a node that stays, placed one at a time, largest first,
  as kube-scheduler's default scoring would (`placement.Placer`, the planner's prediction),
  in the room left once the Pending GPU pods are placed (they are ahead in the scheduler's
  queue: consolidation never takes their room), honouring node selectors, required
  affinity, taints, cordons and GPU models (`constraints.admits`). Placements add up over
  the run: a node the run removes takes no moved pod, and a node that takes moved pods is
  not removed in the same run (it stays, by plan);
- no Pending GPU pod would land on it (it is wanted);
- its GPUs have been spare (no GPU pod, or only GPU pods that may move and fit elsewhere)
  for at least `idle_for` — the time recorded on the node when a run first saw it so,
  `gpuops.io/gpu-unused-since`;
- it is not cordoned by someone else (a person's cordon means maintenance, not removal);
- its pool keeps at least what the capacity pre-warm plan holds for its next lead-time
  window (the `target` of the latest `capacity-targets` artifact), and never goes below
  the pool's minimum (the configured one and the AWS group's).

Priorities: a moved pod only takes free room (after the Pending pods), so no pod is evicted
to make room for it. Pools without a readable plan are held whole: removing a node the plan
wants warm would cost the lead time to get it back. Emptiest and newest nodes are judged first
(`removable.node_loads`), over all pools at once, so empty nodes go before any pod moves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from gpuops.common.annotations import SCALE_IN_RUN
from gpuops.tasks.actions.removable import NodeLoad, node_loads
from gpuops.tasks.rebalance.constraints import why_unmovable
from gpuops.tasks.rebalance.from_kube import ClusterView
from gpuops.tasks.rebalance.model import MILLI, Pod
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
class Move:
    """A pod the drain evicts and the node the plan expects its replacement on."""

    pod: str  # namespace/name
    to_node: str
    gpus_milli: int = 0

    def describe(self) -> str:
        gpus = f" ({self.gpus_milli / MILLI:g} GPU)" if self.gpus_milli else ""
        return f"{self.pod}{gpus} → {self.to_node}"


@dataclass(frozen=True)
class Candidate:
    node: str
    pool: str
    unused_since: datetime
    price_per_hour: float
    moves: tuple[Move, ...] = ()
    gpus: int = 0  # the node's GPUs: the GPU-hours saved per hour it is gone

    def describe_moves(self) -> str:
        return ", ".join(m.describe() for m in self.moves) or "nothing"


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


class DrainPlanner:
    """Where the pods of each node a run removes go, node after node on one picture of the
    cluster (see the module docstring). `refusal` says why a node's pods cannot go without
    placing anything; `place` places them and, with `commit`, keeps the placements (the
    node then leaves, its pods' destinations stay)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.state, self.pods = PackState.from_cluster(view.cluster)
        self.row = {p.key: i for i, p in enumerate(self.pods)}
        self.budget = {b.name: b.disruptions_allowed for b in view.cluster.pdbs}
        self.leaving: list[str] = []
        self.receiving: dict[str, list[str]] = {}  # node -> the nodes whose pods it takes
        self.wanted = self._place_pending()

    def _place_pending(self) -> dict[str, list[str]]:
        """Bind the Pending GPU pods where the scheduler would, highest priority first (its
        queue's order); node -> the pending pods it would take."""
        placer = Placer(self.state, "default")
        first = len(self.view.cluster.running)
        wanted: dict[str, list[str]] = {}
        for i in sorted(range(first, len(self.pods)), key=lambda i: (
                -self.pods[i].priority, -self.pods[i].gpu_total_milli, self.pods[i].key)):
            choice = placer.choose(i)
            if choice is not None:
                self.state.bind(i, *choice)
                wanted.setdefault(self.state.node_names[choice[0]], []).append(self.pods[i].key)
        return wanted

    def refusal(self, node: str, keys: Sequence[str]) -> str | None:
        """Why `node` may not be emptied of the pods `keys` whatever the room (None: it may)."""
        for key in keys:
            if key not in self.row:
                skipped = self.view.skipped.get(key, "not a running pod of the model")
                return f"{key} cannot be placed by the planner ({skipped})"
            why = why_unmovable(self.pods[self.row[key]])
            if why:
                return f"{key} may not move: {why}"
        for pdb, need in sorted(self._disruptions(keys).items()):
            allowed = self.budget.get(pdb, 0)
            if need > allowed:
                return (f"PodDisruptionBudget {pdb} allows {allowed} more disruption(s) in "
                        f"this run, the drain needs {need}")
        if node in self.wanted:
            return f"pending pod(s) {', '.join(self.wanted[node])} would be scheduled here"
        if node in self.receiving:
            return (f"takes pods moved from {', '.join(self.receiving[node])} in this run, "
                    "so it stays")
        return None

    def place(self, node: str, keys: Sequence[str], *, commit: bool = True
              ) -> tuple[Move, ...] | str:
        """The moves that empty `node` of `keys` onto nodes that stay, or why there are none
        (nothing kept then)."""
        why = self.refusal(node, keys)
        if why:
            return why
        trial = self.state.copy()
        rows = [self.row[k] for k in keys]
        for i in rows:
            trial.unbind(i)
        gone = {node, *self.leaving}
        mask = np.array([n not in gone for n in trial.node_names], dtype=bool)
        placer = Placer(trial, "default")
        moves = []
        for i in sorted(rows, key=lambda i: _size(self.pods[i])):
            choice = placer.choose(i, mask)
            if choice is None:
                return f"{self.pods[i].key} fits on no node that stays"
            trial.bind(i, *choice)
            moves.append(Move(self.pods[i].key, trial.node_names[choice[0]],
                              self.pods[i].gpu_total_milli))
        if commit:
            self.state = trial
            self.leaving.append(node)
            for pdb, need in self._disruptions(keys).items():
                self.budget[pdb] -= need
            for m in moves:
                sources = self.receiving.setdefault(m.to_node, [])
                if node not in sources:
                    sources.append(node)
        return tuple(sorted(moves, key=lambda m: m.pod))

    def _disruptions(self, keys: Iterable[str]) -> Counter[str]:
        return Counter(pdb for k in keys if (pdb := self.pods[self.row[k]].pdb))


def _size(pod: Pod) -> tuple[int, int, int, str]:
    return (-pod.gpu_total_milli, -pod.cpu_milli, -pod.memory_mib, pod.key)


def _moving(load: NodeLoad) -> tuple[str, ...]:
    return load.gpu_pods + load.other_pods


def spare_nodes(view: ClusterView, nodes: Sequence[Obj], pods: Iterable[Obj]) -> set[str]:
    """The nodes whose GPUs are spare now: no GPU pod a drain would move, or only pods that
    may move and would each node alone fit elsewhere (the idle clock runs for them)."""
    planner = DrainPlanner(view)
    return {load.node for load in node_loads(nodes, pods)
            if not load.gpu_pods or not isinstance(
                planner.place(load.node, _moving(load), commit=False), str)}


def choose(pools: Sequence[PoolView], pods: Iterable[Obj], *, now: datetime,
           idle_for: timedelta, view: ClusterView | None = None
           ) -> tuple[list[Candidate], list[Kept]]:
    """The nodes to remove (each with its moves) and the pool nodes kept, each with its
    reason. Without `view` (the planner's model of the whole cluster) only nodes running
    nothing are removed."""
    pods = list(pods)
    planner = DrainPlanner(view) if view is not None else None
    pool_of = {n["metadata"]["name"]: pool for pool in pools for n in pool.nodes}
    by_name = {n["metadata"]["name"]: n for pool in pools for n in pool.nodes}
    keep = {p.name: max(p.floor, p.held if p.held is not None else p.desired) for p in pools}
    room = {p.name: p.desired - keep[p.name] for p in pools}
    gpus = {} if view is None else {n.name: n.gpus for n in view.cluster.nodes}
    chosen: list[Candidate] = []
    kept: list[Kept] = []
    for load in node_loads(list(by_name.values()), pods):
        pool = pool_of[load.node]
        annotations = by_name[load.node]["metadata"].get("annotations") or {}
        since = unused_since(by_name[load.node], now)
        moving = _moving(load)
        if planner is None:
            unfit = "no cluster model to place them" if moving else None
        else:
            unfit = planner.refusal(load.node, moving)
        if unfit is None and load.cordoned and not annotations.get(SCALE_IN_RUN):
            why = "cordoned by someone else"
        elif unfit is None and now - since < idle_for:
            why = (f"spare for {(now - since).total_seconds():.0f}s, less than "
                   f"{idle_for.total_seconds():.0f}s")
        elif unfit is None and room[pool.name] <= 0:
            why = _held_reason(pool, keep[pool.name])
        else:
            placed = unfit or (planner.place(load.node, moving) if planner is not None
                               else ())
            if not isinstance(placed, str):
                chosen.append(Candidate(load.node, pool.name, since, pool.price_per_hour,
                                        placed, gpus.get(load.node, 0)))
                room[pool.name] -= 1
                continue
            why = _pods_prefix(load) + placed
        kept.append(Kept(load.node, pool.name, why))
    return chosen, kept


def _pods_prefix(load: NodeLoad) -> str:
    if load.gpu_pods:
        return f"runs GPU pods ({', '.join(load.gpu_pods)}): "
    if load.other_pods:
        return f"runs pods a drain would move ({', '.join(load.other_pods)}): "
    return ""


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
