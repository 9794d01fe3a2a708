"""vLLM figures of one InferencePool over one analysis window: names, PromQL, results (pure).

Names. vLLM renamed metrics between versions, and a rollout is often exactly the upgrade
across a rename, so the old and the new pool are each read with the names *their* pods
expose (`choose_names`), newest first:

    KV-cache usage       vllm:kv_cache_usage_perc        was vllm:gpu_cache_usage_perc
    inter-token latency  vllm:inter_token_latency_seconds was vllm:time_per_output_token_seconds
    prefix cache         vllm:prefix_cache_{queries,hits}_total
                         was vllm:gpu_prefix_cache_{queries,hits}_total, and before the V1
                         engine a gauge, vllm:gpu_prefix_cache_hit_rate

Series. A pool's series are its pods' (`namespace`, `pod`: what a PodMonitor or the
Kubernetes service discovery adds), or those carrying a pool label where the stack's
relabelling adds one (simcluster's `inference_pool`). Everything is summed over pods before
the maths, so the figures are the pool's, however many replicas it has.

Figures, over the window [start, end] (instant queries at `end` over `[end - start]`):
requests finished (all `finished_reason`s), the error ratio (`error`, a failure inside the
engine, plus `abort`: vLLM before the `error` reason reported failures as aborts, and a client
that gives up is a failure too), the replicas that finished requests in the window (their
per-replica request rate says whether two pools' latencies are comparable: `gates`), TTFT
p90/p99 and ITL p90 (`histogram_quantile` interpolates
linearly inside a bucket) with the `_sum/_count` means beside them (vLLM's buckets are coarse:
a 1.3x TTFT regression at 20 req/s moved the mean by 1.3x and p90, p99 not at all), requests
waiting per replica, KV-cache usage per replica, the prefix-cache hit ratio.

A figure whose series are absent, or that has no samples in the window, is `None` with the
reason in `missing`: the gates fail on it (never pass for want of data).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from gpuops.tasks.rollout.objects import PoolView

Answer = Sequence[tuple[Mapping[str, str], float]]  # an instant vector: (labels, value)

REQUESTS = "vllm:request_success_total"
TTFT = ("vllm:time_to_first_token_seconds",)
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
WAITING = ("vllm:num_requests_waiting",)
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_COUNTERS = (("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
                   ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"))
PREFIX_GAUGE = "vllm:gpu_prefix_cache_hit_rate"  # vLLM V0
FAILED_REASONS = frozenset({"error", "abort"})


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    unit: Literal["s", "ratio", "requests", "count"]
    higher_is_better: bool = False
    # How the value moves for any one version as a replica's load rises: up (queueing,
    # batching, a fuller KV cache; more requests sharing prefixes), or None: not with load.
    # Such figures compare between pools only at similar loads per replica, or where the
    # load difference cannot explain the outcome (`gates`).
    load_raises: bool | None = None

    @property
    def load_dependent(self) -> bool:
        return self.load_raises is not None

    @property
    def load_worsens(self) -> bool:
        """More load makes this figure worse (latency, queue, KV-cache usage), not better
        (prefix-cache hits)."""
        return self.load_raises is not None and self.load_raises != self.higher_is_better


FIGURES: dict[str, Figure] = {f.key: f for f in (
    Figure("requests", "requests finished", "requests", higher_is_better=True),
    Figure("error_ratio", "error ratio", "ratio"),
    Figure("ttft_p90", "TTFT p90", "s", load_raises=True),
    Figure("ttft_p99", "TTFT p99", "s", load_raises=True),
    Figure("ttft_mean", "TTFT mean", "s", load_raises=True),
    Figure("itl_p90", "inter-token latency p90", "s", load_raises=True),
    Figure("itl_mean", "inter-token latency mean", "s", load_raises=True),
    Figure("queue_depth", "requests waiting per replica", "count", load_raises=True),
    Figure("kv_cache_usage", "KV-cache usage", "ratio", load_raises=True),
    Figure("prefix_cache_hit_ratio", "prefix-cache hit ratio", "ratio", higher_is_better=True,
           load_raises=True),
)}


# --- names ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MetricNames:
    """The names one pool's pods expose; None: none of the known names."""

    requests: str | None = None
    ttft: str | None = None  # histogram base names (`_bucket`, `_sum`, `_count` exist)
    itl: str | None = None
    waiting: str | None = None
    kv_cache: str | None = None
    prefix_counters: tuple[str, str] | None = None  # (queries, hits)
    prefix_gauge: str | None = None


def candidate_names() -> tuple[str, ...]:
    """Every series name `choose_names` may pick (for the discovery query)."""
    hist = [f"{n}_bucket" for n in TTFT + ITL]
    prefix = [n for pair in PREFIX_COUNTERS for n in pair]
    return (REQUESTS, *hist, *WAITING, *KV_CACHE, *prefix, PREFIX_GAUGE)


def choose_names(present: Iterable[str]) -> MetricNames:
    names = set(present)

    def first(options: Sequence[str], suffix: str = "") -> str | None:
        return next((n for n in options if n + suffix in names), None)

    return MetricNames(
        requests=REQUESTS if REQUESTS in names else None,
        ttft=first(TTFT, "_bucket"), itl=first(ITL, "_bucket"), waiting=first(WAITING),
        kv_cache=first(KV_CACHE),
        prefix_counters=next((p for p in PREFIX_COUNTERS if set(p) <= names), None),
        prefix_gauge=PREFIX_GAUGE if PREFIX_GAUGE in names else None)


# --- series --------------------------------------------------------------------------------------

def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _regex_literal(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "\\" + c for c in text)


@dataclass(frozen=True)
class SeriesSelector:
    """Which series are one pool's: its pods, or a pool label the scrape config adds."""

    namespace: str
    pods: tuple[str, ...] = ()
    label: tuple[str, str] | None = None  # (label name, value), e.g. ("inference_pool", "v2")

    @classmethod
    def of_pods(cls, namespace: str, pods: Iterable[str]) -> SeriesSelector:
        return cls(namespace, tuple(sorted(set(pods))))

    @property
    def empty(self) -> bool:
        """Selects nothing (a pool without pods): an empty regex would select every series
        *without* a pod label, so no query is made at all."""
        return self.label is None and not self.pods

    def matchers(self) -> str:
        if self.empty:
            raise ValueError("an empty SeriesSelector has no matchers")
        parts = [f"namespace={_quote(self.namespace)}"]
        if self.label is not None:
            parts.append(f"{self.label[0]}={_quote(self.label[1])}")
        if self.pods:
            parts.append(f"pod=~{_quote('|'.join(map(_regex_literal, self.pods)))}")
        return ",".join(parts)

    def __str__(self) -> str:
        if self.label is not None:
            return f"{self.namespace} {self.label[0]}={self.label[1]}"
        return f"{self.namespace} pods {', '.join(self.pods) or 'none'}"


def pool_series(view: PoolView, label: str | None = None) -> SeriesSelector:
    """The series of a pool's pods (every member, Ready or not: one that served earlier in the
    window still counts), or of a pool label `label` when the scrape config adds one. Read the
    pods when the window ends: a pod gone before then is missed."""
    if label is not None:
        return SeriesSelector(view.pool.namespace, label=(label, view.pool.name))
    return SeriesSelector.of_pods(view.pool.namespace, (p.name for p in view.pods))


def names_query(selector: SeriesSelector) -> str:
    """One series per candidate name the pool's pods expose (evaluate it at the window end)."""
    alternatives = "|".join(_regex_literal(n) for n in candidate_names())
    return f'group by (__name__) ({{__name__=~{_quote(alternatives)},{selector.matchers()}}})'


# --- queries -------------------------------------------------------------------------------------

def promql_duration(window: timedelta) -> str:
    ms = int(window.total_seconds() * 1000)
    if ms <= 0:
        raise ValueError(f"an analysis window must be longer than 0 s, got {window}")
    return f"{ms}ms"


def window_queries(selector: SeriesSelector, names: MetricNames, window: timedelta
                   ) -> dict[str, str]:
    """PromQL per answer `window_metrics` reads; a name the pods lack has no query."""
    sel, w = selector.matchers(), promql_duration(window)

    def increase(name: str, extra: str = "") -> str:
        return f"increase({name}{{{sel}{extra}}}[{w}])"

    def mean_per_replica(name: str) -> str:
        return f"avg(avg_over_time({name}{{{sel}}}[{w}]))"

    queries: dict[str, str] = {}
    if names.requests:
        queries["finished"] = f"sum by (finished_reason) ({increase(names.requests)})"
        queries["replicas"] = f"count(sum by (pod) ({increase(names.requests)}) > 0)"
    for key, base in (("ttft", names.ttft), ("itl", names.itl)):
        if base:
            buckets = f"sum by (le) ({increase(base + '_bucket')})"
            for q in ((90, 99) if key == "ttft" else (90,)):
                queries[f"{key}_p{q}"] = f"histogram_quantile({q / 100}, {buckets})"
            queries[f"{key}_mean"] = (f"sum({increase(base + '_sum')}) / "
                                      f"sum({increase(base + '_count')})")
    if names.waiting:
        queries["queue_depth"] = mean_per_replica(names.waiting)
    if names.kv_cache:
        queries["kv_cache_usage"] = mean_per_replica(names.kv_cache)
    if names.prefix_counters:
        queries_name, hits_name = names.prefix_counters
        queries["prefix_cache_hit_ratio"] = (f"sum({increase(hits_name)}) / "
                                             f"sum({increase(queries_name)})")
    elif names.prefix_gauge:
        queries["prefix_cache_hit_ratio"] = mean_per_replica(names.prefix_gauge)
    return queries


# --- results -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WindowMetrics:
    """One pool's figures over [start, end]; a figure in `missing` is None, with why."""

    selector: SeriesSelector
    start: datetime
    end: datetime
    values: Mapping[str, float | None]
    missing: Mapping[str, str] = field(default_factory=dict)
    names: MetricNames = MetricNames()
    # Figures whose series the pods do not expose at all: waiting will not bring them.
    absent: frozenset[str] = frozenset()
    replicas: float | None = None  # that finished requests in the window

    def value(self, key: str) -> float | None:
        return self.values.get(key)

    @property
    def rps_per_replica(self) -> float | None:
        """Requests finished per second per serving replica; None when unknown."""
        seconds = (self.end - self.start).total_seconds()
        requests = self.requests
        if requests is None or not self.replicas or seconds <= 0:
            return None
        return requests / seconds / self.replicas

    @property
    def requests(self) -> float | None:
        return self.values.get("requests")


def _absent(names: MetricNames) -> dict[str, str]:
    """Why each figure has no query: the names the pool's pods lack."""
    def lacks(options: Iterable[str]) -> str:
        return "no " + " or ".join(options) + " series for these pods"

    out: dict[str, str] = {}
    if not names.requests:
        out["requests"] = out["error_ratio"] = lacks([REQUESTS])
    if not names.ttft:
        out.update(dict.fromkeys(("ttft_p90", "ttft_p99", "ttft_mean"), lacks(TTFT)))
    if not names.itl:
        out.update(dict.fromkeys(("itl_p90", "itl_mean"), lacks(ITL)))
    if not names.waiting:
        out["queue_depth"] = lacks(WAITING)
    if not names.kv_cache:
        out["kv_cache_usage"] = lacks(KV_CACHE)
    if not names.prefix_counters and not names.prefix_gauge:
        out["prefix_cache_hit_ratio"] = lacks([*PREFIX_COUNTERS[0], PREFIX_GAUGE])
    return out


def _scalar(answer: Answer) -> float | None:
    """The one value of an aggregated answer; None for no series or NaN/Inf (0/0: no
    requests in the window, histogram_quantile of empty buckets)."""
    if not answer:
        return None
    value = float(answer[0][1])
    return value if math.isfinite(value) else None


def window_metrics(selector: SeriesSelector, start: datetime, end: datetime,
                   names: MetricNames, answers: Mapping[str, Answer]) -> WindowMetrics:
    """The figures from the answers to `window_queries` (keyed alike)."""
    missing = _absent(names) if not selector.empty else dict.fromkeys(
        FIGURES, f"no pods selected ({selector})")
    absent = frozenset(missing)
    values: dict[str, float | None] = dict.fromkeys(FIGURES)
    if answers.get("finished"):
        by_reason = {labels.get("finished_reason", ""): v for labels, v in answers["finished"]}
        total = sum(by_reason.values())
        values["requests"] = total
        failed = sum(v for reason, v in by_reason.items() if reason in FAILED_REASONS)
        values["error_ratio"] = failed / total if total > 0 else None
        if total <= 0:
            missing["error_ratio"] = "no requests in the window"
    elif "finished" in answers:
        missing["requests"] = missing["error_ratio"] = "no samples in the window"
    replicas = _scalar(answers.get("replicas") or [])
    for key, answer in answers.items():
        if key in ("finished", "replicas"):
            continue
        values[key] = _scalar(answer)
        if values[key] is None:
            missing[key] = _EMPTY.get(key.split("_")[0], "no samples in the window")
    return WindowMetrics(selector, start, end, values,
                         {k: v for k, v in missing.items() if values.get(k) is None}, names,
                         absent, replicas)


_EMPTY = {"ttft": "no requests in the window", "itl": "no tokens generated in the window",
          "prefix": "no prefix-cache queries in the window (prefix caching off?)"}
