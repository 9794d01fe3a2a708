"""The rebalance planner: which running pods move where so that Pending GPU pods fit.

Why a planner and not the scheduler: kube-scheduler places one pod at a time and never
relocates a running one; preemption evicts per node and does not re-place the victims. When
1-3 free GPUs sit on many nodes and an 8-GPU pod waits, moving a few small pods elsewhere
frees a whole node. The plan says which, at the least cost, within every rule.

Rules (issue 17, "Plan"):
- a pod moves only if `constraints.why_unmovable` allows it (a controller recreates it, not a
  DaemonSet pod, no local storage unless allowed, no opt-out annotation);
- never a pod of higher priority to place a lower one: a pod moves only for a pending pod of
  at least its priority;
- a PodDisruptionBudget's allowed disruptions are never exceeded; the whole plan moves at
  most `max_moves` pods;
- a moved pod lands where it may run (selector, affinity, taints, GPU model) and fits, and
  never back on its own node; every moved pod lands somewhere (nothing is dropped).

Two methods, both time-bounded, both returning the best plan found and its status:
- `milp` (small candidate sets): exact, cvxpy + HiGHS, see `repack_milp.py`;
- `heuristic` (any size): lazy greedy over pending pods. For a pending pod it looks at the
  nodes that could host it once movable pods leave (an upper bound from what cannot move),
  ranked by how much is missing; on the best few it picks the cheapest set of pods to evict
  (whole devices for whole-GPU pods, the fewest pods on one device for a shared one, then CPU
  and memory) and re-places each evicted pod elsewhere with the fragmentation-aware policy
  (FGD, so the moved pods fill holes rather than open new ones); an evicted pod that fits
  nowhere may take the place of a smaller pod r on another node, r going elsewhere (a swap:
  this is what realigns CPU with free GPUs). Nodes whose CPU-only movable pods cover what CPU
  is missing are tried first (those pods re-place anywhere). Pending pods are served best
  value first: GPUs placed per unit of move cost, re-evaluated lazily when the nodes an option
  relies on have changed. Local improvement: further passes in which pods moved by an
  earlier pass may move again, until a pass serves no one; then, with budget left, FGD
  descent: move the pod whose move lowers fragmentation most (from the most fragmented nodes
  to where the pod fragments least), retrying the pending pods on each node it frees. Within
  one plan it places few pods, but it leaves the cluster shaped for the pods that arrive next
  (on the trace's replay with a repack at each KPI point: 5.67 -> 4.99 % unallocated at 100 %
  arrived from Best-fit, seed 42).

A plan that cannot help says why: nothing pending, the pending shape fits no node even
empty (a capacity problem for the capacity flow), no candidate may move, the budget is
exhausted, or no way was found within the limits.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuops.common.annotations import MOVE_COST
from gpuops.common.errors import ConfigError
from gpuops.tasks.rebalance.constraints import why_unmovable
from gpuops.tasks.rebalance.fragmentation import (
    Shapes,
    node_fragmentation,
    state_fragmentation,
    stranded_gpus,
    typical_shapes,
)
from gpuops.tasks.rebalance.model import MILLI, Cluster, Pod
from gpuops.tasks.rebalance.placement import Placer
from gpuops.tasks.rebalance.state import PackState

METHODS = ("auto", "milp", "heuristic")

# statuses
OPTIMAL = "optimal"  # the MILP proved it
FEASIBLE = "feasible"  # a valid plan, not proven the best
TIME_LIMIT = "time_limit"  # stopped by the time bound; the best plan found so far
NOTHING_PENDING = "nothing_pending"
NO_MOVES_NEEDED = "no_moves_needed"  # the pending pods fit as the cluster is
CAPACITY = "capacity"  # some pending shape fits no node even empty: buy capacity
CANNOT_HELP = "cannot_help"


@dataclass(frozen=True)
class RepackOptions:
    """How far the planner may go. `max_moves` None = no limit but the PDBs'."""

    max_moves: int | None = None
    max_moves_per_pending: int = 16
    default_move_cost: float = 1.0
    allow_local_storage: bool = False
    method: str = "auto"
    milp_max_candidates: int = 60  # movable pods x nodes beyond which `auto` is heuristic
    milp_max_nodes: int = 40
    time_limit_s: float = 10.0
    mip_rel_gap: float = 0.0
    nodes_tried: int = 16  # per pending pod, the most promising nodes evaluated exactly
    swap_tries: int = 12  # per pod that fits nowhere, the pods it may swap with tried
    swap_depth: int = 1  # a swapped-out pod may itself swap, this many levels in all
    passes: int = 6  # later passes let pods moved in earlier ones move again
    # with budget left once no pending pod can be served: move the pods whose move lowers
    # FGD fragmentation most (fragmented node -> where it fragments least), retrying the
    # pending pods on each node a move frees
    defragment: bool = True
    defragment_nodes: int = 24
    destination_policy: str = "fgd"  # how moved pods are re-placed: fgd or best_fit
    landing_policy: str = "best_fit"  # how pending pods that fit without moves are predicted
    # pods (namespace/name -> why) to leave where they are this time, e.g. the pod whose
    # eviction a PodDisruptionBudget refused earlier in the same run
    frozen: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError("method", f"{self.method!r} is not one of {list(METHODS)}")
        if self.max_moves is not None and self.max_moves < 0:
            raise ConfigError("max_moves", f"must be >= 0, got {self.max_moves}")
        if not self.time_limit_s > 0:
            raise ConfigError("time_limit_s", f"must be > 0, got {self.time_limit_s!r}")
        if self.default_move_cost < 0:
            raise ConfigError("default_move_cost", f"must be >= 0, got {self.default_move_cost}")
        if self.nodes_tried < 1 or self.max_moves_per_pending < 1:
            raise ConfigError("nodes_tried", "nodes_tried and max_moves_per_pending must be >= 1")


@dataclass(frozen=True)
class Move:
    pod: str
    from_node: str
    to_node: str
    gpu_ids: tuple[int, ...]
    cost: float


@dataclass(frozen=True)
class Landing:
    pod: str
    node: str
    gpu_ids: tuple[int, ...]


@dataclass(frozen=True)
class RepackPlan:
    """What to do and what it achieves; `status` and `reason` say how sure and why not."""

    moves: tuple[Move, ...]
    landings: tuple[Landing, ...]  # pending pods and where they then land
    unplaced: tuple[str, ...]  # pending pods the plan does not place
    gpus_placed: float  # GPUs (milli / 1000) the landed pending pods get
    cost: float
    status: str
    reason: str | None
    method: str
    solve_s: float
    stranded_gpus_before: float
    stranded_gpus_after: float
    fragmentation_gpus_before: float  # FGD measure, cluster sum, in GPUs
    fragmentation_gpus_after: float
    unmovable: dict[str, str] = field(default_factory=dict)  # pod -> why it may not move
    # pending pods that fit no node even empty: capacity's business, not a repack's
    fit_no_node: tuple[str, ...] = ()


@dataclass
class PodRules:
    """Per pod row of a `PackState`: may it move, its priority, PDB (-1 none), move cost."""

    movable: np.ndarray
    priority: np.ndarray
    pdb: np.ndarray
    cost: np.ndarray
    pdb_allowed: np.ndarray  # per PDB index

    @classmethod
    def default(cls, rows: int) -> PodRules:
        return cls(np.ones(rows, bool), np.zeros(rows, np.int64), np.full(rows, -1, np.int64),
                   np.ones(rows), np.zeros(0, np.int64))


@dataclass
class StatePlan:
    """The planner's answer on a `PackState` (rows and node indices); already applied."""

    moves: list[tuple[int, int, int, tuple[int, ...]]]  # pod, from, to, devices
    landings: list[tuple[int, int, tuple[int, ...]]]  # pending pod, node, devices
    unplaced: list[int]
    cost: float
    status: str
    reason: str | None
    method: str
    solve_s: float


# --- the entry point for the flow ---------------------------------------------------------

def plan_repack(cluster: Cluster, options: RepackOptions | None = None, *,
                shapes: Shapes | None = None) -> RepackPlan:
    """Plan moves for `cluster` (see the module docstring). Changes nothing.

    `shapes` weighs the FGD measure; default: the typical shapes of the cluster's pods.
    """
    options = options or RepackOptions()
    started = time.monotonic()
    state, pods = PackState.from_cluster(cluster)
    rules, unmovable = rules_for(cluster, pods, options)
    if shapes is None:
        shapes = typical_shapes((p.cpu_milli, p.gpu_count, p.gpu_milli, p.gpu_models)
                                for p in pods) if pods else None
    pending = list(range(len(cluster.running), len(pods)))
    stranded_before = stranded_gpus(state, pending)
    frag_before = _frag_gpus(state, shapes)
    result = repack_state(state, pending, rules, options, shapes=shapes, deadline=started
                          + options.time_limit_s)
    names = state.node_names
    moves = tuple(Move(pods[q].key, names[a], names[b], devs, float(rules.cost[q]))
                  for q, a, b, devs in result.moves)
    landings = tuple(Landing(pods[p].key, names[v], devs) for p, v, devs in result.landings)
    still = [p for p in pending if state.pod_node[p] < 0]
    reason = result.reason
    if result.status in (CANNOT_HELP, CAPACITY) and unmovable and reason is None:
        reason = "no candidate may move"
    placed_milli = sum(pods[p].gpu_total_milli for p, _, _ in result.landings)
    return RepackPlan(moves=moves, landings=landings,
                      unplaced=tuple(pods[p].key for p in still),
                      gpus_placed=placed_milli / MILLI, cost=result.cost,
                      status=result.status, reason=reason, method=result.method,
                      solve_s=time.monotonic() - started, stranded_gpus_before=stranded_before,
                      stranded_gpus_after=stranded_gpus(state, still),
                      fragmentation_gpus_before=frag_before,
                      fragmentation_gpus_after=_frag_gpus(state, shapes), unmovable=unmovable,
                      fit_no_node=tuple(pods[p].key for p in still
                                        if pods[p].gpu_count
                                        and not _fits_empty_somewhere(state, p)))


def rules_for(cluster: Cluster, pods: Sequence[Pod],
              options: RepackOptions) -> tuple[PodRules, dict[str, str]]:
    """Per pod row: movable (and why not), priority, PDB, move cost."""
    pdb_index = {b.name: i for i, b in enumerate(cluster.pdbs)}
    unmovable: dict[str, str] = {}
    movable = np.zeros(len(pods), bool)
    cost = np.zeros(len(pods))
    for i, pod in enumerate(pods):
        cost[i] = move_cost(pod, options.default_move_cost)
        if pod.node is None:
            continue
        why = why_unmovable(pod, allow_local_storage=options.allow_local_storage) \
            or options.frozen.get(pod.key)
        if why is None and pod.pdb is not None \
                and cluster.pdbs[pdb_index[pod.pdb]].disruptions_allowed == 0:
            why = f"PodDisruptionBudget {pod.pdb!r} allows no disruption"
        if why is None:
            movable[i] = True
        else:
            unmovable[pod.key] = why
    rules = PodRules(movable=movable, priority=np.array([p.priority for p in pods], np.int64),
                     pdb=np.array([pdb_index.get(p.pdb, -1) if p.pdb else -1 for p in pods],
                                  np.int64),
                     cost=cost, pdb_allowed=np.array([b.disruptions_allowed
                                                      for b in cluster.pdbs], np.int64))
    return rules, unmovable


def move_cost(pod: Pod, default: float) -> float:
    """The pod's own `move_cost`, else its `gpuops.io/move-cost` annotation, else `default`."""
    if pod.move_cost is not None:
        return float(pod.move_cost)
    raw = pod.annotations.get(MOVE_COST)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"pod {pod.key!r}: annotation {MOVE_COST}",
                          f"must be a number, got {raw!r}") from None
    if not value >= 0 or math.isinf(value):
        raise ConfigError(f"pod {pod.key!r}: annotation {MOVE_COST}",
                          f"must be a finite number >= 0, got {raw!r}")
    return value


def _frag_gpus(state: PackState, shapes: Shapes | None) -> float:
    return float(state_fragmentation(state, shapes).sum()) / MILLI if shapes is not None else 0.0


# --- the planner on a PackState (the bench calls this directly) ---------------------------

def repack_state(state: PackState, pending: Sequence[int], rules: PodRules,
                 options: RepackOptions, *, shapes: Shapes | None = None,
                 deadline: float | None = None) -> StatePlan:
    """Plan and apply (on `state`) moves so that `pending` rows fit; see the module docstring."""
    started = time.monotonic()
    deadline = deadline if deadline is not None else started + options.time_limit_s
    pending = [p for p in pending if state.pod_node[p] < 0]
    gpu_pending = [p for p in pending if state.pod_num[p] > 0]
    if not gpu_pending:
        return StatePlan([], [], list(pending), 0.0, NOTHING_PENDING, "no GPU pod is pending",
                         "none", time.monotonic() - started)
    never = [p for p in gpu_pending if not _fits_empty_somewhere(state, p)]
    method = options.method
    if method == "auto":
        method = "milp" if _small_enough(state, rules, pending, options) else "heuristic"
    if method == "milp":
        from gpuops.tasks.rebalance.repack_milp import solve_milp

        plan = solve_milp(state, [p for p in gpu_pending if p not in never], rules, options,
                          deadline=deadline)
    else:
        plan = Greedy(state, rules, options, shapes, deadline).run(
            [p for p in gpu_pending if p not in never])
    plan.unplaced = [p for p in pending if state.pod_node[p] < 0]
    plan.solve_s = time.monotonic() - started
    if never and not plan.landings:
        plan.status, plan.reason = CAPACITY, (
            f"{len(never)} pending GPU pod(s) fit no node even empty: a capacity problem")
    elif never and plan.reason is None:
        plan.reason = f"{len(never)} pending GPU pod(s) fit no node even empty"
    return plan


def _fits_empty_somewhere(state: PackState, p: int) -> bool:
    ok = state.admit[state.pod_sig[p]] & (state.cpu_cap >= state.pod_cpu[p]) \
        & (state.mem_cap >= state.pod_mem[p])
    if state.pod_num[p]:
        ok &= (state.gpu_cap >= state.pod_milli[p]).sum(axis=1) >= state.pod_num[p]
    return bool(ok.any())


def _small_enough(state: PackState, rules: PodRules, pending: Sequence[int],
                  options: RepackOptions) -> bool:
    movable = int((rules.movable & (state.pod_node >= 0)).sum())
    return movable <= options.milp_max_candidates and state.n <= options.milp_max_nodes


@dataclass(order=True)
class _Option:
    """Serve pending pod `p` on `node`: evict `evict`, re-placed as `dest`. Sorts best
    first: higher priority, then more GPU placed per unit of move cost, then cheaper."""

    neg_priority: int
    neg_value: float
    cost: float
    p: int = field(compare=False)
    node: int = field(compare=False)
    devices: tuple[int, ...] = field(compare=False)
    dest: list[tuple[int, int, tuple[int, ...]]] = field(compare=False)
    versions: dict[int, int] = field(compare=False)


class Greedy:
    """The heuristic planner (module docstring); `run` applies its plan to the state."""

    def __init__(self, state: PackState, rules: PodRules, options: RepackOptions,
                 shapes: Shapes | None, deadline: float) -> None:
        self.s = state
        self.rules = rules
        self.options = options
        self.deadline = deadline
        self.shapes = shapes
        dest = options.destination_policy if shapes is not None else "best_fit"
        self.dest = Placer(state, dest, shapes=shapes)
        self.land = Placer(state, options.landing_policy if options.landing_policy != "fgd"
                           or shapes is not None else "best_fit", shapes=shapes)
        self.budget = options.max_moves if options.max_moves is not None else 1 << 60
        self.pdb_left = rules.pdb_allowed.copy()
        self.moved = np.zeros(len(state.pod_cpu), bool)  # moved or landed: stays put now
        self.timed_out = False
        # per node, bumped when the plan commits a change there (trials leave it alone)
        self.committed = np.zeros(state.n, np.int64)
        self.epoch = 0  # bumped by every committed change: keys the failure caches
        self._no_swap: set[tuple[Any, ...]] = set()
        costs = rules.cost[rules.movable & (state.pod_node >= 0)]
        self.min_cost = float(costs.min()) if len(costs) else 0.0
        self._origin: dict[int, int] = {}

    def run(self, pending: Sequence[int]) -> StatePlan:
        s = self.s
        landings: list[tuple[int, int, tuple[int, ...]]] = []
        moves: list[tuple[int, int, int, tuple[int, ...]]] = []
        cost = 0.0
        # highest priority first, then the biggest, then arrival order
        order = sorted(pending, key=lambda p: (-self.rules.priority[p],
                                               -s.pod_num[p] * s.pod_milli[p], p))
        waiting = []
        for p in order:
            choice = self.land.choose(p)
            if choice is None:
                waiting.append(p)
            else:
                s.bind(p, *choice)
                self.moved[p] = True
                self.committed[choice[0]] += 1
                self.epoch += 1
                landings.append((p, *choice))
        if not waiting:
            return StatePlan(moves, landings, [], 0.0, NO_MOVES_NEEDED, None, "heuristic", 0.0)
        # pending pods alike (same request, rules, priority) form a class served in arrival
        # order: one option per class in the heap at a time
        classes: dict[tuple[Any, ...], list[int]] = {}
        for p in waiting:
            classes.setdefault(self._class_key(p), []).append(p)
        for phase in range(self.options.passes):
            # a later pass lets pods moved in an earlier one move again: the picture changed
            if phase:
                self.moved[:] = False
                self.moved[[p for p, _, _ in landings]] = True
            served_before = len(landings)
            heap: list[_Option] = []
            failed: set[tuple[Any, ...]] = set()
            for members in classes.values():
                if self._expired():
                    break
                if not members:
                    continue
                option = self._best_option(members[0], failed)
                if option is not None:
                    heapq.heappush(heap, option)
            while heap and self.budget > 0 and not self._expired():
                option = heapq.heappop(heap)
                members = classes[self._class_key(option.p)]
                stale = any(self.committed[v] != ver for v, ver in option.versions.items())
                if stale or len(option.dest) > self.budget or not self._pdb_ok(option.dest):
                    fresh = self._best_option(option.p, failed)
                    if fresh is not None and not (fresh.versions == option.versions
                                                  and not stale):
                        heapq.heappush(heap, fresh)
                    continue
                self._apply(option)
                members.remove(option.p)
                landings.append((option.p, option.node, option.devices))
                for q, v, devs in option.dest:
                    moves.append((q, self._origin[q], v, devs))
                cost += option.cost
                self.budget -= len(option.dest)
                if members:
                    fresh = self._best_option(members[0], failed)
                    if fresh is not None:
                        heapq.heappush(heap, fresh)
            if len(landings) == served_before:
                break
        if self.options.defragment and self.shapes is not None:
            left = [p for members in classes.values() for p in members
                    if s.pod_node[p] < 0]
            cost += self._defragment(left, landings, moves)
        if self.timed_out:
            status, reason = TIME_LIMIT, "stopped at the time limit with the best plan so far"
        elif moves:
            status, reason = FEASIBLE, None
        elif landings:
            status, reason = NO_MOVES_NEEDED, None
        else:
            status = CANNOT_HELP
            if self.budget <= 0 or (self.options.max_moves == 0):
                reason = "the move budget is exhausted"
            elif not (self.rules.movable & (s.pod_node >= 0)).any():
                reason = "no candidate may move"
            else:
                reason = "no set of allowed moves makes a pending pod fit"
        return StatePlan(moves, landings, [], cost, status, reason, "heuristic", 0.0)

    def _defragment(self, pending: list[int], landings: list[tuple[int, int, tuple[int, ...]]],
                    moves: list[tuple[int, int, int, tuple[int, ...]]]) -> float:
        """Local improvement: fragmentation-descent moves while they help (module docstring)."""
        s, r = self.s, self.rules
        if not pending:
            return 0.0
        top = max(int(r.priority[p]) for p in pending)
        access = self.dest.access
        shapes = self.shapes
        assert shapes is not None  # run() defragments only with shapes (dest has `access`)
        cost = 0.0
        tried: set[int] = set()
        while self.budget > 0 and pending and not self._expired():
            frag = self.dest.fragmentation_now(np.arange(s.n))
            order = [int(v) for v in np.argsort(-frag) if int(v) not in tried and frag[v] > 0]
            best = None
            for v in order[: self.options.defragment_nodes]:
                pods = [q for q in sorted(s.pods_on[v]) if r.movable[q] and not self.moved[q]
                        and r.priority[q] <= top
                        and (r.pdb[q] < 0 or self.pdb_left[r.pdb[q]] > 0)]
                if not pods:
                    tried.add(v)
                    continue
                cpu = s.cpu_free[v] + s.pod_cpu[pods]
                gpu = np.repeat(s.gpu_free[v][None, :], len(pods), axis=0)
                for i, q in enumerate(pods):
                    for g in s.pod_gpus[q]:
                        gpu[i, g] += s.pod_milli[q]
                after = node_fragmentation(cpu, gpu, np.full(len(pods), s.model[v]),
                                           shapes, access)
                for i in np.argsort(after)[:3]:
                    q = pods[int(i)]
                    gain = frag[v] - after[i]
                    if gain <= 0 or (best is not None and gain - r.cost[q] <= best[0]):
                        continue
                    origin = (v, s.pod_gpus[q])
                    s.unbind(q)
                    not_v = np.ones(s.n, bool)
                    not_v[v] = False
                    choice = self.dest.choose(q, not_v)
                    if choice is not None:
                        d = choice[0]
                        before_d = self.dest.fragmentation_now(np.array([d]))[0]
                        s.bind(q, *choice)
                        net = gain - (self.dest.fragmentation_now(np.array([d]))[0] - before_d)
                        s.unbind(q)
                        if net > 0 and (best is None or net - r.cost[q] > best[0]):
                            best = (net - r.cost[q], q, v, choice)
                    s.bind(q, *origin)
            if best is None:
                break
            _, q, v, (d, devs) = best
            s.unbind(q)
            s.bind(q, d, devs)
            self.moved[q] = True
            self.epoch += 1
            self.committed[[v, d]] += 1
            if r.pdb[q] >= 0:
                self.pdb_left[r.pdb[q]] -= 1
            moves.append((q, v, d, devs))
            cost += float(r.cost[q])
            self.budget -= 1
            tried.discard(v)
            only_v = np.zeros(s.n, bool)
            only_v[v] = True
            for p in list(pending):
                choice = self.land.choose(p, only_v)
                if choice is not None:
                    s.bind(p, *choice)
                    self.moved[p] = True
                    landings.append((p, *choice))
                    pending.remove(p)
        return cost

    # --- options --------------------------------------------------------------------------

    def _expired(self) -> bool:
        if time.monotonic() >= self.deadline:
            self.timed_out = True
        return self.timed_out

    def _eligible(self, q: int, p: int) -> bool:
        r = self.rules
        return bool(r.movable[q] and not self.moved[q] and r.priority[q] <= r.priority[p]
                    and (r.pdb[q] < 0 or self.pdb_left[r.pdb[q]] > 0))

    def _pdb_ok(self, dest: list[tuple[int, int, tuple[int, ...]]]) -> bool:
        need: dict[int, int] = {}
        for q, _, _ in dest:
            if self.rules.pdb[q] >= 0:
                need[self.rules.pdb[q]] = need.get(self.rules.pdb[q], 0) + 1
        return all(self.pdb_left[b] >= n for b, n in need.items())

    def _candidates(self, p: int) -> np.ndarray:
        """Nodes that could host `p` if every pod that may move for it left, best first."""
        s = self.s
        fixed_gpu = np.zeros_like(s.gpu_free)
        fixed_cpu = np.zeros(s.n, np.int64)
        fixed_mem = np.zeros(s.n, np.int64)
        placed = np.flatnonzero(s.pod_node >= 0)
        r = self.rules
        stuck = placed[~(r.movable[placed] & ~self.moved[placed]
                         & (r.priority[placed] <= r.priority[p]))]
        np.add.at(fixed_cpu, s.pod_node[stuck], s.pod_cpu[stuck])
        np.add.at(fixed_mem, s.pod_node[stuck], s.pod_mem[stuck])
        for q in stuck[s.pod_num[stuck] > 0]:
            fixed_gpu[s.pod_node[q], list(s.pod_gpus[q])] += s.pod_milli[q]
        num, milli = s.pod_num[p], s.pod_milli[p]
        reclaim = s.gpu_cap - fixed_gpu
        ok = s.admit[s.pod_sig[p]] & (s.cpu_cap - fixed_cpu >= s.pod_cpu[p]) \
            & (s.mem_cap - fixed_mem >= s.pod_mem[p]) \
            & ((reclaim >= milli).sum(axis=1) >= num)
        nodes = np.flatnonzero(ok)
        if not len(nodes):
            return nodes
        # how much is missing now: GPU on the best `num` reclaimable devices, then CPU; the
        # nodes whose CPU-only movable pods cover what CPU is short come first (those pods
        # re-place easily: they need no device)
        free = np.where(reclaim[nodes] >= milli, s.gpu_free[nodes], -MILLI)
        top = -np.sort(-free, axis=1)[:, :num]
        gpu_short = np.maximum(milli - top, 0).sum(axis=1)
        cpu_short = np.maximum(s.pod_cpu[p] - s.cpu_free[nodes], 0) / 8  # ~ milli-GPU scale
        light = placed[(s.pod_num[placed] == 0) & r.movable[placed] & ~self.moved[placed]
                       & (r.priority[placed] <= r.priority[p])]
        light_cpu = np.zeros(s.n, np.int64)
        light_mem = np.zeros(s.n, np.int64)
        np.add.at(light_cpu, s.pod_node[light], s.pod_cpu[light])
        np.add.at(light_mem, s.pod_node[light], s.pod_mem[light])
        easy = (gpu_short == 0) & (s.cpu_free[nodes] + light_cpu[nodes] >= s.pod_cpu[p]) \
            & (s.mem_free[nodes] + light_mem[nodes] >= s.pod_mem[p])
        order = np.lexsort((self.dest.name_rank[nodes], gpu_short + cpu_short, ~easy))
        return nodes[order[: self.options.nodes_tried]]

    def _class_key(self, p: int) -> tuple[Any, ...]:
        s = self.s
        return (int(s.pod_sig[p]), int(s.pod_cpu[p]), int(s.pod_mem[p]), int(s.pod_num[p]),
                int(s.pod_milli[p]), int(self.rules.priority[p]))

    def _best_option(self, p: int, failed: set[tuple[Any, ...]]) -> _Option | None:
        key = (self._class_key(p), self.epoch, self.budget)
        if key in failed:
            return None
        best: _Option | None = None
        for v in self._candidates(p):
            option = self._try(p, int(v))
            if option is not None and (best is None or option < best):
                best = option
            if self._expired() or (best is not None and len(best.dest) <= 1
                                   and best.cost <= self.min_cost):
                break  # one move of the cheapest pod is the least a pod that does not fit needs
        if best is None:
            failed.add(key)
        return best

    def _evictions(self, p: int, v: int) -> tuple[list[int], tuple[int, ...]] | None:
        """The cheapest pods on node `v` to evict so `p` fits there, and p's devices."""
        s, r = self.s, self.rules
        num, milli = int(s.pod_num[p]), int(s.pod_milli[p])
        on_node = list(s.pods_on[v])
        on_dev: dict[int, list[int]] = {}
        for q in on_node:
            for g in s.pod_gpus[q]:
                on_dev.setdefault(g, []).append(q)
        free = s.gpu_free[v].copy()
        evict: set[int] = set()
        devices: tuple[int, ...] = ()
        if num and milli < MILLI:  # one shared device: the fewest, cheapest pods off one device
            best = None
            for g in range(int(s.gpu_count[v])):
                need = milli - free[g]
                chosen: list[int] = []
                if need > 0:
                    movers = sorted((q for q in on_dev.get(g, ()) if self._eligible(q, p)),
                                    key=lambda q: (r.cost[q], -s.pod_milli[q]))
                    for q in movers:
                        if need <= 0:
                            break
                        chosen.append(q)
                        need -= s.pod_milli[q]
                    if need > 0:
                        continue
                rank: tuple[Any, ...] = (sum(r.cost[q] for q in chosen), len(chosen), free[g])
                if best is None or rank < best[0]:
                    best = (rank, g, chosen)
            if best is None:
                return None
            evict.update(best[2])
            devices = (best[1],)
        elif num:  # whole devices: clear the cheapest devices until `num` are free
            free_now = {g for g in range(int(s.gpu_count[v])) if free[g] >= MILLI}
            while len(free_now) < num:
                best = None
                for g in range(int(s.gpu_count[v])):
                    if g in free_now:
                        continue
                    occupants = [q for q in on_dev.get(g, ()) if q not in evict]
                    if not occupants or not all(self._eligible(q, p) for q in occupants):
                        continue  # (no occupant: evicting nothing would free nothing)
                    rank = (sum(r.cost[q] for q in occupants), len(occupants))
                    if best is None or rank < best[0]:
                        best = (rank, g, occupants)
                if best is None:
                    return None
                evict.update(best[2])
                for q in best[2]:
                    for g in s.pod_gpus[q]:
                        free[g] += s.pod_milli[q]
                free_now = {g for g in range(int(s.gpu_count[v])) if free[g] >= MILLI}
            devices = tuple(sorted(free_now)[:num])
        cpu = s.cpu_free[v] + sum(int(s.pod_cpu[q]) for q in evict)
        mem = s.mem_free[v] + sum(int(s.pod_mem[q]) for q in evict)
        if cpu < s.pod_cpu[p] or mem < s.pod_mem[p]:
            # CPU or memory short: evict more, the pods holding no device first, largest first
            extra = sorted((q for q in on_node if q not in evict and self._eligible(q, p)
                            and not (set(s.pod_gpus[q]) & set(devices))),
                           key=lambda q: (s.pod_num[q] > 0, r.cost[q], -s.pod_cpu[q]))
            for q in extra:
                if cpu >= s.pod_cpu[p] and mem >= s.pod_mem[p]:
                    break
                evict.add(q)
                cpu += int(s.pod_cpu[q])
                mem += int(s.pod_mem[q])
            if cpu < s.pod_cpu[p] or mem < s.pod_mem[p]:
                return None
        if len(evict) > min(self.options.max_moves_per_pending, self.budget):
            return None
        return sorted(evict, key=lambda q: (-s.pod_num[q] * s.pod_milli[q], -s.pod_cpu[q])), \
            devices

    def _try(self, p: int, v: int) -> _Option | None:
        """Evict from `v`, bind `p` there, re-place the evicted pods (one swap deep when a
        pod fits nowhere as the cluster is); measure, then undo."""
        s = self.s
        found = self._evictions(p, v)
        if found is None:
            return None
        evict, devices = found
        origin = {q: (v, s.pod_gpus[q]) for q in evict}
        for q in evict:
            s.unbind(q)
        if not devices:
            devices = self.land.devices(p, v)
        s.bind(p, v, devices)
        not_v = np.ones(s.n, bool)
        not_v[v] = False
        dest: list[tuple[int, int, tuple[int, ...]]] = []
        ok = True
        limit = min(self.options.max_moves_per_pending, self.budget)
        for q in evict:
            choice = self.dest.choose(q, not_v)
            if choice is not None:
                s.bind(q, *choice)
                dest.append((q, *choice))
                continue
            if len(dest) + 2 > limit or not self._swap(q, p, v, origin, dest):
                ok = False
                break
        touched = {v} | {d for _, d, _ in dest} | {o for o, _ in origin.values()}
        # undo, leaving the state as it was
        for q, _, _ in dest:
            s.unbind(q)
        s.unbind(p)
        for q, (node, gpus) in origin.items():
            if s.pod_node[q] < 0:
                s.bind(q, node, gpus)
        if not ok:
            return None
        versions = {n: int(self.committed[n]) for n in touched}
        cost = float(sum(self.rules.cost[q] for q, _, _ in dest))
        gain = float(s.pod_num[p] * s.pod_milli[p])
        return _Option(neg_priority=-int(self.rules.priority[p]),
                       neg_value=-gain / (cost + 1e-3), cost=cost, p=p, node=v,
                       devices=devices, dest=dest, versions=versions)

    def _swap(self, q: int, p: int, v: int, origin: dict[int, tuple[int, tuple[int, ...]]],
              dest: list[tuple[int, int, tuple[int, ...]]],
              depth: int | None = None) -> bool:
        """Place unbound pod `q` on some node u != v in the place of one pod r there, r going
        elsewhere (not u), itself by a swap while `depth` allows. Candidates are checked with
        arrays first; the cheapest tried."""
        s, r_ = self.s, self.rules
        depth = self.options.swap_depth if depth is None else depth
        key = (self._class_key(q), int(r_.priority[p]), self.epoch, depth)
        if key in self._no_swap:
            return False
        placed = np.flatnonzero(s.pod_node >= 0)
        u = s.pod_node[placed]
        ok = s.admit[s.pod_sig[q]][u] & (u != v)
        placed, u = placed[ok], u[ok]
        ok = r_.movable[placed] & ~self.moved[placed] & (r_.priority[placed] <= r_.priority[p]) \
            & (s.cpu_free[u] + s.pod_cpu[placed] >= s.pod_cpu[q]) \
            & (s.mem_free[u] + s.pod_mem[placed] >= s.pod_mem[q])
        placed, u = placed[ok], u[ok]
        ok = ~np.isin(placed, list(origin) + [d[0] for d in dest] + [p])
        if s.pod_num[q]:
            milli = s.pod_milli[q]
            if s.pod_num[q] == 1:
                dev0 = s.pod_dev0[placed]
                via_r = (dev0 >= 0) & (s.gpu_free[u, np.maximum(dev0, 0)]
                                       + s.pod_milli[placed] >= milli)
                ok &= via_r | (s.gpu_free.max(axis=1)[u] >= milli)
            else:
                full = (s.gpu_free >= MILLI).sum(axis=1)[u]
                ok &= full + np.where(s.pod_milli[placed] >= MILLI, s.pod_num[placed], 0) \
                    >= s.pod_num[q]
        cands = placed[ok]
        if not len(cands):
            self._no_swap.add(key)
            return False
        rank = np.lexsort((s.pod_cpu[cands], r_.cost[cands]))
        for r in cands[rank[: self.options.swap_tries]]:
            r = int(r)
            home = int(s.pod_node[r])
            gpus = s.pod_gpus[r]
            s.unbind(r)
            if not s.feasible(q, np.array([home]))[0]:
                s.bind(r, home, gpus)
                continue
            s.bind(q, home, self.dest.devices(q, home))
            not_home = np.ones(s.n, bool)
            not_home[home] = False
            choice = self.dest.choose(r, not_home)
            if choice is not None:
                s.bind(r, *choice)
                origin[r] = (home, gpus)
                dest.append((q, home, s.pod_gpus[q]))
                dest.append((r, *choice))
                return True
            limit = min(self.options.max_moves_per_pending, self.budget)
            if depth > 1 and len(dest) + 4 <= limit:
                origin[r] = (home, gpus)
                dest.append((q, home, s.pod_gpus[q]))
                if self._swap(r, p, home, origin, dest, depth - 1):
                    return True
                dest.pop()
                del origin[r]
            s.unbind(q)
            s.bind(r, home, gpus)
        self._no_swap.add(key)
        return False

    def _apply(self, option: _Option) -> None:
        s = self.s
        self.epoch += 1
        self.committed[option.node] += 1
        for q, _, _ in option.dest:
            self._origin[q] = int(s.pod_node[q])
            self.committed[self._origin[q]] += 1
            s.unbind(q)
        s.bind(option.p, option.node, option.devices)
        self.moved[option.p] = True
        for q, v, devs in option.dest:
            s.bind(q, v, devs)
            self.committed[v] += 1
            self.moved[q] = True
            if self.rules.pdb[q] >= 0:
                self.pdb_left[self.rules.pdb[q]] -= 1


__all__ = ["CANNOT_HELP", "CAPACITY", "FEASIBLE", "NOTHING_PENDING", "NO_MOVES_NEEDED",
           "OPTIMAL", "TIME_LIMIT", "Landing", "Move", "PodRules", "RepackOptions",
           "RepackPlan", "StatePlan", "plan_repack", "repack_state", "rules_for"]
