"""The serving stack `gpuops bench rollout` rolls out on: simcluster's serving model, driven
window by window, read as Prometheus would answer the rollout's queries.

Two InferencePools (the old version, the new) share one model's demand by HTTPRoute weight;
each spreads its share evenly over its Ready replicas, and every replica is advanced by
simcluster's own `step_replica` (queueing, the cold period after Ready, a version's
`Degradation` with its load thresholds, requests drawn one by one from seeded streams), in
ticks of `TICK_S` as simcluster's metrics engine ticks. What a window shows is computed from
the replicas' counters and histograms at its two ends, as the PromQL in
`tasks/rollout/metrics.window_queries` computes it (`increase`, `histogram_quantile`
interpolating inside buckets, `_sum / _count`, `avg_over_time` of the gauges sampled at each
tick as scrapes sample them), and handed to the rollout's own `window_metrics`: the gates then
judge exactly what they would judge from Prometheus. Prometheus' extrapolation at the window
edges is not modelled (the deltas are exact).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuops.simcluster.metrics.serving import (
    FINISH_REASONS,
    Degradation,
    DemandCurve,
    ReplicaProfile,
    ReplicaState,
    RequestStreams,
    serve_request,
    step_replica,
)
from gpuops.tasks.rollout.metrics import (
    Answer,
    SeriesSelector,
    WindowMetrics,
    choose_names,
    window_metrics,
)

TICK_S = 5.0
NAMESPACE = "inference"
# The names a vLLM of today exposes (what `choose_names` picks from a real scrape).
EXPOSED = ("vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket",
           "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
           "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total",
           "vllm:prefix_cache_hits_total")
NAMES = choose_names(EXPOSED)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus' `histogram_quantile` of cumulative `(le, count)` pairs, `+Inf` last: the
    rank's bucket, linearly interpolated (the first bucket from 0; in `+Inf`, the highest
    finite bound); NaN without observations."""
    total = buckets[-1][1]
    if total <= 0:
        return math.nan
    rank = q * total
    previous_le, previous_count = 0.0, 0.0
    for i, (le, count) in enumerate(buckets):
        if count >= rank:
            if math.isinf(le):
                return buckets[i - 1][0] if i else math.nan
            inside = count - previous_count
            return previous_le + (le - previous_le) * (rank - previous_count) / inside \
                if inside > 0 else le
        previous_le, previous_count = le, count
    return math.nan


@dataclass
class Replica:
    name: str
    version: str
    profile: ReplicaProfile
    degradations: tuple[Degradation, ...]
    ready_since: float
    state: ReplicaState
    # what its gauges added up to over the ticks (for avg_over_time), and how many ticks
    waiting_sum: float = 0.0
    kv_sum: float = 0.0
    ticks: int = 0


@dataclass(frozen=True)
class Snapshot:
    """One pool's counters at an instant (summed over the replicas serving then)."""

    t: float
    finished: Mapping[str, float]
    ttft: tuple[tuple[float, float], ...]
    ttft_sum: float
    ttft_count: float
    itl: tuple[tuple[float, float], ...]
    itl_sum: float
    itl_count: float
    prefix_queries: float
    prefix_hits: float
    waiting_sum: float
    kv_sum: float
    ticks: float
    per_replica_finished: Mapping[str, float]


def _hist_sum(pairs: list[list[tuple[str, float]]]) -> tuple[tuple[float, float], ...]:
    if not pairs:
        return ()
    out = []
    for i, (le, _count) in enumerate(pairs[0]):
        out.append((float(le), sum(p[i][1] for p in pairs)))
    return tuple(out)


def _delta_hist(a: tuple[tuple[float, float], ...], b: tuple[tuple[float, float], ...]
                ) -> tuple[tuple[float, float], ...]:
    if not a:
        return b
    return tuple((le, count - before) for (le, count), (_, before) in zip(b, a))


@dataclass
class Pool:
    name: str
    replicas: list[Replica] = field(default_factory=list)
    gone: list[Replica] = field(default_factory=list)  # scaled away: their counts stay

    def snapshot(self, t: float) -> Snapshot:
        members = self.replicas + self.gone
        finished = {r: float(sum(m.state.finished[r] for m in members)) for r in FINISH_REASONS}
        ttft = _hist_sum([m.state.ttft.cumulative() for m in members])
        itl = _hist_sum([m.state.itl.cumulative() for m in members])
        return Snapshot(
            t, finished, ttft, sum(m.state.ttft.total for m in members),
            float(sum(m.state.ttft.count for m in members)), itl,
            sum(m.state.itl.total for m in members), float(sum(m.state.itl.count for m in members)),
            float(sum(m.state.prefix_queries for m in members)),
            float(sum(m.state.prefix_hits for m in members)),
            sum(m.waiting_sum for m in members), sum(m.kv_sum for m in members),
            float(sum(m.ticks for m in members)),
            {m.name: float(sum(m.state.finished.values())) for m in members})


def _instant(value: float) -> Answer:
    return [({}, value)]


def window_answers(start: Snapshot, end: Snapshot) -> dict[str, Answer]:
    """What Prometheus answers to `window_queries` over [start.t, end.t] (pool sums)."""
    answers: dict[str, Answer] = {
        "finished": [({"finished_reason": r}, end.finished[r] - start.finished.get(r, 0.0))
                     for r in FINISH_REASONS]}
    for key, (a, b, s0, s1, c0, c1) in {
            "ttft": (start.ttft, end.ttft, start.ttft_sum, end.ttft_sum, start.ttft_count,
                     end.ttft_count),
            "itl": (start.itl, end.itl, start.itl_sum, end.itl_sum, start.itl_count,
                    end.itl_count)}.items():
        buckets = _delta_hist(a, b)
        for q in ((90, 99) if key == "ttft" else (90,)):
            answers[f"{key}_p{q}"] = _instant(histogram_quantile(q / 100, buckets)) \
                if buckets else []
        count = c1 - c0
        answers[f"{key}_mean"] = _instant((s1 - s0) / count if count > 0 else math.nan)
    ticks = end.ticks - start.ticks
    answers["queue_depth"] = _instant((end.waiting_sum - start.waiting_sum) / ticks) \
        if ticks > 0 else []
    answers["kv_cache_usage"] = _instant((end.kv_sum - start.kv_sum) / ticks) \
        if ticks > 0 else []
    queries = end.prefix_queries - start.prefix_queries
    answers["prefix_cache_hit_ratio"] = _instant(
        (end.prefix_hits - start.prefix_hits) / queries if queries > 0 else math.nan)
    served = sum(1 for name, n in end.per_replica_finished.items()
                 if n - start.per_replica_finished.get(name, 0.0) > 0)
    answers["replicas"] = _instant(float(served)) if served else []
    return answers


class ServingStack:
    """The old and the new pool of one model, its demand and the route's weights."""

    def __init__(self, *, seed: int, demand: DemandCurve, start: float,
                 profile: ReplicaProfile) -> None:
        self.seed = seed
        self.demand = demand
        self.t = start
        self.profile = profile
        self.pools = {"old": Pool("old"), "new": Pool("new"), "baseline": Pool("baseline")}
        self.weight = 0  # the new pool's %
        self.baseline_weight = 0  # a fresh copy of the old version's % (gpuops_fresh_copy)
        self.made: dict[str, int] = {}

    def add(self, pool: str, version: str, n: int, degradations: tuple[Degradation, ...] = (),
            *, warm: bool = False) -> None:
        for _ in range(n):
            ordinal = self.made.get(pool, 0)
            self.made[pool] = ordinal + 1
            name = f"{pool}-{ordinal}"
            self.pools[pool].replicas.append(Replica(
                name, version, self.profile, degradations,
                self.t - (10 * self.profile.warmup.seconds if warm else 0.0),
                ReplicaState(streams=RequestStreams(self.seed, NAMESPACE, version, name))))

    def scale(self, pool: str, n: int) -> None:
        """Down to `n` replicas (the newest go first)."""
        p = self.pools[pool]
        while len(p.replicas) > n:
            p.gone.append(p.replicas.pop())

    def advance(self, seconds: float) -> None:
        end = self.t + seconds
        while self.t < end - 1e-9:
            h = min(TICK_S, end - self.t)
            mid = self.t + h / 2
            rps = self.demand.rps(mid)
            shares = {"old": (100 - self.weight - self.baseline_weight) / 100,
                      "new": self.weight / 100, "baseline": self.baseline_weight / 100}
            for key, pool in self.pools.items():
                if not pool.replicas:
                    continue
                load = rps * shares[key] / len(pool.replicas)
                for r in pool.replicas:
                    step_replica(r.state, r.profile, load, h, r.degradations,
                                 mid - r.ready_since)
                    r.waiting_sum += r.state.waiting
                    r.kv_sum += r.state.kv_cache_usage
                    r.ticks += 1
            self.t += h

    def warm_up_batch(self, replica: Replica, requests: int) -> tuple[int, float | None]:
        """Synthetic requests to one replica (the flow's warm-up): (failed, mean TTFT)."""
        state = replica.state
        total, count = state.ttft.total, state.ttft.count
        failed = sum(serve_request(state, replica.profile, replica.degradations,
                                   self.t - replica.ready_since) == "error"
                     for _ in range(requests))
        n = state.ttft.count - count
        return failed, ((state.ttft.total - total) / n if n else None)

    def snapshot(self) -> dict[str, Snapshot]:
        return {key: pool.snapshot(self.t) for key, pool in self.pools.items()}

    def window(self, pool: str, start: Snapshot, end: Snapshot) -> WindowMetrics:
        selector = SeriesSelector.of_pods(NAMESPACE, [r.name for r in self.pools[pool].replicas]
                                          or [f"{pool}-none"])
        return window_metrics(selector, _dt(start.t), _dt(end.t), NAMES,
                              window_answers(start, end))

    def requests(self, start: dict[str, Snapshot], end: dict[str, Snapshot]) -> dict[str, float]:
        return {key: sum(end[key].finished.values()) - sum(start[key].finished.values())
                for key in self.pools}


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)
