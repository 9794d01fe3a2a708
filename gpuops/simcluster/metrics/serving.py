"""The request-rate model behind simcluster's vLLM metrics: demand, traffic split, queueing.

Pure functions and plain data, no store and no clock: the numbers that a rollout analysis or a
capacity plan later reads from Prometheus follow from a few stated rules, which the unit tests
check directly.

- Demand per model is a diurnal curve of virtual time (requests/s), times any active spike.
- HTTPRoute rules split a model's demand between InferencePools by backendRef weight; a model
  nobody routes goes evenly to the pools that serve it. Each pool spreads its share evenly over
  its Ready replicas (what an endpoint picker does for equally loaded replicas).
- A replica serves up to `capacity_rps`; beyond that a backlog builds (`num_requests_waiting`)
  and clients give up after `max_queue_s` of backlog (`finished_reason="abort"`). TTFT rises
  M/M/1-like with utilisation rho (base / (1 - rho), rho capped at 0.95) plus the backlog's
  wait; inter-token latency rises gently with the batch size.
- Counters and histograms advance by whole requests: fractional parts carry to the next step,
  so `rate()` over them converges to the modelled rates and every histogram stays consistent
  (cumulative buckets, `_count` equal to the `+Inf` bucket, `_sum`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

PoolKey = tuple[str, str]  # (namespace, name) of an InferencePool

DEFAULT_CAPACITY_RPS = 5.0
MAX_RHO_FOR_LATENCY = 0.95  # TTFT's 1/(1-rho) is capped here: 20x the base at most

# Buckets as vLLM's PrometheusStatLogger declares them (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

# vLLM's FinishReason values (vllm/v1/engine): every one is exposed, at 0 until it happens.
# "error" is a request that failed inside the engine (answered with 500).
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
LENGTH_SHARE = 0.12  # of good requests, those that hit max_tokens

# A request's latency spread around the interval's mean: (multiplier, share), mean 1.0.
# Deterministic points instead of sampling: quantiles stay stable from scrape to scrape.
LATENCY_SPREAD = ((0.55, 0.20), (0.8, 0.30), (1.05, 0.30), (1.5, 0.15), (2.2, 0.05))


# --- demand ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DemandCurve:
    """Requests/s of one model over a day: `base_rps` at night, `peak_rps` at `peak_hour_utc`."""

    base_rps: float = 2.0
    peak_rps: float = 6.0
    peak_hour_utc: float = 15.0
    weekend_factor: float = 1.0

    _FIELDS: ClassVar[dict[str, str]] = {
        "baseRps": "base_rps", "peakRps": "peak_rps", "peakHourUtc": "peak_hour_utc",
        "weekendFactor": "weekend_factor"}

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], where: str,
                    default: DemandCurve | None = None) -> DemandCurve:
        if not isinstance(raw, Mapping):
            raise TypeError(f"{where} must be a mapping of {', '.join(cls._FIELDS)}")
        unknown = sorted(set(raw) - set(cls._FIELDS))
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(cls._FIELDS)}")
        base = default or cls()
        values = {attr: getattr(base, attr) for attr in cls._FIELDS.values()}
        for key, attr in cls._FIELDS.items():
            if key in raw:
                value = raw[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ValueError(f"{where}.{key} must be a number >= 0, got {value!r}")
                values[attr] = float(value)
        if "peakRps" not in raw and values["peak_rps"] < values["base_rps"]:
            values["peak_rps"] = values["base_rps"]
        return cls(**values)

    def rps(self, t: float) -> float:
        hour = (t % 86400.0) / 3600.0
        level = self.base_rps + (self.peak_rps - self.base_rps) * (
            1.0 + math.cos(2.0 * math.pi * (hour - self.peak_hour_utc) / 24.0)) / 2.0
        if self.weekend_factor != 1.0 and datetime.fromtimestamp(t, UTC).weekday() >= 5:
            level *= self.weekend_factor
        return level


@dataclass(frozen=True)
class DemandModel:
    """Every model's curve; models not named use the default ("*") curve."""

    curves: Mapping[str, DemandCurve] = field(default_factory=dict)
    default: DemandCurve = DemandCurve()

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None, where: str = "demand") -> DemandModel:
        """`{"<model>": {"baseRps": 4, "peakRps": 12, "peakHourUtc": 15}, "*": {...}}`."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise TypeError(f"{where} must be a mapping of model name to demand curve")
        default = DemandCurve.from_config(raw["*"], f"{where}.*") if "*" in raw else DemandCurve()
        curves = {str(model): DemandCurve.from_config(spec, f"{where}.{model}", default)
                  for model, spec in raw.items() if model != "*"}
        return cls(curves, default)

    def rps(self, model: str, t: float) -> float:
        return self.curves.get(model, self.default).rps(t)


@dataclass(frozen=True)
class Spike:
    """A demand multiplier for one model (None: every model) during [start, end)."""

    model: str | None
    factor: float
    start: float
    end: float

    def applies(self, model: str, t: float) -> bool:
        return self.start <= t < self.end and self.model in (None, model)


def model_demand(demand: DemandModel, models: Sequence[str], t: float,
                 spikes: Sequence[Spike] = ()) -> dict[str, float]:
    result = {}
    for model in models:
        rps = demand.rps(model, t)
        for spike in spikes:
            if spike.applies(model, t):
                rps *= spike.factor
        result[model] = rps
    return result


# --- traffic split -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Backend:
    pool: PoolKey
    weight: int = 1


@dataclass(frozen=True)
class RouteRule:
    """One HTTPRoute rule's InferencePool backendRefs; `model` when the route names its model."""

    backends: tuple[Backend, ...]
    model: str | None = None


def rule_model(rule: RouteRule, pool_models: Mapping[PoolKey, str]) -> str | None:
    if rule.model:
        return rule.model
    for backend in rule.backends:
        if backend.pool in pool_models:
            return pool_models[backend.pool]
    return None


def split_demand(demand: Mapping[str, float], rules: Sequence[RouteRule],
                 pool_models: Mapping[PoolKey, str]) -> dict[PoolKey, float]:
    """Requests/s per InferencePool.

    A model's demand is shared evenly by the route rules that carry it, then by weight between
    a rule's backends. A backend naming a missing pool keeps its share: the gateway answers
    those requests with errors, they reach no replica. A model without any route goes evenly
    to the pools that serve it; a pool that no route names gets nothing when its model is routed.
    """
    by_model: dict[str, list[RouteRule]] = {}
    for rule in rules:
        model = rule_model(rule, pool_models)
        if model is not None:
            by_model.setdefault(model, []).append(rule)
    unrouted: dict[str, list[PoolKey]] = {}
    for pool, model in pool_models.items():
        if model not in by_model:
            unrouted.setdefault(model, []).append(pool)
    result: dict[PoolKey, float] = {}
    for model, rps in demand.items():
        if rps <= 0:
            continue
        if model in by_model:
            share = rps / len(by_model[model])
            for rule in by_model[model]:
                total = sum(max(0, b.weight) for b in rule.backends)
                if total <= 0:
                    continue
                for b in rule.backends:
                    if b.weight > 0:
                        result[b.pool] = result.get(b.pool, 0.0) + share * b.weight / total
        elif model in unrouted:
            pools = unrouted[model]
            for pool in pools:
                result[pool] = result.get(pool, 0.0) + rps / len(pools)
    return result


# --- one replica -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplicaProfile:
    """What one vLLM replica can do (from its pod's annotations)."""

    capacity_rps: float = DEFAULT_CAPACITY_RPS
    ttft_base_s: float = 0.12
    itl_base_s: float = 0.025
    prompt_tokens: float = 800.0
    output_tokens: float = 180.0
    prefix_hit_rate: float = 0.35
    max_queue_s: float = 120.0  # clients give up on a backlog longer than this
    max_num_seqs: int = 256


@dataclass(frozen=True)
class Degradation:
    """A bad version: latencies multiplied, a share of requests failing."""

    ttft_factor: float = 1.0
    itl_factor: float = 1.0
    error_rate: float = 0.0

    def combine(self, other: Degradation) -> Degradation:
        return Degradation(self.ttft_factor * other.ttft_factor,
                           self.itl_factor * other.itl_factor,
                           1.0 - (1.0 - self.error_rate) * (1.0 - other.error_rate))


NO_DEGRADATION = Degradation()


@dataclass
class Histogram:
    """Per-bucket counts (the last is +Inf), a sum and a count: a Prometheus histogram."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0
    _carry: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)
        self._carry = self._carry or [0.0] * len(LATENCY_SPREAD)

    def observe_spread(self, amount: float, mean: float) -> None:
        """Record `amount` observations (fractions carry over) spread around `mean`."""
        if amount <= 0:
            return
        for i, (multiplier, share) in enumerate(LATENCY_SPREAD):
            self._carry[i] += amount * share
            whole = int(self._carry[i])
            if whole:
                self._carry[i] -= whole
                value = mean * multiplier
                self.counts[bisect.bisect_left(self.bounds, value)] += whole
                self.total += whole * value
                self.count += whole

    def cumulative(self) -> list[tuple[str, float]]:
        """`(le, cumulative count)` pairs, `+Inf` last, as the exposition wants them."""
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append((_le(bound), float(running)))
        out.append(("+Inf", float(self.count)))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


@dataclass
class ReplicaState:
    """One vLLM process's gauges and monotonic accumulators (reset when it restarts)."""

    backlog: float = 0.0
    load_rps: float = 0.0
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    gpu_util: float = 0.0
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    _carry: dict[str, float] = field(default_factory=dict)

    def take(self, key: str, amount: float) -> int:
        """The whole part of `amount` plus what earlier steps left over under `key`."""
        carried = self._carry.get(key, 0.0) + max(0.0, amount)
        whole = int(carried)
        self._carry[key] = carried - whole
        return whole


@dataclass(frozen=True)
class Latency:
    ttft_s: float
    itl_s: float
    e2e_s: float


def latency_at(profile: ReplicaProfile, rho: float, queue_wait_s: float,
               degradation: Degradation = NO_DEGRADATION) -> Latency:
    """Mean latencies of requests served at utilisation `rho` after `queue_wait_s` in the queue."""
    capped = min(max(rho, 0.0), MAX_RHO_FOR_LATENCY)
    ttft = profile.ttft_base_s / (1.0 - capped) * degradation.ttft_factor + queue_wait_s
    itl = profile.itl_base_s / (1.0 - 0.6 * capped) * degradation.itl_factor
    e2e = ttft + itl * max(0.0, profile.output_tokens - 1.0)
    return Latency(ttft, itl, e2e)


def step_replica(state: ReplicaState, profile: ReplicaProfile, load_rps: float, dt: float,
                 degradation: Degradation = NO_DEGRADATION) -> None:
    """Advance one replica by `dt` seconds at a constant offered load (a fluid queue)."""
    if dt <= 0:
        return
    mu = max(profile.capacity_rps, 1e-9)
    backlog_before = state.backlog
    offered = state.backlog + load_rps * dt
    served = min(offered, mu * dt)
    backlog = offered - served
    abandoned = max(0.0, backlog - mu * profile.max_queue_s)
    state.backlog = backlog - abandoned
    rho = load_rps / mu
    served_rps = served / dt
    busy = max(rho, served_rps / mu)  # draining a backlog keeps the replica busy
    queue_wait = (backlog_before + state.backlog) / 2.0 / mu
    lat = latency_at(profile, busy, queue_wait, degradation)

    errors = served * degradation.error_rate
    good = served - errors
    state.finished["error"] += state.take("error", errors)
    state.finished["length"] += state.take("length", good * LENGTH_SHARE)
    state.finished["stop"] += state.take("stop", good * (1.0 - LENGTH_SHARE))
    state.finished["abort"] += state.take("abort", abandoned)

    prompt = state.take("prompt", served * profile.prompt_tokens)
    state.prompt_tokens += prompt
    state.prefix_queries += prompt
    hit_rate = profile.prefix_hit_rate * (1.0 - 0.5 * min(1.0, rho))  # eviction under pressure
    state.prefix_hits += state.take("prefix_hits", prompt * hit_rate)
    generated_per_request = profile.output_tokens
    state.generation_tokens += state.take("generation", good * generated_per_request)

    state.ttft.observe_spread(served, lat.ttft_s)
    state.e2e.observe_spread(served, lat.e2e_s)
    state.itl.observe_spread(served * max(0.0, generated_per_request - 1.0), lat.itl_s)

    state.load_rps = load_rps
    # Little's law: requests in the batch = throughput x time in service
    state.running = round(min(profile.max_num_seqs, served_rps * (lat.e2e_s - queue_wait)))
    state.waiting = round(state.backlog + capped_lq(rho))
    busy = min(1.0, busy)
    state.kv_cache_usage = 0.0 if served <= 0 else min(
        1.0, 0.02 + 0.93 * busy + (0.05 if state.backlog >= 1 else 0.0))
    state.gpu_util = 0.0 if served <= 0 else min(100.0, 100.0 * (0.05 + 0.95 * busy))


def capped_lq(rho: float) -> float:
    """M/M/1 mean queue length rho^2/(1-rho) below saturation (0 at or above it: see backlog)."""
    if rho <= 0 or rho >= 1:
        return 0.0
    capped = min(rho, MAX_RHO_FOR_LATENCY)
    return capped * capped / (1.0 - capped)
