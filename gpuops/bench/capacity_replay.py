"""`gpuops bench capacity-replay`: replay a real demand trace against three ways to provision.

Why: the claim of capacity pre-warm is "fewer GPU-hours than provisioning for the peak, and
far fewer cold-start waits than reactive autoscaling". This replays the Alibaba GenAI trace
(23 days of text-to-image requests, with each request's GPU time) and measures both.

Set-up (every choice is an option of `run`):
- Fleet: `models` models, each a sum of `copies` copies of the trace, shifted by whole days
  (up to +-2, wrapping round the trace) and by a per-model number of hours (users in other
  time zones), plus minutes of jitter. More copies = more independent users: the diurnal
  shape and the growth of the trace stay, the per-minute noise of one small service averages
  out. Each model runs on its own node pool (an AWS GPU instance type at its list price).
- Work: a request occupies one replica for its `exec_time_seconds`. Time advances in ticks
  of `tick_s`; serving is a fluid FIFO queue per model (capacity = ready replicas x tick).
  Work waits only when warm capacity is short, i.e. while cold capacity boots.
- Cold start: a new node serves after the node provisioning lag (`node_lag_s`, default 5 min:
  cluster-autoscaler reports 4-6 min to pods running) plus a model load time drawn from
  basemodel_update_latency_anon.csv (`value`, milliseconds: median 23 s, p95 45 s).
- Train on the first `train_days` days, evaluate on the rest. Policies:
  * static_peak: a fixed node count per model sized for the highest minute of the evaluation
    (an oracle peak: the most generous static choice).
  * reactive: cluster-autoscaler + HPA: replicas for the last minute's load and backlog at
    `target_utilization`; nodes requested when replicas do not fit (ready after the lag);
    a node removed after 10 minutes unneeded; at least one node per model.
  * gpuops: every day at 23:00, forecast each model's next 25 hours (tasks/capacity/forecast.py on
    all history so far, headroom from the last 14 days of per-minute data), plan nodes with
    tasks/capacity/plan.py, and keep each hour's planned nodes as the pool's floor (EKS minSize),
    raised `node_lag_s` + load p95 ahead so they are warm at the hour; the reactive
    autoscaler still runs on top, as it would in a cluster.
- Reported per policy: GPU-hours and cost (nodes are paid from request to removal); the
  share of demand (GPU-seconds) that waited for a cold start (queued while a node was booting
  to serve it; `any_wait_pct` also counts short queueing behind bursts with every node
  warm); and the p95 wait (work-weighted, in ticks of `tick_s`).
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuops.bench.capacity_solve import DEFAULT_SIZES, solve_time_table
from gpuops.tasks.capacity.forecast import forecast_demand
from gpuops.tasks.capacity.plan import ModelProfile, NodePoolSpec, PlanOptions, plan_capacity

POLICIES = ("static_peak", "reactive", "gpuops")
TRACE = "alibaba-genai-2026/lora_request_trace.csv"
LOAD_LATENCY = "alibaba-genai-2026/basemodel_update_latency_anon.csv"
SCALE_DOWN_UNNEEDED_S = 600  # cluster-autoscaler --scale-down-unneeded-time default


@dataclass(frozen=True)
class ServedModel:
    """One model of the replayed fleet and the node pool it runs on."""

    name: str
    instance_type: str
    gpus_per_node: int
    gpus_per_replica: int
    price_per_hour: float
    hours_shift: int  # its users' time zone relative to the trace


# Image-generation models on the GPU types that serve them (AWS on-demand list prices).
FLEET = (
    ServedModel("sdxl", "g6.xlarge", 1, 1, 0.805, 0),
    ServedModel("flux-dev", "g6e.12xlarge", 4, 1, 10.49, -5),
    ServedModel("sd3-large", "g5.12xlarge", 4, 2, 5.67, 8),
    ServedModel("sdxl-lora", "g6.12xlarge", 4, 1, 4.60, 3),
    ServedModel("video-gen", "p4d.24xlarge", 8, 8, 32.77, -2),
    ServedModel("flux-pro", "p5.48xlarge", 8, 4, 98.32, 12),
)


def data_dir() -> Path:
    """`$GPUOPS_DATA_DIR`, else `../shared/data` next to the repository root."""
    configured = os.environ.get("GPUOPS_DATA_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def load_requests(path: Path) -> pd.DataFrame:
    """Request arrival times (UTC) and GPU seconds; requests that used no time are dropped."""
    frame = pd.read_csv(path, usecols=["gmt_create", "exec_time_seconds"])
    frame = frame.dropna()
    frame = frame[frame["exec_time_seconds"] > 0]
    times = pd.to_datetime(frame["gmt_create"]).dt.tz_localize("UTC")
    return pd.DataFrame({"t": times.to_numpy(), "exec_s": frame["exec_time_seconds"].to_numpy()})


def load_times_s(path: Path) -> np.ndarray:
    """Model load latencies in seconds (the file's `value` column is in milliseconds)."""
    return pd.read_csv(path, usecols=["value"])["value"].dropna().to_numpy() / 1000.0


# --- building the fleet's demand -----------------------------------------------------------------

def model_work_per_tick(requests: pd.DataFrame, model: ServedModel, *, copies: int,
                        start: pd.Timestamp, ticks: int, tick_s: float,
                        rng: np.random.Generator) -> np.ndarray:
    """Replica-seconds of work arriving in each tick for one model (see module docstring)."""
    base = ((requests["t"] - start).dt.total_seconds()).to_numpy()
    span = ticks * tick_s
    work = np.zeros(ticks)
    for _ in range(copies):
        shift = (int(rng.integers(-2, 3)) * 86400 + model.hours_shift * 3600
                 + rng.uniform(-1800, 1800, base.size))
        arrival = np.mod(base + shift, span)
        index = np.minimum((arrival // tick_s).astype(int), ticks - 1)
        work += np.bincount(index, weights=requests["exec_s"].to_numpy(), minlength=ticks)
    return work


# --- the replay ----------------------------------------------------------------------------------

@dataclass
class PoolState:
    """Nodes of one pool during the replay: ready ones, booting ones (ready time), cost."""

    ready: int = 0
    booting: deque[int] = field(default_factory=deque)
    node_seconds: float = 0.0

    @property
    def total(self) -> int:
        return self.ready + len(self.booting)


def replay_policy(work: np.ndarray, model: ServedModel, *, tick_s: float, policy: str,
                  floor_nodes: np.ndarray | None, static_nodes: int, load_s: np.ndarray,
                  node_lag_s: float, target_utilization: float, eval_from: int,
                  rng: np.random.Generator) -> dict[str, Any]:
    """Serve `work` tick by tick under one policy; measure from tick `eval_from` on.

    `floor_nodes[tick]`: gpuops' planned minimum (already shifted earlier by the warm-up).
    Returns node-seconds, the wait histogram (ticks waited -> replica-seconds) and the work
    that waited for a cold start: work that waited while a node was booting for it.
    """
    replicas_per_node = model.gpus_per_node // model.gpus_per_replica
    pool = PoolState()
    pool.ready = static_nodes if policy == "static_peak" else 1
    queue: deque[list[float]] = deque()  # [arrival tick, remaining replica-seconds]
    recent_wanted: deque[tuple[int, int]] = deque()  # (tick, nodes wanted), last 10 minutes
    minute_ticks = max(1, round(60 / tick_s))
    keep_ticks = int(SCALE_DOWN_UNNEEDED_S / tick_s)
    waits: dict[int, float] = {}
    cold_waited = 0.0
    boot_ticks = [0]  # boot_ticks[j] = ticks before j with a node booting (prefix count)
    backlog = 0.0
    window: deque[float] = deque(maxlen=minute_ticks)
    for i in range(len(work)):
        # nodes that finished booting start serving this tick
        while pool.booting and pool.booting[0] <= i:
            pool.booting.popleft()
            pool.ready += 1
        if work[i] > 0:
            queue.append([i, work[i]])
            backlog += work[i]
        window.append(work[i])

        if policy != "static_peak":
            rate = sum(window) / (len(window) * tick_s) + backlog / 60.0
            wanted = math.ceil(rate / target_utilization / replicas_per_node - 1e-9)
            wanted = max(wanted, 1)
            if floor_nodes is not None:
                wanted = max(wanted, int(floor_nodes[i]))
            recent_wanted.append((i, wanted))
            while recent_wanted[0][0] <= i - keep_ticks:
                recent_wanted.popleft()
            if wanted > pool.total:
                for _ in range(wanted - pool.total):
                    ready_at = i + math.ceil((node_lag_s + float(rng.choice(load_s))) / tick_s)
                    pool.booting.append(ready_at)
                pool.booting = deque(sorted(pool.booting))
            keep = max(w for _, w in recent_wanted)
            if floor_nodes is not None:
                keep = max(keep, int(floor_nodes[i]))
            # A node unneeded for 10 minutes goes (booting ones finish booting first).
            surplus = pool.total - keep
            if surplus > 0:
                pool.ready -= min(surplus, pool.ready)

        boot_ticks.append(boot_ticks[-1] + bool(pool.booting))
        capacity = pool.ready * replicas_per_node * tick_s
        while queue and capacity > 1e-9:
            arrived, remaining = queue[0]
            served = min(remaining, capacity)
            capacity -= served
            backlog -= served
            if arrived >= eval_from:
                waited = i - int(arrived)
                waits[waited] = waits.get(waited, 0.0) + served
                if waited and boot_ticks[i + 1] > boot_ticks[int(arrived)]:
                    cold_waited += served
            if served >= remaining - 1e-9:
                queue.popleft()
            else:
                queue[0][1] = remaining - served
        if i >= eval_from:
            pool.node_seconds += pool.total * tick_s
    # work still queued at the end waited at least until the end
    for arrived, remaining in queue:
        if arrived >= eval_from:
            waits[len(work) - int(arrived)] = waits.get(len(work) - int(arrived), 0.0) + remaining
            cold_waited += remaining
    return {"node_seconds": pool.node_seconds, "waits": waits, "cold_waited": cold_waited}


def wait_figures(waits: dict[int, float], tick_s: float) -> tuple[float, float, float]:
    """(% of work that waited at least one tick, work-weighted p95 and p99 waits in s)."""
    total = sum(waits.values())
    if total <= 0:
        return 0.0, 0.0, 0.0
    waited = sum(amount for ticks, amount in waits.items() if ticks > 0)
    return (100.0 * waited / total, _weighted_quantile(waits, 0.95) * tick_s,
            _weighted_quantile(waits, 0.99) * tick_s)


def _weighted_quantile(waits: dict[int, float], q: float) -> int:
    total, cumulative = sum(waits.values()), 0.0
    for ticks, amount in sorted(waits.items()):
        cumulative += amount
        if cumulative >= q * total:
            return ticks
    return max(waits)


# --- gpuops: forecast + plan ---------------------------------------------------------------------

def gpuops_floors(work: dict[str, np.ndarray], fleet: tuple[ServedModel, ...], *,
                  start: pd.Timestamp, tick_s: float, eval_from: int, warmup_s: float,
                  target_utilization: float, quantile: float, time_limit: float,
                  headroom: bool) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Per-tick node floors from a daily forecast + plan (at 23:00 for the next 24 hours)."""
    ticks = len(next(iter(work.values())))
    ticks_per_hour = round(3600 / tick_s)
    floors = {m.name: np.zeros(ticks, dtype=int) for m in fleet}
    hourly = {m.name: _per_period(work[m.name], start, tick_s, "h") for m in fleet}
    per_minute = {m.name: _per_period(work[m.name], start, tick_s, "min") / 60.0 for m in fleet}
    stats: dict[str, Any] = {"plans": 0, "plan_solve_s_max": 0.0, "methods": {}}
    midnight = eval_from // ticks_per_hour  # hour index of the first evaluated midnight
    while midnight * ticks_per_hour < ticks:
        now = start + pd.Timedelta(hours=midnight - 1)  # 23:00 the evening before
        demand, headrooms = {}, {}
        for m in fleet:
            history = hourly[m.name][hourly[m.name].index < now]
            minutes = per_minute[m.name]
            minutes = minutes[(minutes.index < now) & (minutes.index >= now - pd.Timedelta(days=14))]
            forecast = forecast_demand(m.name, history, now=now.to_pydatetime(),
                                       horizon_hours=25, quantile=quantile,
                                       per_minute=minutes if headroom else None)
            demand[m.name] = list(forecast.plan_demand())
            headrooms[m.name] = forecast.headroom
            stats["methods"][forecast.chosen_method] = \
                stats["methods"].get(forecast.chosen_method, 0) + 1
        plan = plan_capacity(
            _pools(fleet, floors, midnight, ticks_per_hour), _profiles(fleet, target_utilization),
            demand, options=PlanOptions(time_limit_s=time_limit))
        stats["plans"] += 1
        stats["plan_solve_s_max"] = max(stats["plan_solve_s_max"], plan.solve_s)
        for m in fleet:
            for hour in range(1, 25):  # plan hour 0 is 23:00, already running
                first = (midnight + hour - 1) * ticks_per_hour - int(warmup_s / tick_s)
                last = (midnight + hour) * ticks_per_hour
                if first >= ticks:
                    break
                segment = floors[m.name][max(first, 0):min(last, ticks)]
                np.maximum(segment, plan.nodes[m.name][hour], out=segment)
        midnight += 24
    stats["headroom"] = {k: round(v, 2) for k, v in headrooms.items()}
    return floors, stats


def _per_period(work: np.ndarray, start: pd.Timestamp, tick_s: float, freq: str) -> pd.Series:
    index = start + pd.to_timedelta(np.arange(len(work)) * tick_s, unit="s")
    return pd.Series(work, index=index).resample(freq).sum()


def _pools(fleet: tuple[ServedModel, ...], floors: dict[str, np.ndarray], midnight: int,
           ticks_per_hour: int) -> list[NodePoolSpec]:
    """One pool per model; its current size is what the previous plan has at 23:00."""
    pools = []
    for m in fleet:
        tick = (midnight - 1) * ticks_per_hour
        current = int(floors[m.name][tick]) if 0 <= tick < len(floors[m.name]) else 0
        pools.append(NodePoolSpec(
            name=m.name, instance_type=m.instance_type, gpus_per_node=m.gpus_per_node,
            gpu_product=m.instance_type.split(".")[0], price_per_hour=m.price_per_hour,
            min_size=0, max_size=500, lead_time_hours=1, gpu_family="GPU",
            current_size=current))
    return pools


def _profiles(fleet: tuple[ServedModel, ...], target_utilization: float) -> list[ModelProfile]:
    # Demand is replica-seconds per hour, so one replica serves 3600 of them at 100 % busy.
    return [ModelProfile(name=m.name, gpus_per_replica=m.gpus_per_replica,
                         allowed_pools=(m.name,),
                         throughput_per_replica=3600.0 * target_utilization,
                         load_time_s=30.0, min_replicas=1) for m in fleet]


# --- the benchmark -------------------------------------------------------------------------------

def run(*, models: int = 6, copies: int = 12, train_days: int = 14, eval_days: float | None = None,
        tick_s: float = 15.0, node_lag_s: float = 300.0, target_utilization: float = 0.8,
        quantile: float = 0.9, headroom: bool = True, plan_time_limit: float = 30.0,
        seed: int = 0,
        sizes: Any = DEFAULT_SIZES, solve_time_limit: float = 120.0, gap: float = 0.01
        ) -> dict[str, Any]:
    root = data_dir()
    requests = load_requests(root / TRACE)
    load_s = load_times_s(root / LOAD_LATENCY)
    rng = np.random.default_rng(seed)
    fleet = FLEET[:models]
    start = requests["t"].min().floor("D")
    end = requests["t"].max().ceil("h")
    eval_from_time = start + pd.Timedelta(days=train_days)
    if eval_days is not None:
        end = min(end, eval_from_time + pd.Timedelta(days=eval_days))
        requests = requests[requests["t"] < end]
    ticks = int((end - start).total_seconds() // tick_s)
    eval_from = int((eval_from_time - start).total_seconds() // tick_s)
    work = {m.name: model_work_per_tick(requests, m, copies=copies, start=start, ticks=ticks,
                                        tick_s=tick_s, rng=rng) for m in fleet}
    warmup_s = node_lag_s + float(np.quantile(load_s, 0.95))
    floors, plan_stats = gpuops_floors(
        work, fleet, start=start, tick_s=tick_s, eval_from=eval_from, warmup_s=warmup_s,
        target_utilization=target_utilization, quantile=quantile, time_limit=plan_time_limit,
        headroom=bool(headroom))

    minute_ticks = round(60 / tick_s)
    totals: dict[str, dict[str, Any]] = {
        p: {"gpu_hours": 0.0, "cost": 0.0, "waits": {}, "cold": 0.0} for p in POLICIES}
    for model_index, m in enumerate(fleet):
        evaluated = work[m.name][eval_from:]
        usable = len(evaluated) // minute_ticks * minute_ticks
        peak_minute = evaluated[:usable].reshape(-1, minute_ticks).sum(axis=1).max() / 60.0
        static_nodes = max(1, math.ceil(peak_minute / target_utilization
                                        / (m.gpus_per_node // m.gpus_per_replica)))
        for policy_index, policy in enumerate(POLICIES):
            # Each replay draws its own load times: one policy's scale-ups must not change
            # the draws (and so the figures) of another.
            result = replay_policy(
                work[m.name], m, tick_s=tick_s, policy=policy,
                floor_nodes=floors[m.name] if policy == "gpuops" else None,
                static_nodes=static_nodes, load_s=load_s, node_lag_s=node_lag_s,
                target_utilization=target_utilization, eval_from=eval_from,
                rng=np.random.default_rng([seed, model_index, policy_index]))
            hours = result["node_seconds"] / 3600.0
            totals[policy]["gpu_hours"] += hours * m.gpus_per_node
            totals[policy]["cost"] += hours * m.price_per_hour
            # weight by GPUs per replica: shares are of GPU-seconds across models
            for ticks_waited, amount in result["waits"].items():
                totals[policy]["waits"][ticks_waited] = totals[policy]["waits"].get(
                    ticks_waited, 0.0) + amount * m.gpus_per_replica
            totals[policy]["cold"] += result["cold_waited"] * m.gpus_per_replica

    figures: dict[str, Any] = {"gpu_hours": {}, "cost_usd": {}, "cold_start_wait_pct": {},
                               "p95_wait_s": {}, "any_wait_pct": {}, "p99_wait_s": {}}
    for policy in POLICIES:
        any_pct, p95, p99 = wait_figures(totals[policy]["waits"], tick_s)
        demand = sum(totals[policy]["waits"].values())
        figures["gpu_hours"][policy] = round(totals[policy]["gpu_hours"], 1)
        figures["cost_usd"][policy] = round(totals[policy]["cost"], 2)
        figures["cold_start_wait_pct"][policy] = \
            round(100.0 * totals[policy]["cold"] / demand, 3) if demand else 0.0
        figures["any_wait_pct"][policy] = round(any_pct, 3)
        figures["p95_wait_s"][policy] = round(p95, 1)
        figures["p99_wait_s"][policy] = round(p99, 1)
    static = figures["gpu_hours"]["static_peak"]
    figures["gpu_hours_saved_vs_static_pct"] = {
        p: round(100.0 * (1 - figures["gpu_hours"][p] / static), 1) if static else 0.0
        for p in ("reactive", "gpuops")}
    figures.update({
        "models": len(fleet), "copies_per_model": copies,
        "eval_days": round((ticks - eval_from) * tick_s / 86400, 2),
        "requests_replayed": int(len(requests) * copies * len(fleet)),
        "node_lag_s": node_lag_s, "load_p95_s": round(float(np.quantile(load_s, 0.95)), 1),
        "forecast_methods": plan_stats["methods"], "headroom": plan_stats["headroom"],
        "plans": plan_stats["plans"],
        "gpuops_headroom_on": bool(headroom), "forecast_quantile": quantile,
        "plan_solve_s_max": round(plan_stats["plan_solve_s_max"], 2),
    })
    figures.update(solve_time_table(sizes, time_limit=solve_time_limit, gap=gap, seed=seed))
    return figures


def main(json_output: bool = True, **options: Any) -> dict[str, Any]:
    """Run the replay; `--models 2 --copies 2 --eval-days 1 --sizes "[[5,5,12]]"` is quick.

    Prints the figures as one JSON object on the last line.
    """
    started = datetime.now()
    result = run(**options)
    if not json_output:
        for key in ("gpu_hours", "cost_usd", "cold_start_wait_pct", "p95_wait_s"):
            row = "  ".join(f"{p}={result[key][p]}" for p in POLICIES)
            print(f"{key:>20}: {row}")
        print(f"{'solve_s':>20}: {result['solve_s']}")
        print(f"{'elapsed':>20}: {(datetime.now() - started).total_seconds():.0f} s")
    print(json.dumps(result))
    return result
