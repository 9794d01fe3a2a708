"""Plan GPU nodes per pool per hour so forecast demand is served at the least cost.

Why an optimisation and not a rule: pools differ in price per GPU, GPUs per node, quota family
and provisioning lead time, models fit only some pools, and adding a node now only helps in
`lead_time_hours`. A mixed-integer program weighs all of that at once; HiGHS (through cvxpy)
solves fleet-sized instances in seconds to minutes.

The model (hours t = 0..H-1, hour 0 being the current hour):
- nodes[p, t] integer, replicas[m, p, t] >= 0 for each pool p that model m may use
  (integer unless the problem is huge; continuous-then-rounded beyond that, see
  `PlanOptions`), shortfall[m, t] >= 0, and a slack for minimum replicas that cannot be met.
- GPU capacity: sum_m replicas[m, p, t] * gpus_per_replica[m] <= nodes[p, t] * gpus_per_node[p].
- Demand: sum_p replicas[m, p, t] + shortfall[m, t] >= ceil(demand[m, t] / throughput[m]),
  i.e. in whole replicas (shortfall in replica-hours; the plan reports it in demand units).
- min_size <= nodes <= max_size; per GPU family, sum_p nodes * gpus_per_node <= quota.
- Lead time: a node requested now is ready `lead_time_hours` later, so for t < lead_time_hours
  a pool cannot grow beyond `current_size` (its desired size: running plus already requested
  nodes). Scaling down is immediate. Ramp: at most `max_nodes_added_per_hour` more nodes than
  the hour before. Where these make `min_size` unreachable early on, the lower bound follows
  what is reachable instead of making the problem infeasible.
- Objective: node-hour cost + churn (|nodes[t] - nodes[t-1]|, linearised with an auxiliary
  variable, priced as a fraction of the node-hour price) + a heavy penalty per unit of unmet
  demand, so demand beyond max sizes or quotas gives a plan with an explicit shortfall per
  model-hour instead of "infeasible". A tiny cost per replica keeps replicas at what demand
  needs (they are otherwise free inside paid-for nodes).

Model load time (`load_time_s`) does not enter this hourly model: the apply step starts
replicas that much before their hour.

Pure: cvxpy, numpy, scipy.sparse; no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpuops.common.errors import ConfigError

# cvxpy (with scipy) takes about 2 s of CPU to import, and every process that serves or
# lists the deployments imports this module: it is imported where a plan is solved.
if TYPE_CHECKING:
    import cvxpy as cp
    import scipy.sparse as sp
_EPS = 1e-6


class InvalidPlanInput(ConfigError, ValueError):
    """A pool, quota, model profile, demand or option that cannot be planned with."""


class PlanNotFound(RuntimeError):
    """The solver returned no usable plan (e.g. time limit before any incumbent)."""


# --- inputs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NodePoolSpec:
    """A node pool (EKS node group / ASG) the plan may size.

    `current_size` is the pool's desired size now: nodes running plus nodes already requested.
    `max_nodes_added_per_hour` (None: unlimited) is the ramp limit.
    """

    name: str
    instance_type: str
    gpus_per_node: int
    gpu_product: str
    price_per_hour: float
    min_size: int
    max_size: int
    lead_time_hours: int
    gpu_family: str
    current_size: int
    max_nodes_added_per_hour: int | None = None


@dataclass(frozen=True)
class GpuQuota:
    """The account's cap on GPUs of one family, summed over every pool of that family."""

    family: str
    max_gpus: int


@dataclass(frozen=True)
class ModelProfile:
    """How one model serves: `throughput_per_replica` is in demand units per hour at its SLO.

    Demand for the model must be in the same units (e.g. requests/hour, or GPU-seconds/hour).
    """

    name: str
    gpus_per_replica: int
    allowed_pools: tuple[str, ...]
    throughput_per_replica: float
    load_time_s: float = 0.0
    min_replicas: int = 0


@dataclass(frozen=True)
class PlanOptions:
    """Solver limits and the weights of the objective.

    `churn_penalty`: cost of adding or removing one node, as a fraction of its hourly price.
    `shortfall_penalty`: cost of one replica-hour of unmet demand, in multiples of the most
    expensive node-hour the model may use. Anything above 1 + 2 x `churn_penalty` already makes
    the solver buy capacity whenever it can (one more replica never needs more than one more
    node); 10 keeps a clear margin without the huge coefficients that slow HiGHS' search.
    `integer_replicas=None` chooses integer replicas when there are at most
    `integer_replicas_max_vars` replica variables, continuous-and-rounded otherwise. Integer
    replicas are exact and, measured on the capacity-solve fleets up to 40x50x168 (~50,000
    replica variables), also solve faster (20x30x24: 2-5 s vs 5-10 s; 20x30x168: ~30-60 s vs
    not within 1 % in 120 s), so the default threshold is high.
    """

    time_limit_s: float = 60.0
    mip_rel_gap: float = 0.01
    integer_replicas: bool | None = None
    integer_replicas_max_vars: int = 100_000
    churn_penalty: float = 0.1
    shortfall_penalty: float = 10.0
    replica_cost_fraction: float = 1e-3


# --- validation ----------------------------------------------------------------------------------

def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check(condition: bool, field_path: str, message: str) -> None:
    if not condition:
        raise InvalidPlanInput(field_path, message)


def _validate_pool(pool: NodePoolSpec) -> None:
    where = f"pools[{pool.name!r}]"
    for name in ("gpus_per_node", "min_size", "max_size", "lead_time_hours", "current_size"):
        value = getattr(pool, name)
        _check(_is_int(value), f"{where}.{name}", f"must be an integer, got {value!r}")
        _check(value >= 0, f"{where}.{name}", f"must be >= 0, got {value!r}")
    _check(pool.gpus_per_node >= 1, f"{where}.gpus_per_node",
           f"must be >= 1, got {pool.gpus_per_node!r}")
    _check(pool.max_size >= pool.min_size, f"{where}.max_size",
           f"{pool.max_size} is below min_size {pool.min_size}")
    price = pool.price_per_hour
    _check(isinstance(price, (int, float)) and math.isfinite(price) and price >= 0,
           f"{where}.price_per_hour", f"must be a finite number >= 0, got {price!r}")
    ramp = pool.max_nodes_added_per_hour
    _check(ramp is None or (_is_int(ramp) and ramp >= 0), f"{where}.max_nodes_added_per_hour",
           f"must be None or an integer >= 0, got {ramp!r}")


def _validate_model(model: ModelProfile, pools: Mapping[str, NodePoolSpec]) -> None:
    where = f"models[{model.name!r}]"
    _check(_is_int(model.gpus_per_replica) and model.gpus_per_replica >= 1,
           f"{where}.gpus_per_replica", f"must be an integer >= 1, got {model.gpus_per_replica!r}")
    thr = model.throughput_per_replica
    _check(isinstance(thr, (int, float)) and math.isfinite(thr) and thr > 0,
           f"{where}.throughput_per_replica", f"must be a finite number > 0, got {thr!r}")
    _check(_is_int(model.min_replicas) and model.min_replicas >= 0, f"{where}.min_replicas",
           f"must be an integer >= 0, got {model.min_replicas!r}")
    _check(isinstance(model.load_time_s, (int, float)) and model.load_time_s >= 0,
           f"{where}.load_time_s", f"must be >= 0, got {model.load_time_s!r}")
    _check(len(model.allowed_pools) > 0, f"{where}.allowed_pools", "must name at least one pool")
    _check(len(set(model.allowed_pools)) == len(model.allowed_pools), f"{where}.allowed_pools",
           f"lists a pool twice: {list(model.allowed_pools)!r}")
    for name in model.allowed_pools:
        _check(name in pools, f"{where}.allowed_pools",
               f"unknown pool {name!r}; known pools: {sorted(pools)}")
        _check(pools[name].gpus_per_node >= model.gpus_per_replica, f"{where}.allowed_pools",
               f"pool {name!r} has {pools[name].gpus_per_node} GPUs per node, a replica needs "
               f"{model.gpus_per_replica}")


def _validate_demand(demand: Mapping[str, Sequence[float]],
                     models: Sequence[ModelProfile]) -> int:
    names = [m.name for m in models]
    for name in demand:
        _check(name in names, f"demand[{name!r}]", f"no model profile named {name!r}")
    hours = None
    first = None
    for name in names:
        _check(name in demand, f"demand[{name!r}]", "missing: give a series for every model")
        series = np.asarray(demand[name], dtype=float)
        _check(series.ndim == 1 and series.size >= 1, f"demand[{name!r}]",
               f"must be a non-empty 1-D sequence of hourly values, got shape {series.shape}")
        if hours is None:
            hours, first = series.size, name
        _check(series.size == hours, f"demand[{name!r}]",
               f"has {series.size} hours, expected {hours} (the length of demand[{first!r}])")
        _check(bool(np.all(np.isfinite(series))) and bool(np.all(series >= 0)),
               f"demand[{name!r}]", "values must be finite and >= 0")
    assert hours is not None
    return hours


def validate_plan_inputs(pools: Sequence[NodePoolSpec], models: Sequence[ModelProfile],
                         demand: Mapping[str, Sequence[float]], quotas: Sequence[GpuQuota],
                         options: PlanOptions) -> int:
    """Check every input before any solver work; returns the number of hours to plan.

    Raises `InvalidPlanInput` (a `ValueError`) naming the field, e.g.
    `pools['h100'].max_size: 2 is below min_size 4`.
    """
    _check(len(pools) > 0, "pools", "at least one node pool is needed")
    _check(len(models) > 0, "models", "at least one model profile is needed")
    by_name: dict[str, NodePoolSpec] = {}
    for i, pool in enumerate(pools):
        _check(pool.name not in by_name, f"pools[{i}].name", f"duplicate pool {pool.name!r}")
        _validate_pool(pool)
        by_name[pool.name] = pool
    seen_models: set[str] = set()
    for i, model in enumerate(models):
        _check(model.name not in seen_models, f"models[{i}].name",
               f"duplicate model {model.name!r}")
        seen_models.add(model.name)
        _validate_model(model, by_name)
    families = {p.gpu_family for p in pools}
    seen_families: set[str] = set()
    for quota in quotas:
        where = f"quotas[{quota.family!r}]"
        _check(quota.family not in seen_families, f"{where}.family", "duplicate quota family")
        seen_families.add(quota.family)
        _check(quota.family in families, f"{where}.family",
               f"no pool has gpu_family {quota.family!r}; pool families: {sorted(families)}")
        _check(_is_int(quota.max_gpus) and quota.max_gpus >= 0, f"{where}.max_gpus",
               f"must be an integer >= 0, got {quota.max_gpus!r}")
        floor = sum(p.min_size * p.gpus_per_node for p in pools if p.gpu_family == quota.family)
        _check(floor <= quota.max_gpus, f"{where}.max_gpus",
               f"{quota.max_gpus} GPUs is below the {floor} GPUs the pools' min_size require")
    _check(options.time_limit_s > 0, "options.time_limit_s", "must be > 0")
    _check(0 <= options.mip_rel_gap < 1, "options.mip_rel_gap", "must be in [0, 1)")
    for name in ("churn_penalty", "shortfall_penalty", "replica_cost_fraction"):
        _check(getattr(options, name) >= 0, f"options.{name}", "must be >= 0")
    return _validate_demand(demand, models)


# --- the optimisation model ----------------------------------------------------------------------

def node_bounds(pool: NodePoolSpec, hours: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-hour (lower, upper) node counts that lead time, ramp limit and sizes allow.

    Upper: the largest size reachable from `current_size` when nodes requested now arrive
    `lead_time_hours` later and at most `max_nodes_added_per_hour` are added per hour.
    Lower: `min_size`, or the upper bound where min_size is not reachable yet.
    """
    ramp = math.inf if pool.max_nodes_added_per_hour is None else pool.max_nodes_added_per_hour
    upper = np.empty(hours)
    reachable = float(pool.current_size)
    for t in range(hours):
        cap = pool.current_size if t < pool.lead_time_hours else math.inf
        reachable = min(pool.max_size, cap, reachable + ramp)
        upper[t] = reachable
    lower = np.minimum(pool.min_size, upper)
    return lower, upper


@dataclass(frozen=True)
class CapacityModel:
    """The cvxpy problem with its variables and the index maps needed to read them back."""

    problem: cp.Problem
    nodes: cp.Variable  # (pools, hours)
    replicas: cp.Variable  # (edges, hours), edge k = (model_of_edge[k], pool_of_edge[k])
    shortfall: cp.Variable  # (models, hours), in replicas (demand / throughput_per_replica)
    min_replica_gap: cp.Variable  # (models, hours), replicas missing below min_replicas
    edges: tuple[tuple[int, int], ...]
    lower: np.ndarray
    upper: np.ndarray
    integer_replicas: bool


def build_capacity_model(pools: Sequence[NodePoolSpec], models: Sequence[ModelProfile],
                         demand: np.ndarray, quotas: Sequence[GpuQuota], options: PlanOptions
                         ) -> CapacityModel:
    """The whole MILP, vectorised over hours (see the module docstring for the model)."""
    import cvxpy as cp
    import scipy.sparse as sp

    n_pools, n_models, hours = len(pools), len(models), demand.shape[1]
    pool_index = {p.name: i for i, p in enumerate(pools)}
    edges = tuple((m, pool_index[name]) for m, model in enumerate(models)
                  for name in model.allowed_pools)
    n_edges = len(edges)
    edge_model = np.array([m for m, _ in edges])
    edge_pool = np.array([p for _, p in edges])

    gpus_per_node = np.array([p.gpus_per_node for p in pools], dtype=float)
    price = np.array([p.price_per_hour for p in pools], dtype=float)
    current = np.array([p.current_size for p in pools], dtype=float)
    gpus_per_replica = np.array([m.gpus_per_replica for m in models], dtype=float)
    throughput = np.array([m.throughput_per_replica for m in models], dtype=float)
    min_replicas = np.array([m.min_replicas for m in models], dtype=float)
    bounds = [node_bounds(p, hours) for p in pools]
    lower = np.array([b[0] for b in bounds])
    upper = np.array([b[1] for b in bounds])

    integer_replicas = options.integer_replicas
    if integer_replicas is None:
        integer_replicas = n_edges * hours <= options.integer_replicas_max_vars

    nodes = cp.Variable((n_pools, hours), integer=True, bounds=[lower, upper], name="nodes")
    replicas = cp.Variable((n_edges, hours), integer=integer_replicas, nonneg=True,
                           name="replicas")
    shortfall = cp.Variable((n_models, hours), nonneg=True, name="shortfall")
    min_replica_gap = cp.Variable((n_models, hours), nonneg=True, name="min_replica_gap")
    churn = cp.Variable((n_pools, hours), nonneg=True, name="churn")

    def incidence(rows: np.ndarray, n_rows: int, values: np.ndarray) -> sp.csr_matrix:
        return sp.csr_matrix((values, (rows, np.arange(n_edges))), shape=(n_rows, n_edges))

    gpus_on_pool = incidence(edge_pool, n_pools, gpus_per_replica[edge_model])
    replica_count = incidence(edge_model, n_models, np.ones(n_edges))
    # Demand in whole replicas: valid (only whole replicas serve), it keeps every coefficient
    # near 1 (requests/hour would reach 1e6), and it closes most of the gap between
    # continuous replicas and the integer plan.
    replicas_needed = np.ceil(demand / throughput[:, None] - _EPS)
    previous = cp.hstack([current.reshape(-1, 1), nodes[:, :-1]]) if hours > 1 \
        else cp.Constant(current.reshape(-1, 1))

    constraints = [
        gpus_on_pool @ replicas <= cp.multiply(gpus_per_node.reshape(-1, 1), nodes),
        replica_count @ replicas + shortfall >= replicas_needed,
        churn >= nodes - previous,
        churn >= previous - nodes,
    ]
    if min_replicas.any():
        constraints.append(replica_count @ replicas + min_replica_gap >= min_replicas[:, None])
    else:
        constraints.append(min_replica_gap == 0)
    for quota in quotas:
        in_family = np.array([p.gpu_family == quota.family for p in pools], dtype=float)
        constraints.append((in_family * gpus_per_node) @ nodes <= quota.max_gpus)
    ramped = [i for i, p in enumerate(pools) if p.max_nodes_added_per_hour is not None]
    if ramped:
        ramp = np.array([pools[i].max_nodes_added_per_hour for i in ramped], dtype=float)
        constraints.append(nodes[ramped, :] - previous[ramped, :] <= ramp[:, None])

    # The most expensive node-hour each model may use prices its unmet demand.
    dearest = np.zeros(n_models)
    np.maximum.at(dearest, edge_model, price[edge_pool])
    dearest = np.maximum(dearest, 1.0)  # free pools still need a real penalty
    shortfall_cost = options.shortfall_penalty * dearest  # per replica-hour unmet
    replica_cost = options.replica_cost_fraction * price[edge_pool] \
        * gpus_per_replica[edge_model] / gpus_per_node[edge_pool]
    objective = (
        price @ cp.sum(nodes, axis=1)
        + options.churn_penalty * price @ cp.sum(churn, axis=1)
        + shortfall_cost @ cp.sum(shortfall, axis=1)
        + options.shortfall_penalty * dearest @ cp.sum(min_replica_gap, axis=1)
        + replica_cost @ cp.sum(replicas, axis=1)
    )
    problem = cp.Problem(cp.Minimize(objective), constraints)
    return CapacityModel(problem, nodes, replicas, shortfall, min_replica_gap, edges, lower, upper,
                  integer_replicas)


# --- the result ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CapacityPlan:
    """Nodes per pool per hour, the replicas they carry and what stays unmet.

    `nodes[pool][hour]`, `replicas[model][pool][hour]` (whole replicas, only for allowed
    pools), `shortfall[model][hour]` in demand units, `min_replica_shortfall[model][hour]` in
    replicas. `cost` is the plan's node-hour cost in the price unit ($); `objective` adds the
    churn and shortfall penalties; `gap` the relative MIP gap HiGHS reports on the objective
    (None when it reports none); `status` is cvxpy's ("optimal", or "user_limit" for a
    time-limited incumbent, still a valid plan); `solve_s` the wall time of building and
    solving; `recheck` what rounding continuous replicas changed (nodes added, replicas
    dropped).
    """

    pools: tuple[str, ...]
    models: tuple[str, ...]
    hours: int
    nodes: Mapping[str, tuple[int, ...]]
    replicas: Mapping[str, Mapping[str, tuple[int, ...]]]
    shortfall: Mapping[str, tuple[float, ...]]
    min_replica_shortfall: Mapping[str, tuple[int, ...]]
    demand: Mapping[str, tuple[float, ...]]
    cost: float
    objective: float
    status: str
    gap: float | None
    solve_s: float
    integer_replicas: bool
    recheck: tuple[str, ...] = field(default=())

    def pool_targets(self, hour: int) -> dict[str, int]:
        """Node count per pool for one hour of the plan (0 = the current hour)."""
        if not 0 <= hour < self.hours:
            raise IndexError(f"hour {hour} outside the plan's 0..{self.hours - 1}")
        return {pool: self.nodes[pool][hour] for pool in self.pools}

    def gpu_hours(self, gpus_per_node: Mapping[str, int]) -> float:
        return float(sum(sum(self.nodes[p]) * gpus_per_node[p] for p in self.pools))

    @property
    def total_shortfall(self) -> float:
        return float(sum(sum(v) for v in self.shortfall.values()))

    def shortfall_report(self) -> str:
        """Plain text: where the plan falls short, by model and hour, and what rounding did."""
        lines = []
        for model in self.models:
            short = self.shortfall[model]
            hours_short = [t for t, v in enumerate(short) if v > _EPS]
            if hours_short:
                total, wanted = sum(short), sum(self.demand[model])
                share = 100.0 * total / wanted if wanted else 0.0
                detail = ", ".join(f"h{t}: {short[t]:.6g}" for t in hours_short)
                lines.append(f"model {model!r}: {total:.6g} demand units unmet over "
                             f"{len(hours_short)} h ({share:.1f}% of its demand): {detail}")
            gaps = self.min_replica_shortfall[model]
            if any(gaps):
                detail = ", ".join(f"h{t}: {v}" for t, v in enumerate(gaps) if v)
                lines.append(f"model {model!r}: below min_replicas by: {detail}")
        if not lines:
            lines.append(f"No shortfall: every model's demand is covered in all {self.hours} h.")
        lines.extend(f"rounding: {note}" for note in self.recheck)
        return "\n".join(lines)


def _solver_gap(problem: cp.Problem) -> float | None:
    """HiGHS' own relative MIP gap (|primal - dual bound| / |primal|), if it reported one."""
    info = problem.solver_stats.extra_stats if problem.solver_stats else None
    gap = getattr(info, "mip_gap", None)
    return float(gap) if gap is not None and math.isfinite(gap) else None


def _has_solution(problem: cp.Problem, model: CapacityModel) -> bool:
    import cvxpy as cp

    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE, cp.USER_LIMIT) \
            or model.nodes.value is None:
        return False
    info = problem.solver_stats.extra_stats if problem.solver_stats else None
    # HiGHS: 2 = kSolutionStatusFeasible; a time limit before any incumbent leaves 0.
    return getattr(info, "primal_solution_status", 2) == 2


def round_replicas(values: np.ndarray, edges: Sequence[tuple[int, int]], n_models: int
                    ) -> np.ndarray:
    """Whole replicas: per model-hour, floor each pool's share, then give the replicas still
    needed to reach ceil(total) to the pools with the largest fractional parts.

    Rounding each share up would over-provision by up to one replica per pool.
    """
    values = np.maximum(values, 0.0)
    rounded = np.floor(values + _EPS)
    fractions = values - rounded
    edge_model = np.array([m for m, _ in edges])
    for m in range(n_models):
        rows = np.flatnonzero(edge_model == m)
        need = np.ceil(values[rows].sum(axis=0) - _EPS) - rounded[rows].sum(axis=0)
        for t in np.flatnonzero(need > 0):
            order = rows[np.argsort(-fractions[rows, t], kind="stable")]
            rounded[order[: int(need[t])], t] += 1
    return rounded


def fit_whole_replicas(nodes: np.ndarray, replicas: np.ndarray, pools: Sequence[NodePoolSpec],
                      models: Sequence[ModelProfile], quotas: Sequence[GpuQuota],
                      edges: Sequence[tuple[int, int]], upper: np.ndarray) -> list[str]:
    """Make rounded replicas fit: add nodes where bounds, ramp and quota allow, else drop
    replicas (which then shows as shortfall).

    Changes `nodes` and `replicas` in place; returns one note per change.
    """
    notes = []
    quota_of = {q.family: q.max_gpus for q in quotas}
    for p, pool in enumerate(pools):
        on_pool = [k for k, (_, q) in enumerate(edges) if q == p]
        for t in range(nodes.shape[1]):
            used = sum(replicas[k, t] * models[edges[k][0]].gpus_per_replica for k in on_pool)
            missing = math.ceil(used / pool.gpus_per_node - _EPS) - nodes[p, t]
            if missing <= 0:
                continue
            family_used = sum(nodes[i, t] * other.gpus_per_node for i, other in enumerate(pools)
                              if other.gpu_family == pool.gpu_family)
            room = int(upper[p, t] - nodes[p, t])
            if pool.max_nodes_added_per_hour is not None:
                before = nodes[p, t - 1] if t else pool.current_size
                room = min(room, before + pool.max_nodes_added_per_hour - nodes[p, t])
            if pool.gpu_family in quota_of:
                room = min(room, (quota_of[pool.gpu_family] - family_used) // pool.gpus_per_node)
            added = max(0, min(missing, room))
            if added:
                nodes[p, t] += added
                notes.append(f"pool {pool.name!r} h{t}: +{added} node(s) to fit whole replicas")
            while used > nodes[p, t] * pool.gpus_per_node + _EPS:
                k = max((k for k in on_pool if replicas[k, t] > 0),
                        key=lambda k: models[edges[k][0]].gpus_per_replica)
                replicas[k, t] -= 1
                used -= models[edges[k][0]].gpus_per_replica
                notes.append(f"pool {pool.name!r} h{t}: dropped 1 replica of "
                             f"{models[edges[k][0]].name!r} (no room for whole replicas)")
    return notes


def plan_capacity(
    pools: Sequence[NodePoolSpec],
    models: Sequence[ModelProfile],
    demand: Mapping[str, Sequence[float]],
    quotas: Sequence[GpuQuota] = (),
    options: PlanOptions | None = None,
) -> CapacityPlan:
    """Solve for nodes per pool per hour covering `demand[model][hour]` (hour 0 = now).

    Demand is what to provision for, typically a forecast's upper quantile times headroom
    (`Forecast.plan_demand()`), in the units of the models' `throughput_per_replica`.
    Raises `InvalidPlanInput` for bad input (before any solver work) and `PlanNotFound` only
    if HiGHS stops without any incumbent; a time-limited incumbent is a valid plan
    (`status == "user_limit"`, with its gap).
    """
    import cvxpy as cp

    options = options or PlanOptions()
    validate_plan_inputs(pools, models, demand, quotas, options)
    demand_matrix = np.array([np.asarray(demand[m.name], dtype=float) for m in models])
    started = time.perf_counter()
    model = build_capacity_model(pools, models, demand_matrix, quotas, options)
    model.problem.solve(  # type: ignore[no-untyped-call]  # cvxpy's solve is untyped
        solver=cp.HIGHS, time_limit=float(options.time_limit_s),
        mip_rel_gap=float(options.mip_rel_gap))
    solve_s = time.perf_counter() - started
    nodes_value, replicas_value = model.nodes.value, model.replicas.value
    if not _has_solution(model.problem, model) or nodes_value is None \
            or replicas_value is None:
        raise PlanNotFound(
            f"HiGHS returned {model.problem.status!r} without a plan after {solve_s:.1f} s; "
            f"try a larger `time_limit_s` (was {options.time_limit_s})")

    nodes = np.rint(nodes_value).astype(int)
    if model.integer_replicas:
        replicas = np.rint(np.maximum(replicas_value, 0.0))
        notes = []
    else:
        replicas = round_replicas(replicas_value, model.edges, len(models))
        notes = fit_whole_replicas(nodes, replicas, pools, models, quotas, model.edges,
                                  model.upper)
    replicas = replicas.astype(int)
    return _plan_from_solution(pools, models, demand_matrix, model, nodes, replicas, notes,
                               solve_s)


def _plan_from_solution(pools: Sequence[NodePoolSpec], models: Sequence[ModelProfile],
                        demand: np.ndarray, model: CapacityModel, nodes: np.ndarray,
                        replicas: np.ndarray, notes: list[str], solve_s: float) -> CapacityPlan:
    """Read back whole numbers and recompute shortfalls from them (not from the solver)."""
    served = np.zeros_like(demand)
    replica_total = np.zeros_like(demand)
    by_model: dict[str, dict[str, tuple[int, ...]]] = {m.name: {} for m in models}
    for k, (m, p) in enumerate(model.edges):
        served[m] += replicas[k] * models[m].throughput_per_replica
        replica_total[m] += replicas[k]
        by_model[models[m].name][pools[p].name] = tuple(int(v) for v in replicas[k])
    shortfall = np.maximum(demand - served, 0.0)
    shortfall[shortfall < _EPS * np.maximum(demand, 1.0)] = 0.0
    min_gap = np.maximum(np.array([[m.min_replicas] for m in models]) - replica_total, 0)
    price = np.array([p.price_per_hour for p in pools])
    return CapacityPlan(
        pools=tuple(p.name for p in pools), models=tuple(m.name for m in models),
        hours=demand.shape[1],
        nodes={p.name: tuple(int(v) for v in nodes[i]) for i, p in enumerate(pools)},
        replicas=by_model,
        shortfall={m.name: tuple(float(v) for v in shortfall[i]) for i, m in enumerate(models)},
        min_replica_shortfall={m.name: tuple(int(v) for v in min_gap[i])
                               for i, m in enumerate(models)},
        demand={m.name: tuple(float(v) for v in demand[i]) for i, m in enumerate(models)},
        cost=float(price @ nodes.sum(axis=1)), objective=float(model.problem.value),
        status=str(model.problem.status), gap=_solver_gap(model.problem), solve_s=solve_s,
        integer_replicas=model.integer_replicas, recheck=tuple(notes))
