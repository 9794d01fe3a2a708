"""`gpuops bench packing`: how many GPUs sit unallocated under each placement, and how much a
repack by gpuops (and, for comparison, the FGD simulator's fragMultiPod descheduler) wins
back with 1, 2 or 5 % of the running pods moved.

Protocol: the FGD paper's (Weng et al., USENIX ATC'23), as its simulator
(hkust-adsl/kubernetes-scheduler-simulator) runs it: the 1,213 GPU nodes (6,212 GPUs) of
`openb_node_list_gpu_node.csv`; the pods of `openb_pod_list_default.csv` sorted by name and
shuffled with seeds 42-51, then resampled (random pods of the list appended) until the GPU
requests reach 130 % of the cluster's GPU capacity; pods arrive in that order and stay (no
departures); only `cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec` are used. KPI: the
unallocated milli-GPU % (100 - allocated / capacity) when 90, 95, 100, 110 and 130 % of the
capacity has arrived; the median over seeds.

Arms (all on the same seeds):
- `default`, `best_fit`, `fgd`: placement alone (gpuops/tasks/rebalance/placement.py); a pod
  that does not fit when it arrives stays pending;
- `<placement>+gpuops-<b>`: at each KPI point the planner (tasks/rebalance/repack.py) plans
  moves for the pending pods with the moves made so far kept within b % of the running pods,
  the plan is applied (moved and pending pods bound where it says: the flow steers them), then
  every pending pod is retried with the placement policy;
- `<placement>+fragmultipod-<b>`: at the same points, the fragMultiPod descheduler evicts
  within the same budget and re-places its evictions with the placement policy; pending pods
  are then retried the same way.

Also per arm: stranded GPUs (free GPUs on nodes no pending GPU pod fits), the pods moved
(% of running pods, cumulative) and the planner's time per round (`plan_s`: the slowest round,
median over seeds). `stress=True` marks 20 % of pods do-not-disrupt, puts 10 % under a PDB
with maxUnavailable 0 and takes priorities from `qos`.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuops.bench.packing_fragmultipod import frag_multi_pod
from gpuops.tasks.rebalance.fragmentation import Shapes, stranded_gpus, typical_shapes
from gpuops.tasks.rebalance.model import MILLI
from gpuops.tasks.rebalance.placement import Placer
from gpuops.tasks.rebalance.repack import PodRules, RepackOptions, repack_state
from gpuops.tasks.rebalance.state import PackState

NODES = "alibaba-gpu-2023/openb_node_list_gpu_node.csv"
PODS = "alibaba-gpu-2023/openb_pod_list_default.csv"
ARRIVED = (90, 95, 100, 110, 130)
PLACEMENTS = ("default", "best_fit", "fgd")
REPACKED = ("default", "best_fit")  # placements the repack arms start from
BUDGETS = (1, 2, 5)
QOS_PRIORITY = {"Guaranteed": 3000, "LS": 2000, "Burstable": 1000, "BE": 0}
PUBLISHED_100 = {"best_fit": 7.09, "fgd": 4.77}  # medians at 100 % arrived (the paper)


def data_dir() -> Path:
    """`$GPUOPS_DATA_DIR`, else `../shared/data` next to the repository root."""
    configured = os.environ.get("GPUOPS_DATA_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def arm_names(placements=PLACEMENTS, repacked=REPACKED, budgets=BUDGETS) -> list[str]:
    names = list(placements)
    for kind in ("gpuops", "fragmultipod"):
        names += [f"{p}+{kind}-{b}" for p in repacked for b in budgets]
    return names


@dataclass
class Workload:
    node_names: list[str]
    cpu: np.ndarray
    memory: np.ndarray
    gpus: np.ndarray
    model: np.ndarray
    models: list[str]
    pod_cpu: np.ndarray
    pod_mem: np.ndarray
    pod_num: np.ndarray
    pod_milli: np.ndarray
    pod_spec: np.ndarray  # index into specs
    specs: list[frozenset]
    pod_priority: np.ndarray

    @property
    def capacity(self) -> int:
        return int(self.gpus.sum()) * MILLI

    def shapes(self) -> Shapes:
        return typical_shapes(zip(self.pod_cpu.tolist(), self.pod_num.tolist(),
                                  self.pod_milli.tolist(),
                                  [self.specs[i] for i in self.pod_spec]))


def _read(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in required if rows and c not in rows[0]]
    if not rows or missing:
        raise ValueError(f"{path}: " + (f"missing column(s) {missing}" if rows else "no rows"))
    return rows


def _int(row: dict[str, str], column: str, path: Path, line: int) -> int:
    try:
        value = int(float(row[column] or 0))
    except ValueError:
        raise ValueError(f"{path}:{line}: {column}: not a number: {row[column]!r}") from None
    if value < 0:
        raise ValueError(f"{path}:{line}: {column}: must be >= 0, got {value}")
    return value


def load_workload(nodes_file: Path, pods_file: Path, *, scale: float = 1.0,
                  seed: int = 0) -> Workload:
    """Nodes and pods of the trace; `scale` < 1 keeps that share of the nodes (smoke runs)."""
    nodes = _read(nodes_file, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    nodes = [r for i, r in enumerate(nodes) if _int(r, "gpu", nodes_file, i + 2) > 0]
    if scale < 1:
        keep = np.random.default_rng(seed).permutation(len(nodes))[:max(2, int(scale * len(nodes)))]
        nodes = [nodes[i] for i in sorted(keep)]
    nodes.sort(key=lambda r: r["sn"])
    models = sorted({r["model"] for r in nodes})
    pods = _read(pods_file, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    pods.sort(key=lambda r: r["name"])
    specs: dict[frozenset, int] = {}
    spec_idx, num, milli = [], [], []
    for i, r in enumerate(pods):
        allowed = frozenset(m for m in (r.get("gpu_spec") or "").split("|") if m)
        spec_idx.append(specs.setdefault(allowed, len(specs)))
        n = _int(r, "num_gpu", pods_file, i + 2)
        m = _int(r, "gpu_milli", pods_file, i + 2)
        num.append(n)
        milli.append(0 if n == 0 else (m if 0 < m <= MILLI else MILLI))
    return Workload(
        node_names=[r["sn"] for r in nodes],
        cpu=np.array([_int(r, "cpu_milli", nodes_file, 0) for r in nodes]),
        memory=np.array([_int(r, "memory_mib", nodes_file, 0) for r in nodes]),
        gpus=np.array([_int(r, "gpu", nodes_file, 0) for r in nodes]),
        model=np.array([models.index(r["model"]) for r in nodes]), models=models,
        pod_cpu=np.array([_int(r, "cpu_milli", pods_file, i + 2) for i, r in enumerate(pods)]),
        pod_mem=np.array([_int(r, "memory_mib", pods_file, i + 2) for i, r in enumerate(pods)]),
        pod_num=np.array(num), pod_milli=np.array(milli), pod_spec=np.array(spec_idx),
        specs=list(specs),
        pod_priority=np.array([QOS_PRIORITY.get(r.get("qos", ""), 0) for r in pods]))


def arrival_order(w: Workload, seed: int, ratio: float = 1.3) -> np.ndarray:
    """Rows of the pod list in arrival order: shuffled, then resampled (or trimmed at random)
    until the GPU requests reach `ratio` x capacity, as the simulator's workload tuning."""
    rng = np.random.default_rng(seed)
    order = list(rng.permutation(len(w.pod_cpu)))
    request = w.pod_num * w.pod_milli
    target = ratio * w.capacity
    total = int(request[order].sum())
    while total > target and order:
        total -= int(request[order.pop(int(rng.integers(len(order))))])
    while True:
        i = int(rng.integers(len(w.pod_cpu)))
        if total + request[i] > target:
            break
        total += int(request[i])
        order.append(i)
    return np.array(order, dtype=np.int64)


def build_state(w: Workload, order: np.ndarray) -> PackState:
    admit = np.array([[not spec or w.models[m] in spec for m in w.model] for spec in w.specs],
                     dtype=bool)
    return PackState(node_names=w.node_names, cpu=w.cpu, memory=w.memory, gpus=w.gpus,
                     model=w.model, models=w.models, admit=admit, pod_cpu=w.pod_cpu[order],
                     pod_mem=w.pod_mem[order], pod_num=w.pod_num[order],
                     pod_milli=w.pod_milli[order], pod_sig=w.pod_spec[order])


def stress_rules(w: Workload, order: np.ndarray, seed: int) -> PodRules:
    """20 % do-not-disrupt, 10 % under a PDB allowing no disruption, priority from qos."""
    rng = np.random.default_rng(seed + 1000)
    rows = len(order)
    movable = rng.random(rows) >= 0.2
    pdb = np.where(rng.random(rows) < 0.1, 0, -1)
    return PodRules(movable=movable, priority=w.pod_priority[order], pdb=pdb,
                    cost=np.ones(rows), pdb_allowed=np.array([0]))


def replay(w: Workload, order: np.ndarray, placement: str, shapes: Shapes,
           arms: list[tuple[str, str | None, int]], *, rules: PodRules | None = None,
           options: RepackOptions | None = None) -> dict[str, dict[str, Any]]:
    """Run one seed: the placement alone up to the first KPI point, then each arm from there
    (arms: (name, None | "gpuops" | "fragmultipod", budget %))."""
    base = build_state(w, order)
    arrived = np.cumsum(w.pod_num[order] * w.pod_milli[order])
    marks = [int(np.searchsorted(arrived, a / 100 * w.capacity - 1e-6)) for a in ARRIVED]
    marks[-1] = len(order) - 1  # the whole list has arrived: 130 % within one pod
    rules = rules if rules is not None else PodRules.default(len(order))
    pending: list[int] = []
    placer = Placer(base, placement, shapes=shapes)
    for p in range(marks[0] + 1):
        if not placer.place(p):
            pending.append(p)
    results: dict[str, dict[str, Any]] = {}
    for name, kind, budget in arms:
        state = base.copy()
        placer = Placer(state, placement, shapes=shapes)
        waiting = list(pending)
        moved, plan_s = 0, 0.0
        figures: dict[str, Any] = {"unallocated": {}, "stranded": {}, "moved_pct": {}}
        next_pod = marks[0] + 1
        for a, mark in zip(ARRIVED, marks):
            for p in range(next_pod, mark + 1):
                if not placer.place(p):
                    waiting.append(p)
            next_pod = mark + 1
            running = int((state.pod_node >= 0).sum())
            allowed = int(budget / 100 * running) - moved if kind else 0
            if kind == "gpuops" and allowed > 0 and waiting:
                started = time.monotonic()
                opts = options or RepackOptions()
                opts = RepackOptions(**{**opts.__dict__, "max_moves": allowed,
                                        "method": "heuristic"})
                plan = repack_state(state, waiting, rules, opts, shapes=shapes)
                plan_s = max(plan_s, time.monotonic() - started)
                moved += len(plan.moves)
            elif kind == "fragmultipod" and allowed > 0:
                started = time.monotonic()
                may = rules.movable & (rules.pdb < 0)
                evicted, failed = frag_multi_pod(state, placer, shapes, allowed,
                                                 None if may.all() else may)
                plan_s = max(plan_s, time.monotonic() - started)
                moved += len(evicted)
                waiting.extend(failed)
            # pending pods the repack landed are bound already; retry the others
            waiting = [p for p in sorted(waiting)
                       if state.pod_node[p] < 0 and not placer.place(p)]
            running = int((state.pod_node >= 0).sum())
            figures["unallocated"][str(a)] = state.unallocated_pct()
            figures["stranded"][str(a)] = stranded_gpus(state, waiting)
            figures["moved_pct"][str(a)] = 100.0 * moved / max(running, 1)
        figures["plan_s"] = plan_s
        results[name] = figures
    return results


def run(*, nodes: str | None = None, pods: str | None = None, seeds: int = 10,
        first_seed: int = 42, scale: float = 1.0, placements: list[str] | None = None,
        repacked: list[str] | None = None, budgets: list[int] | None = None,
        stress: bool = False, time_limit_s: float = 10.0, chart: str | None = None,
        churn_steps: int = 0, churn_seeds: int | None = None,
        churn_budget: int = 1) -> dict[str, Any]:
    """All arms on `seeds` seeds; `scale` < 1 keeps that share of the nodes (a smoke run);
    `chart` = a PNG path for the allocation curves; `churn_steps` > 0 adds the synthetic churn
    run (packing_churn.py) on `churn_seeds` seeds (default all) with `churn_budget` % moves
    per step."""
    root = data_dir()
    nodes_file = Path(nodes) if nodes else root / NODES
    pods_file = Path(pods) if pods else root / PODS
    w = load_workload(nodes_file, pods_file, scale=scale, seed=first_seed)
    shapes = w.shapes()
    placements = list(placements or PLACEMENTS)
    repacked = list(repacked if repacked is not None else REPACKED)
    budgets = list(budgets or BUDGETS)
    per_seed: dict[str, list[dict[str, Any]]] = {}
    options = RepackOptions(time_limit_s=time_limit_s)
    started = time.monotonic()
    for seed in range(first_seed, first_seed + seeds):
        order = arrival_order(w, seed)
        for placement in placements:
            arms: list[tuple[str, str | None, int]] = [(placement, None, 0)]
            if placement in repacked:
                arms += [(f"{placement}+{k}-{b}", k, b) for k in ("gpuops", "fragmultipod")
                         for b in budgets]
            rules = stress_rules(w, order, seed) if stress else None
            for name, figures in replay(w, order, placement, shapes, arms, rules=rules,
                                        options=options).items():
                per_seed.setdefault(name, []).append(figures)
            print(f"packing: seed {seed} {placement} done at "
                  f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    names = [n for n in arm_names(placements, [r for r in repacked if r in placements],
                                  budgets) if n in per_seed]

    def median(name: str, key: str) -> dict[str, float]:
        return {str(a): round(float(np.median([f[key][str(a)] for f in per_seed[name]])), 2)
                for a in ARRIVED}

    result: dict[str, Any] = {
        "unallocated_gpu_pct": {n: median(n, "unallocated") for n in names},
        "stranded_gpus": {n: median(n, "stranded") for n in names},
        "pods_moved_pct": {n: median(n, "moved_pct") for n in names},
        "plan_s": {n: round(float(np.median([f["plan_s"] for f in per_seed[n]])), 2)
                   for n in names},
        "published_unallocated_pct_at_100": PUBLISHED_100,
        "seeds": seeds, "first_seed": first_seed, "nodes": len(w.node_names),
        "gpus": int(w.gpus.sum()), "pods_in_list": len(w.pod_cpu), "stress": stress,
        "nodes_file": nodes_file.name, "pods_file": pods_file.name,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if churn_steps > 0:
        from gpuops.bench.packing_churn import run_churn

        churn_list = list(range(first_seed, first_seed + (churn_seeds or seeds)))
        result["synthetic_churn"] = run_churn(w, shapes, churn_list, steps=churn_steps,
                                              budget=churn_budget, options=options)
        result["wall_s"] = round(time.monotonic() - started, 1)
    if chart:
        from gpuops.bench.packing_chart import allocation_chart

        allocation_chart(result, chart)
    return result


def main(json_output: bool = True, **options: Any) -> dict[str, Any]:
    """Run the bench; `--seeds 1 --scale 0.05` is a quick look. Prints the figures as one JSON
    object on the last line."""
    result = run(**options)
    if not json_output:
        print(f"{'arm':<26}" + "".join(f"{a:>8}" for a in ARRIVED) + "   moved%  plan_s")
        for name, row in result["unallocated_gpu_pct"].items():
            print(f"{name:<26}" + "".join(f"{row[str(a)]:>8.2f}" for a in ARRIVED)
                  + f"  {result['pods_moved_pct'][name]['100']:>6.2f}"
                  + f"  {result['plan_s'][name]:>6.2f}")
    print(json.dumps(result))
    return result
