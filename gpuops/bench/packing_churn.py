"""SYNTHETIC churn for `gpuops bench packing`: pods that leave as well as arrive.

Why synthetic: the trace's own timestamps never saturate the cluster (FACTS.md, "GPU
fragmentation"), so a saturated cluster with departures has to be made up, and is labelled so.
Set-up: the pods arrive (in the protocol's order) until their requests reach 100 % of GPU
capacity; then, for `steps` steps, `depart_pct` % of the running pods (chosen at random) leave
and the next pods of the list arrive until the requests of running and pending pods are back at
100 %; pending pods are retried after each step. Arms: each placement alone, and `default` /
`best_fit` with a repack (gpuops or fragMultiPod) after each step, each round allowed
`budget` % of the running pods. Figure: the mean over steps of the unallocated GPU %.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuops.bench.packing_fragmultipod import frag_multi_pod
from gpuops.tasks.rebalance.fragmentation import Shapes
from gpuops.tasks.rebalance.placement import Placer
from gpuops.tasks.rebalance.repack import PodRules, RepackOptions, repack_state

if TYPE_CHECKING:
    from gpuops.bench.packing import Workload


def churn_arm(w: Workload, order: np.ndarray, placement: str, shapes: Shapes, kind: str | None,
              budget: int, *, steps: int, depart_pct: float, seed: int,
              options: RepackOptions) -> dict[str, Any]:
    from gpuops.bench.packing import build_state

    state = build_state(w, order)
    placer = Placer(state, placement, shapes=shapes)
    rules = PodRules.default(len(order))
    rng = np.random.default_rng(seed + 7)
    request = state.pod_num * state.pod_milli
    cap = w.capacity
    offered, nxt, waiting = 0, 0, []

    def arrive() -> None:
        nonlocal offered, nxt
        while nxt < len(order) and offered + request[nxt] <= cap:
            offered += int(request[nxt])
            if not placer.place(nxt):
                waiting.append(nxt)
            nxt += 1

    arrive()
    unallocated, moved_pct, plan_s = [], [], 0.0
    for _ in range(steps):
        running = np.flatnonzero(state.pod_node >= 0)
        leaving = rng.choice(running, size=max(1, int(depart_pct / 100 * len(running))),
                             replace=False)
        for p in leaving:
            state.unbind(int(p))
            offered -= int(request[p])
        waiting[:] = [p for p in waiting if not placer.place(p)]
        arrive()
        allowed = int(budget / 100 * int((state.pod_node >= 0).sum()))
        moved = 0
        started = time.monotonic()
        if kind == "gpuops" and waiting and allowed:
            opts = RepackOptions(**{**options.__dict__, "max_moves": allowed,
                                    "method": "heuristic"})
            moved = len(repack_state(state, waiting, rules, opts, shapes=shapes).moves)
        elif kind == "fragmultipod" and allowed:
            evicted, failed = frag_multi_pod(state, placer, shapes, allowed)
            moved = len(evicted)
            waiting.extend(failed)
        plan_s = max(plan_s, time.monotonic() - started)
        waiting[:] = [p for p in sorted(waiting)
                      if state.pod_node[p] < 0 and not placer.place(p)]
        unallocated.append(state.unallocated_pct())
        moved_pct.append(100.0 * moved / max(1, int((state.pod_node >= 0).sum())))
    return {"unallocated_mean": float(np.mean(unallocated)),
            "moved_pct_per_step": float(np.mean(moved_pct)), "plan_s": plan_s}


def run_churn(w: Workload, shapes: Shapes, seeds: list[int], *, steps: int = 20,
              depart_pct: float = 5.0, budget: int = 5,
              options: RepackOptions | None = None) -> dict[str, Any]:
    from gpuops.bench.packing import arrival_order

    options = options or RepackOptions()
    arms: list[tuple[str, str, str | None]] = [(p, p, None) for p in ("default", "best_fit",
                                                                       "fgd")]
    arms += [(f"{p}+{k}-{budget}", p, k) for p in ("default", "best_fit")
             for k in ("gpuops", "fragmultipod")]
    per: dict[str, list[dict[str, Any]]] = {}
    ratio = 1.0 + steps * depart_pct / 100 * 1.5 + 0.3  # enough pods for every step
    for seed in seeds:
        order = arrival_order(w, seed, ratio=ratio)
        for name, placement, kind in arms:
            per.setdefault(name, []).append(churn_arm(
                w, order, placement, shapes, kind, budget, steps=steps, depart_pct=depart_pct,
                seed=seed, options=options))
    return {
        "label": "SYNTHETIC: departures made up (the trace never saturates the cluster)",
        "steps": steps, "depart_pct_per_step": depart_pct, "budget_pct_per_step": budget,
        "seeds": len(seeds),
        "unallocated_gpu_pct_mean": {n: round(float(np.median([f["unallocated_mean"]
                                                               for f in v])), 2)
                                     for n, v in per.items()},
        "pods_moved_pct_per_step": {n: round(float(np.median([f["moved_pct_per_step"]
                                                              for f in v])), 2)
                                    for n, v in per.items()},
        "plan_s": {n: round(float(np.median([f["plan_s"] for f in v])), 2)
                   for n, v in per.items()},
    }
