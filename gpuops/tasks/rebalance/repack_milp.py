"""The exact repack: a mixed-integer program over every movable pod, pending pod, node and GPU
device of a small cluster (cvxpy + HiGHS, time-bounded). `repack.py` chooses it when the
candidate set is small and explains the rules.

Binary variables:
- stay[q] for each movable running pod q (1 = it stays where it is, on the same devices);
- y[pod, v] for each pod that may go to node v (a movable pod: any other admitting node; a
  pending GPU pod: any admitting node);
- z[pod, v, g] for each device g of v such a GPU pod may take; sum_g z = gpu_count * y.
Constraints: a movable pod stays or goes to exactly one node; a pending pod lands at most
once; per device, per node CPU and memory: what cannot move + what stays + what comes in fits;
per PDB, moved <= allowed disruptions; moved <= max_moves.
Objective, lexicographic through weights: first place pending pods (more GPU first), then the
least total move cost.

Priority: a pod q moves only if a pending pod of at least its priority is placed, and never
in a plan that places a pending pod of lower priority than q's (which pending pod a move is
"for" is not defined in one program, so the rule is kept in its strict reading).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import cvxpy as cp
import numpy as np

from gpuops.tasks.rebalance.model import MILLI
from gpuops.tasks.rebalance.state import PackState

if TYPE_CHECKING:  # repack imports this module: the names it uses come in at call time
    from gpuops.tasks.rebalance.repack import PodRules, RepackOptions, StatePlan


def solve_milp(state: PackState, pending: Sequence[int], rules: PodRules,
               options: RepackOptions, *, deadline: float) -> StatePlan:
    """Solve and apply on `state`; returns a `repack.StatePlan`."""
    level = max((int(rules.priority[p]) for p in pending), default=0)
    return _solve(state, pending, rules, options, deadline=deadline,
                  budget=options.max_moves, pdb_left=np.asarray(rules.pdb_allowed),
                  frozen=np.zeros(len(state.pod_cpu), bool), level=level)


def _solve(state: PackState, pending: Sequence[int], rules: PodRules,
           options: RepackOptions, *, deadline: float, budget: int | None,
           pdb_left: np.ndarray, frozen: np.ndarray, level: int) -> StatePlan:
    from gpuops.tasks.rebalance.repack import (
        CANNOT_HELP,
        FEASIBLE,
        OPTIMAL,
        TIME_LIMIT,
        StatePlan,
    )

    s = state
    started = time.monotonic()
    placed = np.flatnonzero(s.pod_node >= 0)
    movable = [int(q) for q in placed
               if rules.movable[q] and not frozen[q] and rules.priority[q] <= level]
    if not pending:
        return StatePlan([], [], [], 0.0, CANNOT_HELP, "no GPU pod is pending", "milp", 0.0)
    if not movable:  # nothing may move: place what fits as the cluster is
        from gpuops.tasks.rebalance.placement import Placer

        placer = Placer(s, "best_fit")
        landings = []
        for p in pending:
            choice = placer.choose(p)
            if choice is not None:
                s.bind(p, *choice)
                landings.append((p, *choice))
        return StatePlan([], landings, [], 0.0, FEASIBLE if landings else CANNOT_HELP,
                         None if landings else "no candidate may move", "milp", 0.0)
    mov_set = set(movable)
    fixed_gpu = s.gpu_cap.astype(np.int64).copy()
    fixed_cpu = s.cpu_cap.copy()
    fixed_mem = s.mem_cap.copy()
    for q in placed.tolist():  # python ints, as in `movable`
        if q in mov_set:
            continue
        v = s.pod_node[q]
        fixed_cpu[v] -= s.pod_cpu[q]
        fixed_mem[v] -= s.pod_mem[q]
        for g in s.pod_gpus[q]:
            fixed_gpu[v, g] -= s.pod_milli[q]

    # columns: stay[q], then y[pod, v], then z[pod, v, g]
    cols_y: list[tuple[int, int]] = []
    for pod in movable + list(pending):
        here = s.pod_node[pod]
        for v in range(s.n):
            if v != here and s.admit[s.pod_sig[pod], v] and s.gpu_count[v] >= s.pod_num[pod]:
                cols_y.append((pod, v))
    cols_z: list[tuple[int, int, int]] = []
    z_of_y: list[list[int]] = []
    for pod, v in cols_y:
        ids = []
        if s.pod_num[pod]:
            for g in range(int(s.gpu_count[v])):
                ids.append(len(cols_z))
                cols_z.append((pod, v, g))
        z_of_y.append(ids)
    nq, ny, nz = len(movable), len(cols_y), len(cols_z)
    stay = cp.Variable(nq, boolean=True)
    y = cp.Variable(ny, boolean=True)
    z = cp.Variable(nz, boolean=True) if nz else None
    qi = {q: i for i, q in enumerate(movable)}
    cons = []
    a_go = np.zeros((nq, ny))
    a_land = np.zeros((len(pending), ny))
    pi = {p: i for i, p in enumerate(pending)}
    for c, (pod, v) in enumerate(cols_y):
        if pod in qi:
            a_go[qi[pod], c] = 1
        else:
            a_land[pi[pod], c] = 1
    cons.append(stay + a_go @ y == 1)
    placed_p = a_land @ y
    cons.append(placed_p <= 1)
    if z is not None:  # (nz > 0)
        a_zy = np.zeros((ny, nz))
        for c, ids in enumerate(z_of_y):
            a_zy[c, ids] = 1
        need = np.array([s.pod_num[pod] for pod, _ in cols_y], dtype=float)
        cons.append(a_zy @ z == cp.multiply(need, y))
    # capacities
    dev_index = {(v, g): i for i, (v, g) in enumerate((v, g) for v in range(s.n)
                                                       for g in range(int(s.gpu_count[v])))}
    a_dev_z = np.zeros((len(dev_index), nz))
    for d, (pod, v, g) in enumerate(cols_z):
        a_dev_z[dev_index[(v, g)], d] = s.pod_milli[pod]
    a_dev_stay = np.zeros((len(dev_index), nq))
    a_cpu_stay = np.zeros((s.n, nq))
    a_mem_stay = np.zeros((s.n, nq))
    for q, i in qi.items():
        v = s.pod_node[q]
        a_cpu_stay[v, i] = s.pod_cpu[q]
        a_mem_stay[v, i] = s.pod_mem[q]
        for g in s.pod_gpus[q]:
            a_dev_stay[dev_index[(v, g)], i] = s.pod_milli[q]
    a_cpu_y = np.zeros((s.n, ny))
    a_mem_y = np.zeros((s.n, ny))
    for c, (pod, v) in enumerate(cols_y):
        a_cpu_y[v, c] = s.pod_cpu[pod]
        a_mem_y[v, c] = s.pod_mem[pod]
    dev_cap = np.array([fixed_gpu[v, g] for (v, g) in dev_index])
    if len(dev_index):
        lhs = a_dev_stay @ stay + (a_dev_z @ z if z is not None else 0)
        cons.append(lhs <= dev_cap)
    cons.append(a_cpu_stay @ stay + a_cpu_y @ y <= fixed_cpu)
    cons.append(a_mem_stay @ stay + a_mem_y @ y <= fixed_mem)
    moved = 1 - stay
    for b, allowed in enumerate(pdb_left):
        members = [qi[q] for q in movable if rules.pdb[q] == b]
        if members:
            cons.append(cp.sum(moved[members]) <= int(allowed))
    if budget is not None:
        cons.append(cp.sum(moved) <= budget)
    prio_p = np.array([rules.priority[p] for p in pending])
    for q, i in qi.items():
        serving = np.flatnonzero(prio_p >= rules.priority[q])
        lower = np.flatnonzero(prio_p < rules.priority[q])
        if not len(serving):
            cons.append(stay[i] == 1)
            continue
        cons.append(moved[i] <= cp.sum(placed_p[serving]))
        if len(lower):
            cons.append(len(lower) * moved[i] + cp.sum(placed_p[lower]) <= len(lower))
    # objective: pending first (by priority tier, then GPU), then the least move cost
    cost = np.array([rules.cost[q] for q in movable])
    big = float(cost.sum()) + 1.0
    levels = sorted(set(prio_p.tolist()))
    worth = np.array([1.0 + s.pod_num[p] * s.pod_milli[p] / MILLI for p in pending])
    scale = float(worth.sum()) + 1.0
    value = np.array([w * big * scale ** levels.index(pr) for w, pr in zip(worth, prio_p)])
    problem = cp.Problem(cp.Maximize(value @ placed_p - cost @ moved), cons)
    limit = max(0.5, deadline - time.monotonic())
    try:
        problem.solve(  # type: ignore[no-untyped-call]  # cvxpy leaves solve() untyped
            solver=cp.HIGHS, time_limit=limit, mip_rel_gap=options.mip_rel_gap)
    except cp.error.SolverError as e:
        return StatePlan([], [], list(pending), 0.0, CANNOT_HELP, f"MILP solver failed: {e}",
                         "milp", time.monotonic() - started)
    if stay.value is None:
        return StatePlan([], [], list(pending), 0.0, TIME_LIMIT,
                         "no plan found within the time limit", "milp",
                         time.monotonic() - started)
    status = OPTIMAL if problem.status == cp.OPTIMAL and options.mip_rel_gap == 0 else (
        FEASIBLE if problem.status == cp.OPTIMAL else TIME_LIMIT)
    # the solver sets every variable's value when it sets stay's
    yv = cast(np.ndarray, y.value) > 0.5
    zv = cast(np.ndarray, z.value) > 0.5 if z is not None else np.zeros(0, bool)
    chosen: dict[int, tuple[int, tuple[int, ...]]] = {}
    for c, (pod, v) in enumerate(cols_y):
        if yv[c]:
            chosen[pod] = (v, tuple(cols_z[d][2] for d in z_of_y[c] if zv[d]))
    moves, landings = [], []
    origins = {}
    for q in movable:
        if q in chosen:
            origins[q] = int(s.pod_node[q])
            s.unbind(q)
    for pod, (v, devs) in chosen.items():
        s.bind(pod, v, devs)
        if pod in origins:
            moves.append((pod, origins[pod], v, devs))
        else:
            landings.append((pod, v, devs))
    total = float(sum(rules.cost[q] for q in origins))
    reason = None
    if not landings:
        status, reason = CANNOT_HELP, ("the move budget is exhausted" if budget == 0
                                       else "no set of allowed moves makes a pending pod fit")
    return StatePlan(moves, landings, [], total, status, reason, "milp",
                     time.monotonic() - started)
