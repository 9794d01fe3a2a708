"""`/metrics`: DCGM-exporter GPU series and vLLM serving series, as Prometheus scrapes them.

In a real cluster Prometheus scrapes dcgm-exporter on every GPU node and every vLLM pod; here it
scrapes simcluster's one `/metrics`, so each series already carries the labels a pod monitor
would add (`namespace`, `pod`) and the serving series name their `inference_pool`.

The serving numbers come from `serving.py` (pure), what they apply to from `servingindex.py`
(kept by a store listener) and which GPU a pod holds from `core/gpus.py`; this module keeps the
per-replica accumulators (keyed by pod uid, forgotten with the pod, reset when vLLM restarts),
the faults (`demand-spike`, `bad-version`, `slow-version`, `good-version`), the exposition and
each Ready replica's vLLM HTTP API (`vllmapi.py`, reached through the API server's pod proxy).

A version's behaviour follows its pods' spec (image, model, command line: `core/versions.py`),
so a Deployment created after a fault behaves like its version from its first replica. Each
replica draws its requests from streams keyed by the cluster's seed and the pod (its name, or
its generateName and how many pods of that name came before, and its restart count), so a run
can be repeated. The model advances on a slow tick, before every change of who serves what,
and on every scrape; the exposition is built only when scraped. The vLLM families go through a
prometheus_client Collector and `generate_latest` on a registry of their own; the DCGM
families (5,000 nodes x 8 GPUs in the scale benchmark) are rendered by `dcgm.py` in the same
text format, because generate_latest would take seconds for them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from pydantic import Field

from ..core import errors
from ..core.clock import VirtualClock, rfc3339
from ..core.faults import FaultParams, FaultRegistry
from ..core.gpus import GpuAllocations
from ..core.podproxy import PodProxy, ProxyRequest, ProxyResponse
from ..core.store import Store
from ..core.versions import LoadTime, LoadTimes
from . import vllmapi
from .dcgm import render_gpu_metrics
from .idlegpus import IdleGpus, IdleParams
from .serving import (
    FINISH_REASONS,
    Degradation,
    DemandModel,
    PoolKey,
    ReplicaProfile,
    ReplicaState,
    RequestStreams,
    Spike,
    model_demand,
    rule_model,
    serve_request,
    split_demand,
    step_replica,
)
from .servingindex import PodView, ServingIndex
from .versionrules import (
    WARMUP_PARAMS,
    BadVersionParams,
    DegradeRule,
    GoodVersionParams,
    SlowRule,
    SlowVersionParams,
    version_of,
)

TICK_S = 5.0  # virtual seconds between model steps when nobody scrapes
MAX_STEP_S = 15.0  # a clock jump is replayed in steps of at most this...
MAX_STEPS = 60  # ...but never more than this many steps per advance
MIN_STEP_S = 0.001  # changes closer together than this share a step
EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsEngine:
    """The serving model's state, its tick (a controller), its faults and its exposition."""

    name = "metrics"

    def __init__(self, store: Store, clock: VirtualClock, faults: FaultRegistry,
                 gpus: GpuAllocations, demand: DemandModel, *, seed: int = 0,
                 load_times: LoadTimes | None = None, pod_proxy: PodProxy | None = None
                 ) -> None:
        self.clock = clock
        self.demand = demand
        self.seed = seed
        self.load_times = load_times if load_times is not None else LoadTimes()
        self.states: dict[str, ReplicaState] = {}
        self.state_restarts: dict[str, int] = {}
        self.stream_keys: dict[str, tuple[str, str, int]] = {}  # uid -> (ns, name, ordinal)
        self.names_seen: dict[tuple[str, str], int] = {}
        self.spikes: list[Spike] = []
        self.degrade_rules: list[DegradeRule] = []
        self.slow_rules: list[SlowRule] = []
        self.last_t = self.clock.time()
        self.node_type = store.type("nodes")
        self.pod_type = store.type("pods")
        self.idle = IdleGpus(store)
        self.index = ServingIndex(store, gpus, before_change=self.catch_up)
        self.gpus = gpus
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._register_faults(faults)
        if pod_proxy is not None:
            pod_proxy.register(self.answer_pod)

    async def run(self) -> None:
        while True:
            self.catch_up()
            await self.clock.sleep(max(TICK_S, 0.5 * self.clock.speed))

    # --- the model -----------------------------------------------------------------------------

    def catch_up(self) -> None:
        self.advance_to(self.clock.time())

    def advance_to(self, now: float) -> None:
        dt = now - self.last_t
        if dt < MIN_STEP_S:
            return
        steps = min(MAX_STEPS, max(1, math.ceil(dt / MAX_STEP_S)))
        h = dt / steps
        self._forget_gone_replicas()
        replicas = self._ready_replicas()
        versions = {uid: (self._profile(view), self._degradations(view))
                    for uid, view in replicas.items()}
        for i in range(steps):
            t = self.last_t + h * (i + 0.5)
            loads = self._loads(t, replicas)
            for uid, view in replicas.items():
                profile, degradations = versions[uid]
                age = None if view.ready_since is None else t - view.ready_since
                step_replica(self._state(view), profile, loads.get(uid, 0.0), h,
                             degradations, age)
        self.last_t = now
        self.spikes = [s for s in self.spikes if s.end > now]

    def _ready_replicas(self) -> dict[str, PodView]:
        replicas: dict[str, PodView] = {}
        for members in self.index.members.values():
            for uid, view in members.items():
                if view.ready:
                    replicas[uid] = view
        return replicas

    def _loads(self, t: float, replicas: dict[str, PodView]) -> dict[str, float]:
        pool_models = {key: self.index.pool_model(key) for key in self.index.pools}
        rules = self.index.rules()
        models = set(pool_models.values())
        models.update(m for m in (rule_model(r, pool_models) for r in rules) if m)
        demand = model_demand(self.demand, sorted(models), t, self.spikes)
        loads: dict[str, float] = {}
        for pool, rps in split_demand(demand, rules, pool_models).items():
            ready = [uid for uid, v in self.index.members.get(pool, {}).items() if uid in replicas]
            for uid in ready:
                loads[uid] = loads.get(uid, 0.0) + rps / len(ready)
        return loads

    def _state(self, view: PodView) -> ReplicaState:
        state = self.states.get(view.uid)
        if state is None or self.state_restarts.get(view.uid) != view.restarts:
            # a restarted vLLM starts from zero, with requests of its own
            state = self.states[view.uid] = ReplicaState(
                streams=RequestStreams(self.seed, *self._stream_key(view), view.restarts))
            self.state_restarts[view.uid] = view.restarts
        return state

    def _stream_key(self, view: PodView) -> tuple[str, str, int]:
        """What names a replica's requests across runs: a generated pod name is random, so
        such a pod is its generateName and how many of that name the engine saw before it."""
        key = self.stream_keys.get(view.uid)
        if key is None:
            stem = (view.namespace, view.generate_name or view.name)
            ordinal = self.names_seen.get(stem, 0)
            self.names_seen[stem] = ordinal + 1
            key = self.stream_keys[view.uid] = (*stem, ordinal)
        return key

    def _forget_gone_replicas(self) -> None:
        for uid in [u for u in self.states if u not in self.index.pod_pools]:
            del self.states[uid]
            self.state_restarts.pop(uid, None)
            self.stream_keys.pop(uid, None)

    def _degradations(self, view: PodView) -> tuple[Degradation, ...]:
        pools = self.index.pod_pools.get(view.uid, set())
        return tuple(rule.degradation for rule in self.degrade_rules
                     if rule.matches(view, pools))

    def _profile(self, view: PodView) -> ReplicaProfile:
        """The pod's profile, with the cold period of the latest `slow-version` that sets one."""
        for rule in reversed(self.slow_rules):
            if rule.warmup and rule.matches(view):
                warmup = dataclasses.replace(view.profile.warmup, **rule.warmup)
                return dataclasses.replace(view.profile, warmup=warmup)
        return view.profile

    def gpu_util_of(self, view: PodView) -> float | None:
        """A pod's GPU utilisation when something sets it: a `gpu-idle` rule, or a serving
        replica's load (None: neither, the exporter's default applies)."""
        if self.idle.rules:
            pod = self.index.store.find(self.pod_type, view.namespace, view.name)
            if pod is not None:
                idle = self.idle.util_of(view.namespace, pod["metadata"].get("labels") or {})
                if idle is not None:
                    return idle
        if view.uid not in self.index.pod_pools:
            return None
        state = self.states.get(view.uid)
        return state.gpu_util if (state is not None and view.ready) else 0.0

    # --- exposition ----------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """The Collector protocol: the vLLM families (the DCGM ones are rendered directly)."""
        yield from self._vllm_families()

    def _vllm_families(self, only: str | None = None) -> Iterator[Metric]:
        """Every replica's series as Prometheus scrapes them (with the `namespace`, `pod` and
        `inference_pool` a pod monitor adds), or, for `only` (a pod uid), what that vLLM's own
        `/metrics` shows: `model_name` and `engine` alone."""
        gauges = {
            "vllm:num_requests_running": "Number of requests in model execution batches.",
            "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
            "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
        }
        counters = {
            "vllm:prompt_tokens": "Number of prefill tokens processed.",
            "vllm:generation_tokens": "Number of generation tokens processed.",
            "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried "
                                         "tokens.",
            "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
            "vllm:request_success": "Count of successfully processed requests.",
        }
        histograms = {
            "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
            "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
            "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
        }
        families = {name: Metric(name, doc, "gauge") for name, doc in gauges.items()}
        families.update({name: Metric(name, doc, "counter") for name, doc in counters.items()})
        families.update({name: Metric(name, doc, "histogram") for name, doc in histograms.items()})
        for key in sorted(self.index.pools):
            model = self.index.pool_model(key)
            for view in sorted(self.index.ready_members(key), key=lambda v: v.name):
                if min(self.index.pod_pools[view.uid]) != key:
                    continue  # a pod in several pools is exposed once, under its first pool
                if only is not None and view.uid != only:
                    continue
                state = self._state(view)
                labels = {"model_name": view.model or model, "engine": "0"}
                if only is None:
                    labels.update(namespace=view.namespace, pod=view.name,
                                  inference_pool=key[1])
                _add(families, "vllm:num_requests_running", "", labels, state.running)
                _add(families, "vllm:num_requests_waiting", "", labels, state.waiting)
                _add(families, "vllm:kv_cache_usage_perc", "", labels, state.kv_cache_usage)
                _add(families, "vllm:prompt_tokens", "_total", labels, state.prompt_tokens)
                _add(families, "vllm:generation_tokens", "_total", labels,
                     state.generation_tokens)
                _add(families, "vllm:prefix_cache_queries", "_total", labels,
                     state.prefix_queries)
                _add(families, "vllm:prefix_cache_hits", "_total", labels, state.prefix_hits)
                for reason in FINISH_REASONS:
                    _add(families, "vllm:request_success", "_total",
                         {**labels, "finished_reason": reason}, state.finished[reason])
                for name, hist in (("vllm:time_to_first_token_seconds", state.ttft),
                                   ("vllm:inter_token_latency_seconds", state.itl),
                                   ("vllm:e2e_request_latency_seconds", state.e2e)):
                    for le, count in hist.cumulative():
                        _add(families, name, "_bucket", {**labels, "le": le}, count)
                    _add(families, name, "_count", labels, hist.count)
                    _add(families, name, "_sum", labels, hist.total)
        yield from families.values()

    def exposition(self) -> bytes:
        self.catch_up()
        gpus = render_gpu_metrics(self.index.store, self.node_type, self.gpus, self.index.views,
                                  self.gpu_util_of)
        return gpus.encode() + generate_latest(self.registry)

    # --- each replica's vLLM server, reached through the API server's pod proxy ----------------

    def answer_pod(self, request: ProxyRequest) -> ProxyResponse | None:
        """A Ready replica's vLLM answers on its port; one still loading its model (not Ready)
        refuses the connection, as does any other pod or port (None)."""
        view = self._replica(request.namespace, request.pod)
        if view is None or not view.ready or request.port != vllmapi.port_of(view.facts.argv):
            return None
        self.catch_up()
        model = view.model or self.index.pool_model(min(self.index.pod_pools[view.uid]))
        now = self.clock.time()

        def generate() -> ProxyResponse:
            asked, refused = vllmapi.requested_model(request.body)
            if refused is not None:
                return refused
            if asked != model:
                return vllmapi.error(404, f"The model `{asked}` does not exist.",
                                     "NotFoundError")
            state = self._state(view)
            prompt, generated = state.prompt_tokens, state.generation_tokens
            age = None if view.ready_since is None else now - view.ready_since
            reason = serve_request(state, self._profile(view), self._degradations(view), age)
            if reason == "error":
                return vllmapi.error(500, "EngineCore encountered an issue. See stack trace "
                                     "(above) for the root cause.", "InternalServerError")
            return vllmapi.completion(request.path, model, int(now), reason,
                                      state.prompt_tokens - prompt,
                                      state.generation_tokens - generated)

        return vllmapi.route(
            request, health=lambda: ProxyResponse(200, b"", "text/plain"),
            list_models=lambda: vllmapi.models(model, int(now),
                                               vllmapi.max_model_len_of(view.facts.argv)),
            metrics=lambda: ProxyResponse(200, self._pod_exposition(view.uid),
                                          vllmapi.METRICS_CONTENT_TYPE),
            generate=generate)

    def _replica(self, namespace: str, name: str) -> PodView | None:
        for uid in self.index.pod_pools:
            view = self.index.views[uid]
            if view.name == name and view.namespace == namespace:
                return view
        return None

    def _pod_exposition(self, uid: str) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(list(self._vllm_families(only=uid))))
        return generate_latest(registry)

    # --- faults --------------------------------------------------------------------------------

    async def handle(self, _request: web.Request) -> web.Response:
        """`GET /metrics`."""
        return web.Response(body=self.exposition(),
                            headers={"Content-Type": EXPOSITION_CONTENT_TYPE})

    def _register_faults(self, reg: FaultRegistry) -> None:
        reg.register("demand-spike", self._demand_spike,
                     "multiply a model's request rate for a while", params=DemandSpikeParams,
                     target="a model name (or params.model; none: every model)")
        reg.register("bad-version", self._bad_version,
                     "degrade the serving pods of an InferencePool, or those of a version "
                     "(image, model, args globs; pods created later too): slower first and "
                     "next tokens, a share of requests fail, fewer prefix-cache hits, "
                     "optionally only above a load per replica",
                     params=BadVersionParams,
                     target="an InferencePool `namespace/name` (or params.image / model / "
                     "args)")
        reg.register("slow-version", self._slow_version,
                     "a version's pods created from now on load their model for "
                     "load_seconds (readiness fails until then) and may be cold for longer "
                     "after Ready", params=SlowVersionParams,
                     target="none (params.image / model / args name the version)")
        reg.register("gpu-idle", self.idle.inject,
                     "a workload keeps its GPUs but stops using them: DCGM shows ~0 % "
                     "utilisation on the GPUs its pods hold (replacements too) until "
                     "`clear: true`", params=IdleParams,
                     target="a workload `namespace/name` / `kind/namespace/name`, or a "
                     "namespace with params.selector")
        reg.register("good-version", self._good_version,
                     "clear bad-version and slow-version faults (all, or those of the target "
                     "pool / params.image)",
                     params=GoodVersionParams, target="an InferencePool `namespace/name`")

    def _demand_spike(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        self.catch_up()
        model = params.get("model") or target or None
        factor, duration = params["factor"], params["duration_s"]
        now = self.clock.time()
        self.spikes.append(Spike(model, factor, now, now + duration))
        return {"model": model or "*", "factor": factor, "until": rfc3339(now + duration)}

    def _bad_version(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        self.catch_up()
        pool = _pool_key(target) if target else None
        version = version_of(params)
        if pool is None and not version.given():
            raise errors.bad_request("bad-version needs a target InferencePool (namespace/name) "
                                     "or params.image, params.model or params.args")
        if pool is not None and pool not in self.index.pools:
            raise errors.not_found("inferencepools", pool[1], "inference.networking.k8s.io")
        ttft = params["ttft_factor"]
        degradation = Degradation(ttft, params.get("itl_factor", ttft), params["error_rate"],
                                  params["prefix_hit_factor"], params["min_rps_per_replica"],
                                  params["min_utilisation"])
        rule = DegradeRule(pool, version, degradation)
        self.degrade_rules.append(rule)
        pods = sum(1 for uid, v in self.index.views.items() if uid in self.index.pod_pools
                   and rule.matches(v, self.index.pod_pools[uid]))
        return {"pool": "/".join(pool) if pool else None, "image": version.image,
                "model": version.model, "args": version.args,
                "ttft_factor": degradation.ttft_factor, "itl_factor": degradation.itl_factor,
                "error_rate": degradation.error_rate,
                "prefix_hit_factor": degradation.prefix_hit_factor,
                "min_rps_per_replica": degradation.min_rps,
                "min_utilisation": degradation.min_utilisation, "pods": pods}

    def _slow_version(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        version = version_of(params)
        if target:
            raise errors.bad_request("slow-version takes no target: name the version with "
                                     "params.image, params.model or params.args")
        if not version.given():
            raise errors.bad_request("slow-version needs params.image, params.model or "
                                     "params.args (globs naming the version)")
        self.catch_up()
        warmup = {field: params[name] for name, field in WARMUP_PARAMS.items()
                  if name in params}
        rule = SlowRule(version, params["load_seconds"], warmup)
        self.slow_rules.append(rule)
        self.load_times.add(LoadTime(version, rule.load_seconds))
        running = sum(1 for v in self.index.views.values() if rule.matches(v))
        return {**version.describe(), "load_seconds": rule.load_seconds,
                **{name: params.get(name) for name in WARMUP_PARAMS},
                "pods_unchanged": running}

    def _good_version(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        self.catch_up()
        pool = _pool_key(target) if target else None
        image = params.get("image")
        before = len(self.degrade_rules) + len(self.slow_rules)
        if pool is None and not image:
            self.degrade_rules.clear()
            self.slow_rules.clear()
            self.load_times.remove(lambda _rule: False)
        else:
            self.degrade_rules = [r for r in self.degrade_rules
                                  if not ((pool is not None and r.pool == pool)
                                          or (image and r.version.image == image))]
            if image:
                self.slow_rules = [r for r in self.slow_rules if r.version.image != image]
                self.load_times.remove(lambda r: r.match.image != image)
        return {"cleared": before - len(self.degrade_rules) - len(self.slow_rules)}


class DemandSpikeParams(FaultParams):
    model: str | None = Field(None, min_length=1, description="the model whose demand spikes "
                              "(default: the target; none: every model)")
    factor: float = Field(3.0, ge=0, le=1000, description="request rate multiplier")
    duration_s: float = Field(600.0, ge=0, description="how long, in virtual seconds")


class _Families:
    """A Collector of families already built."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _add(families: dict[str, Metric], name: str, suffix: str, labels: dict[str, str],
         value: float) -> None:
    families[name].add_sample(name + suffix, labels, float(value))


def _pool_key(target: str) -> PoolKey:
    namespace, _, name = target.rpartition("/")
    if not name:
        raise errors.bad_request(f"target {target!r} must name an InferencePool as "
                                 "namespace/name")
    return (namespace or "default", name)
