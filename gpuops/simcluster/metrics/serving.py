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
  wait; inter-token latency rises gently with the batch size; fewer prefix-cache hits leave
  more prefill.
- A version (`Degradation`) multiplies TTFT and ITL, fails a share of requests and scales the
  prefix-cache hit ratio, optionally only above a load per replica; a replica is cold for a
  while after Ready (`Warmup`).
- Requests are whole: fractional parts carry to the next step, so `rate()` converges to the
  modelled rates. Each request is drawn on its own from the replica's seeded streams (fails or
  not, its lengths, its latencies around the step's means), so a window of few requests gives
  noisy, unbiased figures as in reality, and every histogram stays consistent (cumulative
  buckets, `_count` equal to the `+Inf` bucket, `_sum`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import numpy as np

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
class Warmup:
    """The cold period after Ready.

    A vLLM that just passed its readiness probe has its weights loaded and its CUDA graphs
    captured, but its prefix cache is empty and kernels for shapes it has not seen yet compile
    on first use: its first requests are slower. Coldness is 1 at Ready and falls to 0
    `seconds` later, quadratically (fast at first, like a cache filling up); TTFT and
    inter-token latency are multiplied by `1 + (factor - 1) * coldness`, the prefix-cache hit
    ratio by `1 - coldness`.
    """

    seconds: float = 90.0
    ttft_factor: float = 2.5
    itl_factor: float = 1.2

    def coldness(self, age_s: float | None) -> float:
        """0 (warm) .. 1 (just Ready); None: the replica's Ready time is unknown, it is warm."""
        if age_s is None or self.seconds <= 0 or age_s >= self.seconds:
            return 0.0
        return (1.0 - max(0.0, age_s) / self.seconds) ** 2


@dataclass(frozen=True)
class ReplicaProfile:
    """What one vLLM replica can do (from its pod's annotations and vLLM arguments)."""

    capacity_rps: float = DEFAULT_CAPACITY_RPS
    ttft_base_s: float = 0.12
    itl_base_s: float = 0.025
    prompt_tokens: float = 800.0
    output_tokens: float = 180.0
    prefix_hit_rate: float = 0.35  # of prompt tokens, on an idle warm replica
    max_queue_s: float = 120.0  # clients give up on a backlog longer than this
    max_num_seqs: int = 256
    prefix_caching: bool = True  # vLLM v1's default; `--no-enable-prefix-caching` turns it off
    warmup: Warmup = Warmup()


@dataclass(frozen=True)
class Degradation:
    """A bad version: latencies multiplied, a share of requests failing, fewer prefix-cache hits.

    It applies only while the replica's offered load is at or above `min_rps` (requests/s per
    replica) and `min_utilisation` (offered load / capacity): a version can be bad only under
    load, the way a batching regression is.
    """

    ttft_factor: float = 1.0
    itl_factor: float = 1.0
    error_rate: float = 0.0
    prefix_hit_factor: float = 1.0
    min_rps: float = 0.0
    min_utilisation: float = 0.0

    def applies(self, load_rps: float, rho: float) -> bool:
        return load_rps >= self.min_rps and rho >= self.min_utilisation

    def combine(self, other: Degradation) -> Degradation:
        """Both at once (the result has no load thresholds: call it on those that apply)."""
        return Degradation(self.ttft_factor * other.ttft_factor,
                           self.itl_factor * other.itl_factor,
                           1.0 - (1.0 - self.error_rate) * (1.0 - other.error_rate),
                           self.prefix_hit_factor * other.prefix_hit_factor)


NO_DEGRADATION = Degradation()


def active_degradation(degradations: Sequence[Degradation], load_rps: float,
                       rho: float) -> Degradation:
    """What the degradations that apply at this load amount to together."""
    result = NO_DEGRADATION
    for degradation in degradations:
        if degradation.applies(load_rps, rho):
            result = result.combine(degradation)
    return result


# A request's own variation around the step's means: lognormal with mean 1 (so sampling is
# unbiased), these sigmas. TTFT also waits in the queue as an M/M/1 customer does.
TTFT_SIGMA = 0.3
ITL_SIGMA = 0.25
PROMPT_SIGMA = 0.5
OUTPUT_SIGMA = 0.6
ITL_PARTS = 4  # a request's tokens after the first are observed in this many parts
SHARED_PREFIX = 0.6  # a request that reuses a cached prefix finds this share of its prompt
DRAWS_U = 5  # uniforms per request: error, length, prefix reuse, queued?, queue wait
DRAWS_Z = 3 + ITL_PARTS  # normals per request: prompt, output, service time, ITL parts


class RequestStreams:
    """One replica's random numbers: a fixed number per request from two streams, so request
    number k gets the same draws however the steps serving it are cut (a scrape or a tick
    landing elsewhere changes no request's fate) and a key (the cluster's seed, the pod) gives
    the same requests on every run."""

    def __init__(self, *key: object) -> None:
        digest = hashlib.sha256(repr(key).encode()).digest()
        uniform, normal = np.random.SeedSequence(int.from_bytes(digest[:16], "big")).spawn(2)
        self.uniform = np.random.Generator(np.random.PCG64(uniform))
        self.normal = np.random.Generator(np.random.PCG64(normal))

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.uniform.random((n, DRAWS_U)), self.normal.standard_normal((n, DRAWS_Z))


def _lognormal(z: np.ndarray, sigma: float) -> np.ndarray:
    return np.exp(sigma * z - sigma * sigma / 2.0)


@dataclass
class Histogram:
    """Per-bucket counts (the last is +Inf), a sum and a count: a Prometheus histogram."""

    bounds: tuple[float, ...]
    counts: np.ndarray = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)
        self._bounds = np.asarray(self.bounds, dtype=float)

    def observe(self, values: np.ndarray, times: np.ndarray | None = None) -> None:
        """Record each value (`times[i]` observations of `values[i]`) in the bucket whose `le`
        is the first at or above it."""
        values = np.asarray(values, dtype=float).ravel()
        if values.size == 0:
            return
        index = np.searchsorted(self._bounds, values, side="left")
        if times is None:
            self.counts += np.bincount(index, minlength=self.counts.size)
            self.total += float(values.sum())
            self.count += values.size
            return
        weights = np.asarray(times, dtype=np.int64).ravel()
        self.counts += np.bincount(index, weights=weights,
                                   minlength=self.counts.size).astype(np.int64)
        self.total += float(values @ weights)
        self.count += int(weights.sum())

    def cumulative(self) -> list[tuple[str, float]]:
        """`(le, cumulative count)` pairs, `+Inf` last, as the exposition wants them."""
        running = np.cumsum(self.counts[:-1])
        out = [(_le(bound), float(n)) for bound, n in zip(self.bounds, running)]
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
    streams: RequestStreams = field(default_factory=RequestStreams)
    _carry: dict[str, float] = field(default_factory=dict)

    def take(self, key: str, amount: float) -> int:
        """The whole part of `amount` plus what earlier steps left over under `key`."""
        carried = self._carry.get(key, 0.0) + max(0.0, amount)
        whole = int(carried)
        self._carry[key] = carried - whole
        return whole


@dataclass(frozen=True)
class Service:
    """What a step's requests are served under: the means their samples vary around."""

    ttft_service_s: float  # prefill and first token, before any queueing
    rho: float  # utilisation the M/M/1 wait follows (capped)
    queue_wait_s: float  # the backlog's wait, when the replica is saturated
    itl_s: float
    hit_ratio: float  # prefix-cache hits / queried prompt tokens

    @property
    def ttft_s(self) -> float:
        return self.ttft_service_s / (1.0 - self.rho) + self.queue_wait_s


@dataclass(frozen=True)
class Latency:
    ttft_s: float
    itl_s: float
    e2e_s: float


def _prefill_share(hit_ratio: float) -> float:
    """Prefill work left at this hit ratio, relative to none cached (TTFT is not all prefill)."""
    return 0.3 + 0.7 * (1.0 - hit_ratio)


def service_at(profile: ReplicaProfile, rho: float, queue_wait_s: float,
               degradation: Degradation = NO_DEGRADATION, coldness: float = 0.0) -> Service:
    """The mean service of requests at utilisation `rho` after `queue_wait_s` in the queue.

    TTFT rises M/M/1-like, `base / (1 - rho)`, ITL gently with the batch. The prefix cache
    hits `prefix_hit_rate` of the prompt, half as much at full load (eviction); fewer hits
    (a bad version, a cold cache, caching turned off) leave more prefill and a longer TTFT,
    relative to the hits a warm good version gets at that load.
    """
    capped = min(max(rho, 0.0), MAX_RHO_FOR_LATENCY)
    nominal = profile.prefix_hit_rate * (1.0 - 0.5 * min(1.0, max(rho, 0.0)))
    hits = 0.0 if not profile.prefix_caching else min(
        1.0, nominal * degradation.prefix_hit_factor * (1.0 - coldness))
    warmup = profile.warmup
    ttft = (profile.ttft_base_s * degradation.ttft_factor
            * (1.0 + (warmup.ttft_factor - 1.0) * coldness)
            * _prefill_share(hits) / _prefill_share(nominal))
    itl = (profile.itl_base_s / (1.0 - 0.6 * capped) * degradation.itl_factor
           * (1.0 + (warmup.itl_factor - 1.0) * coldness))
    return Service(ttft, capped, queue_wait_s, itl, hits)


def latency_at(profile: ReplicaProfile, rho: float, queue_wait_s: float,
               degradation: Degradation = NO_DEGRADATION, coldness: float = 0.0) -> Latency:
    """Mean latencies of requests served at utilisation `rho` after `queue_wait_s` queued."""
    service = service_at(profile, rho, queue_wait_s, degradation, coldness)
    ttft = service.ttft_s
    return Latency(ttft, service.itl_s,
                   ttft + service.itl_s * max(0.0, profile.output_tokens - 1.0))


def serve_requests(state: ReplicaState, profile: ReplicaProfile, n: int, service: Service,
                   error_rate: float) -> None:
    """Serve `n` requests, each drawn on its own: its prompt and output length, whether it
    fails (`error_rate`) or stops at max_tokens, its prefix-cache hits, its TTFT (service time,
    plus with probability rho an exponential M/M/1 wait) and its tokens' inter-token latency.
    Every draw has the service's mean, so a window's figures are unbiased and noisy as few
    requests make them."""
    if n <= 0:
        return
    u, z = state.streams.draw(n)
    prompt = np.maximum(1.0, np.rint(profile.prompt_tokens * _lognormal(z[:, 0], PROMPT_SIGMA)))
    output = np.maximum(1.0, np.rint(profile.output_tokens * _lognormal(z[:, 1], OUTPUT_SIGMA)))
    error = u[:, 0] < error_rate
    length = ~error & (u[:, 1] < LENGTH_SHARE)
    state.finished["error"] += int(error.sum())
    state.finished["length"] += int(length.sum())
    state.finished["stop"] += int(n - error.sum() - length.sum())

    state.prompt_tokens += int(prompt.sum())
    if profile.prefix_caching:  # vLLM counts queries only with the cache on
        share = max(SHARED_PREFIX, service.hit_ratio)  # reuse with probability hit / share
        reused = u[:, 2] < (service.hit_ratio / share if share > 0 else 0.0)
        state.prefix_queries += int(prompt.sum())
        state.prefix_hits += int(np.floor(prompt * share)[reused].sum())

    rho = service.rho
    waited = u[:, 3] < rho
    wait = np.where(waited, -np.log1p(-u[:, 4]) * service.ttft_service_s / (1.0 - rho), 0.0)
    ttft = service.ttft_service_s * _lognormal(z[:, 2], TTFT_SIGMA) + wait \
        + service.queue_wait_s
    after_first = np.where(error, 0.0, output - 1.0)  # a failed request ends at its first token
    parts = np.floor_divide(after_first[:, None] + np.arange(ITL_PARTS)[::-1], ITL_PARTS)
    itl = service.itl_s * _lognormal(z[:, 3:], ITL_SIGMA)
    state.generation_tokens += int((after_first + 1.0).sum())
    state.ttft.observe(ttft)
    state.itl.observe(itl, parts)
    state.e2e.observe(ttft + (itl * parts).sum(axis=1))


def step_replica(state: ReplicaState, profile: ReplicaProfile, load_rps: float, dt: float,
                 degradations: Sequence[Degradation] = (), age_s: float | None = None) -> None:
    """Advance one replica by `dt` seconds at a constant offered load (a fluid queue), its
    requests served `age_s` after it became Ready (None: long ago)."""
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
    degradation = active_degradation(degradations, load_rps, rho)
    service = service_at(profile, busy, queue_wait, degradation,
                         profile.warmup.coldness(age_s))

    serve_requests(state, profile, state.take("served", served), service,
                   degradation.error_rate)
    state.finished["abort"] += state.take("abort", abandoned)

    state.load_rps = load_rps
    e2e = service.ttft_s + service.itl_s * max(0.0, profile.output_tokens - 1.0)
    # Little's law: requests in the batch = throughput x time in service
    state.running = round(min(profile.max_num_seqs, served_rps * (e2e - queue_wait)))
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


def serve_request(state: ReplicaState, profile: ReplicaProfile,
                  degradations: Sequence[Degradation] = (), age_s: float | None = None) -> str:
    """One request arriving now (a warm-up request sent to this replica, say), served at the
    replica's current load, backlog and coldness; its finish reason."""
    mu = max(profile.capacity_rps, 1e-9)
    rho = state.load_rps / mu
    degradation = active_degradation(degradations, state.load_rps, rho)
    service = service_at(profile, rho, state.backlog / mu, degradation,
                         profile.warmup.coldness(age_s))
    before = dict(state.finished)
    serve_requests(state, profile, 1, service, degradation.error_rate)
    return next(r for r in FINISH_REASONS if state.finished[r] > before[r])
