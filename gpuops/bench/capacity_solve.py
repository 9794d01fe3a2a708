"""`gpuops bench capacity-solve`: how long HiGHS takes on fleet-sized capacity plans.

The issue's targets are 20x30x24 (pools x models x hours) in <= 5 s and 40x50x168 in <= 120 s
within a 1 % gap. The problems are synthetic but shaped like a real fleet: AWS GPU instance
types at their on-demand prices (H100 p5.48xlarge ~$98/h for 8 GPUs down to a 1-GPU L4 at
$0.80/h) in a few regions, per-region GPU quotas, models needing 1/2/4/8 GPUs with diurnal
demand, lead times of 0-2 h, some ramp limits. Seeded, so every run solves the same problems.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuops.tasks.capacity.plan import (
    CapacityPlan,
    GpuQuota,
    ModelProfile,
    NodePoolSpec,
    PlanOptions,
    plan_capacity,
)

DEFAULT_SIZES = ((10, 10, 24), (20, 30, 24), (20, 30, 168), (40, 50, 168))


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu_product: str
    gpus: int
    price_per_hour: float  # us-east-1 on-demand, USD
    family: str  # the AWS quota family (P or G instances)


# What a GPU serving fleet on AWS is built from (on-demand list prices, rounded).
CATALOG = (
    InstanceType("p5.48xlarge", "H100", 8, 98.32, "P"),
    InstanceType("p4de.24xlarge", "A100-80GB", 8, 40.97, "P"),
    InstanceType("p4d.24xlarge", "A100-40GB", 8, 32.77, "P"),
    InstanceType("g6e.48xlarge", "L40S", 8, 30.13, "G"),
    InstanceType("g6e.12xlarge", "L40S", 4, 10.49, "G"),
    InstanceType("g6e.xlarge", "L40S", 1, 1.86, "G"),
    InstanceType("g5.48xlarge", "A10G", 8, 16.29, "G"),
    InstanceType("g5.12xlarge", "A10G", 4, 5.67, "G"),
    InstanceType("g5.xlarge", "A10G", 1, 1.01, "G"),
    InstanceType("g6.48xlarge", "L4", 8, 13.35, "G"),
    InstanceType("g6.12xlarge", "L4", 4, 4.60, "G"),
    InstanceType("g6.xlarge", "L4", 1, 0.80, "G"),
)
# Regional price level relative to us-east-1.
REGIONS = (("use1", 1.0), ("usw2", 1.0), ("euw1", 1.12), ("apne1", 1.24))
# A model is validated on a class of GPUs (its SLO holds there); large models (4-8 GPUs
# per replica) need the big-memory ones.
BIG_MODEL_GPUS = (("H100",), ("H100", "A100-80GB"), ("A100-80GB", "A100-40GB"), ("L40S",))
SMALL_MODEL_GPUS = (("L4",), ("L4", "A10G"), ("A10G",), ("L40S",), ("L40S", "A100-40GB"))
MAX_POOLS_PER_MODEL = 8


@dataclass(frozen=True)
class Fleet:
    pools: tuple[NodePoolSpec, ...]
    models: tuple[ModelProfile, ...]
    quotas: tuple[GpuQuota, ...]
    demand: dict[str, list[float]]


def diurnal(hours: np.ndarray, phase: float) -> np.ndarray:
    """0..1 daily shape: a busy day, a quiet night, a softer weekend."""
    day = 0.5 + 0.5 * np.sin(2 * np.pi * (hours - phase) / 24)
    weekend = ((hours // 24) % 7) >= 5
    return np.where(weekend, 0.6, 1.0) * day


def serving_pools(pools: list[NodePoolSpec], gpus: int, rng: np.random.Generator
                  ) -> tuple[str, ...]:
    """The pools a model may use: those of its GPU class with room for a replica.

    Falls back to any pool big enough when the fleet has none of its class (small fleets).
    """
    classes = BIG_MODEL_GPUS if gpus >= 4 else SMALL_MODEL_GPUS
    products = classes[int(rng.integers(len(classes)))]
    fits = [p.name for p in pools if p.gpus_per_node >= gpus and p.gpu_product in products]
    if not fits:
        fits = [p.name for p in pools if p.gpus_per_node >= gpus]
    chosen = rng.choice(fits, size=min(len(fits), MAX_POOLS_PER_MODEL), replace=False)
    return tuple(str(name) for name in chosen)


def synthetic_fleet(n_pools: int, n_models: int, hours: int, *, seed: int = 0) -> Fleet:
    """A seeded fleet of `n_pools` pools, `n_models` models and `hours` of hourly demand."""
    rng = np.random.default_rng(seed)
    pools = []
    for i in range(n_pools):
        kind = CATALOG[i % len(CATALOG)]
        region, level = REGIONS[(i // len(CATALOG)) % len(REGIONS)]
        max_size = int(rng.integers(4, 24)) if kind.gpus == 8 else int(rng.integers(8, 40))
        min_size = int(rng.random() < 0.2)
        pools.append(NodePoolSpec(
            name=f"{kind.name}-{region}-{i}", instance_type=kind.name, gpus_per_node=kind.gpus,
            gpu_product=kind.gpu_product,
            price_per_hour=round(kind.price_per_hour * level * rng.uniform(0.97, 1.03), 3),
            min_size=min_size, max_size=max_size, lead_time_hours=int(rng.integers(0, 3)),
            gpu_family=f"{kind.family}-{region}",
            current_size=int(rng.integers(min_size, max_size // 2 + 1)),
            max_nodes_added_per_hour=int(rng.integers(2, 8)) if rng.random() < 0.3 else None))

    families: dict[str, int] = {}
    for pool in pools:
        families[pool.gpu_family] = families.get(pool.gpu_family, 0) \
            + pool.max_size * pool.gpus_per_node
    quotas = []
    for family, most in sorted(families.items()):
        floor = sum(p.min_size * p.gpus_per_node for p in pools if p.gpu_family == family)
        quotas.append(GpuQuota(family, max(floor, int(0.6 * most))))

    gpus_needed = [int(rng.choice([1, 2, 4, 8], p=[0.4, 0.25, 0.2, 0.15]))
                   for _ in range(n_models)]
    allowed = [serving_pools(pools, gpus, rng) for gpus in gpus_needed]
    # Size each model's peak at about half of its fair share of the GPUs it may use (each
    # pool's max size, within quota, split between the models allowed on it): a fleet sized
    # for its peaks with room to spare, where quotas and max sizes bind only here and there.
    sharing = {p.name: sum(p.name in names for names in allowed) for p in pools}
    quota_share = {q.family: q.max_gpus / families[q.family] for q in quotas}
    by_name = {p.name: p for p in pools}
    models, demand = [], {}
    t = np.arange(hours)
    for j, (gpus, names) in enumerate(zip(gpus_needed, allowed, strict=True)):
        fair_gpus = sum(by_name[n].max_size * by_name[n].gpus_per_node
                        * quota_share[by_name[n].gpu_family] / sharing[n] for n in names)
        peak_replicas = max(1.0, 0.5 * fair_gpus / gpus * rng.uniform(0.3, 1.7))
        throughput = 3600.0 * gpus * rng.uniform(0.5, 2.0)  # requests/hour per replica
        shape = diurnal(t, phase=rng.uniform(0, 24))
        noise = rng.lognormal(0.0, 0.1, hours)
        demand[f"model-{j}"] = list(peak_replicas * throughput * (0.2 + 0.8 * shape) * noise)
        models.append(ModelProfile(name=f"model-{j}", gpus_per_replica=gpus,
                                   allowed_pools=names, throughput_per_replica=throughput,
                                   load_time_s=float(rng.uniform(10, 300)),
                                   min_replicas=int(rng.random() < 0.5)))
    return Fleet(tuple(pools), tuple(models), tuple(quotas), demand)


def solve_fleet(fleet: Fleet, *, time_limit: float, gap: float) -> CapacityPlan:
    return plan_capacity(fleet.pools, fleet.models, fleet.demand, fleet.quotas,
                         PlanOptions(time_limit_s=time_limit, mip_rel_gap=gap))


def size_key(size: tuple[int, int, int]) -> str:
    return "x".join(str(n) for n in size)


def solve_time_table(sizes: Any = DEFAULT_SIZES, time_limit: float = 120.0,
                     gap: float = 0.01, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Solve one synthetic fleet per (pools, models, hours); seconds, gap and status by size.

    `solve_s` is wall time including building the cvxpy model; `solve_gap` the relative MIP
    gap HiGHS reports at the end (<= `gap` unless the time limit stopped it first).
    """
    table: dict[str, dict[str, Any]] = {"solve_s": {}, "solve_gap": {}, "solve_status": {}}
    for size in sizes:
        pools, models, hours = (int(n) for n in size)
        plan = solve_fleet(synthetic_fleet(pools, models, hours, seed=seed),
                           time_limit=time_limit, gap=gap)
        key = size_key((pools, models, hours))
        table["solve_s"][key] = round(plan.solve_s, 2)
        table["solve_gap"][key] = None if plan.gap is None or math.isnan(plan.gap) \
            else round(plan.gap, 5)
        table["solve_status"][key] = plan.status
    return table


def main(json_output: bool = True, sizes: Any = DEFAULT_SIZES, time_limit: float = 120.0,
         gap: float = 0.01, seed: int = 0) -> dict[str, Any]:
    """Print the table (`--sizes "[[10,10,24]]"` for a quick run); JSON on the last line."""
    result = solve_time_table(sizes, float(time_limit), float(gap), int(seed))
    if not json_output:
        for key in result["solve_s"]:
            print(f"{key:>10}: {result['solve_s'][key]:8.2f} s  gap {result['solve_gap'][key]}"
                  f"  {result['solve_status'][key]}")
    print(json.dumps(result))
    return result
