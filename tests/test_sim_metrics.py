"""simcluster's `/metrics` as Prometheus scrapes it: DCGM-exporter GPU series and vLLM serving
series driven by demand split by HTTPRoute weights between InferencePools, with faults.

The cluster is reached over HTTP only (the official client for objects, a plain GET for
`/metrics`, as Prometheus does); the pure serving model is unit-tested directly. Time passes by
advancing the virtual clock.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import defaultdict

import numpy as np
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from gpuops.simcluster.metrics.serving import (
    Backend,
    Degradation,
    DemandCurve,
    DemandModel,
    Histogram,
    ReplicaProfile,
    ReplicaState,
    RouteRule,
    Spike,
    latency_at,
    model_demand,
    split_demand,
    step_replica,
)
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)

NS = "default"
MODEL = "llama-3-8b"
POOL_GROUP = "inference.networking.k8s.io"


# --- the pure serving model ------------------------------------------------------------------

def test_demand_curve_peaks_at_the_peak_hour_and_is_lowest_twelve_hours_later():
    curve = DemandCurve(base_rps=2, peak_rps=10, peak_hour_utc=15)
    day = 1_700_000_000 - 1_700_000_000 % 86400  # a UTC midnight
    assert curve.rps(day + 15 * 3600) == pytest.approx(10)
    assert curve.rps(day + 3 * 3600) == pytest.approx(2)
    assert 2 < curve.rps(day + 9 * 3600) < 10


def test_demand_config_defaults_and_errors_name_the_field():
    demand = DemandModel.from_config({"*": {"baseRps": 1, "peakRps": 1},
                                      MODEL: {"baseRps": 4, "peakRps": 4}})
    assert demand.rps(MODEL, 0) == pytest.approx(4)
    assert demand.rps("unnamed-model", 0) == pytest.approx(1)
    with pytest.raises(ValueError, match=r"demand\.llama-3-8b\.peakRps must be a number"):
        DemandModel.from_config({MODEL: {"peakRps": "lots"}})
    with pytest.raises(ValueError, match="unknown field.*'baseRPS'"):
        DemandModel.from_config({MODEL: {"baseRPS": 3}})


def test_a_demand_spike_multiplies_its_model_only_while_it_lasts():
    demand = DemandModel.from_config({"*": {"baseRps": 2, "peakRps": 2}})
    spike = Spike(MODEL, 5.0, start=100, end=200)
    assert model_demand(demand, [MODEL, "other"], 150, [spike]) == {MODEL: 10.0, "other": 2.0}
    assert model_demand(demand, [MODEL], 250, [spike]) == {MODEL: 2.0}


def test_route_weights_split_a_models_demand_between_its_pools():
    stable, canary, other = (NS, "stable"), (NS, "canary"), (NS, "other")
    rules = [RouteRule((Backend(stable, 90), Backend(canary, 10)))]
    pools = {stable: MODEL, canary: MODEL, other: "qwen"}
    split = split_demand({MODEL: 20.0, "qwen": 3.0}, rules, pools)
    assert split[stable] == pytest.approx(18.0)
    assert split[canary] == pytest.approx(2.0)
    assert split[other] == pytest.approx(3.0)  # no route names it: its model's pools share


def test_a_backend_naming_a_missing_pool_keeps_its_share_of_the_traffic():
    stable = (NS, "stable")
    rules = [RouteRule((Backend(stable, 1), Backend((NS, "typo"), 1)), model=MODEL)]
    assert split_demand({MODEL: 10.0}, rules, {stable: MODEL}) == {
        stable: pytest.approx(5.0), (NS, "typo"): pytest.approx(5.0)}


def test_latency_rises_with_utilisation_and_with_a_bad_version():
    profile = ReplicaProfile()
    idle, busy, saturated = (latency_at(profile, rho, 0.0) for rho in (0.1, 0.7, 1.5))
    assert idle.ttft_s < busy.ttft_s < saturated.ttft_s
    assert idle.itl_s < busy.itl_s < saturated.itl_s
    assert saturated.ttft_s <= profile.ttft_base_s * 20 + 1e-9  # capped, not infinite
    bad = latency_at(profile, 0.7, 0.0, Degradation(3.0, 2.0, 0.1))
    assert bad.ttft_s == pytest.approx(3 * busy.ttft_s)
    assert bad.itl_s == pytest.approx(2 * busy.itl_s)


def test_counters_follow_the_offered_load_and_histograms_stay_consistent():
    state, profile = ReplicaState(), ReplicaProfile(capacity_rps=5)
    for _ in range(200):
        step_replica(state, profile, 3.0, 5.0, (Degradation(error_rate=0.05),))
    served = sum(state.finished.values())
    assert served == pytest.approx(3000, abs=3)
    # each request fails with probability 0.05: binomial, sd 12
    assert state.finished["error"] == pytest.approx(150, abs=40)
    assert state.backlog == 0 and state.finished["abort"] == 0
    for hist in (state.ttft, state.itl, state.e2e):
        buckets = [count for _, count in hist.cumulative()]
        assert buckets == sorted(buckets)  # cumulative
        assert buckets[-1] == hist.count and hist.total > 0
    assert state.ttft.count == served and state.e2e.count == served
    good = served - state.finished["error"]
    # one per token after the first; output lengths vary around 180 per request
    assert state.itl.count == pytest.approx(good * 179, rel=0.05)
    assert state.generation_tokens == state.itl.count + served


def test_overload_builds_a_backlog_that_drains_and_clients_abandon_a_long_one():
    state, profile = ReplicaState(), ReplicaProfile(capacity_rps=5, max_queue_s=60)
    step_replica(state, profile, 8.0, 20.0)
    assert state.waiting == 60  # (8 - 5) x 20 s
    step_replica(state, profile, 8.0, 200.0)
    assert state.backlog == pytest.approx(300)  # capped at 60 s of work
    assert state.finished["abort"] > 0
    step_replica(state, profile, 0.0, 100.0)
    assert state.backlog == 0 and state.waiting == 0


def test_histogram_places_observations_in_the_bucket_at_or_above_them():
    hist = Histogram((0.1, 1.0))
    hist.observe(np.array([0.05, 0.1, 0.5, 1.0, 3.0]), np.array([1, 2, 3, 4, 5]))
    cumulative = dict(hist.cumulative())
    assert cumulative == {"0.1": 3, "1.0": 10, "+Inf": 15}  # le: at or below the bound
    assert hist.count == 15
    assert hist.total == pytest.approx(0.05 + 0.2 + 1.5 + 4.0 + 15.0)


# --- over HTTP -------------------------------------------------------------------------------

def constant_demand(rps: float) -> dict:
    return {"demand": {MODEL: {"baseRps": rps, "peakRps": rps}}}


class Cluster:
    """Objects through the official client; `/metrics` through a plain GET."""

    def __init__(self, sim) -> None:
        self.sim = sim
        self.core = client.CoreV1Api(sim.api)
        self.custom = client.CustomObjectsApi(sim.api)
        self.nodes = 0

    def node(self, gpus: int = 8, product: str = "NVIDIA-H100-80GB-HBM3") -> str:
        name = f"gpu-node-{self.nodes}"
        self.nodes += 1
        capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        self.core.create_node({
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}]}})
        return name

    def pod(self, name: str, node: str, *, app: str, gpus: int = 1,
            image: str = "vllm/vllm-openai:v0.11.0", annotations: dict | None = None) -> None:
        self.core.create_namespaced_pod(NS, {
            "metadata": {"name": name, "labels": {"app": app}, "annotations": annotations or {}},
            "spec": {"nodeName": node, "containers": [{
                "name": "vllm", "image": image, "args": ["--served-model-name", MODEL],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})

    def pool(self, name: str, app: str) -> None:
        self.custom.create_namespaced_custom_object(POOL_GROUP, "v1", NS, "inferencepools", {
            "apiVersion": f"{POOL_GROUP}/v1", "kind": "InferencePool",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}}})

    def route(self, name: str, weights: dict[str, int]) -> None:
        self.custom.create_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", NS, "httproutes", {
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": name},
                "spec": {"parentRefs": [{"name": "inference-gateway"}], "rules": [{
                    "backendRefs": [{"group": POOL_GROUP, "kind": "InferencePool", "name": pool,
                                     "weight": weight} for pool, weight in weights.items()]}]}})

    def wait_ready(self, *names: str) -> None:
        self.sim.advance(5)  # the image pull

        def ready() -> bool:
            for name in names:
                status = self.core.read_namespaced_pod(name, NS).status
                conditions = {c.type: c.status for c in status.conditions or ()}
                if status.phase != "Running" or conditions.get("Ready") != "True":
                    return False
            return True

        wait_for(ready, timeout=20, message=f"pods {names} Running and Ready")

    def scrape(self) -> Scrape:
        with urllib.request.urlopen(f"{self.sim.url}/metrics", timeout=30) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            return Scrape(resp.read().decode())


class Scrape:
    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples = [s for f in self.families.values() for s in f.samples]

    def series(self, name: str, **labels: str) -> list:
        return [s for s in self.samples if s.name == name
                and all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.series(name, **labels))

    def quantile(self, q: float, histogram: str, **labels: str) -> float:
        """histogram_quantile() over the matching series, as PromQL interpolates it."""
        buckets: dict[float, float] = defaultdict(float)
        for s in self.series(histogram + "_bucket", **labels):
            buckets[float(s.labels["le"])] += s.value
        bounds = sorted(buckets)
        rank, lower, below = q * buckets[float("inf")], 0.0, 0.0
        for bound in bounds:
            if buckets[bound] >= rank:
                if bound == float("inf"):
                    return lower
                return lower + (bound - lower) * (rank - below) / (buckets[bound] - below)
            lower, below = bound, buckets[bound]
        return lower


@pytest.fixture
def cluster_factory(sim_factory):
    return lambda **options: Cluster(sim_factory("empty", **options))


def test_metrics_parse_and_show_idle_gpus_at_zero_and_held_gpus_with_their_pod(cluster_factory):
    c = cluster_factory(extra=constant_demand(4))
    node = c.node(gpus=8)
    c.pod("llama-0", node, app="llama")
    c.pod("trainer-0", node, app="trainer", gpus=4, image="ghcr.io/acme/trainer:2.1")
    c.pool("llama", "llama")
    c.route("llama", {"llama": 100})
    c.custom.create_namespaced_custom_object(POOL_GROUP, "v1", NS, "inferencepools", {
        "apiVersion": f"{POOL_GROUP}/v1", "kind": "InferencePool",
        "metadata": {"name": "selects-nothing"}, "spec": {"selector": {"matchLabels": {}}}})
    c.wait_ready("llama-0", "trainer-0")
    c.sim.advance(60)
    m = c.scrape()

    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_POWER_USAGE"} <= set(m.families)
    gpus = {s.labels["gpu"]: s for s in m.series("DCGM_FI_DEV_GPU_UTIL", Hostname=node)}
    assert sorted(gpus) == [str(i) for i in range(8)]
    serving, training, idle = gpus["0"], gpus["1"], gpus["7"]
    assert serving.labels["pod"] == "llama-0" and serving.labels["namespace"] == NS
    assert serving.labels["container"] == "vllm"
    assert serving.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert serving.labels["UUID"].startswith("GPU-") and serving.labels["device"] == "nvidia0"
    assert 0 < serving.value < 100  # 4 rps on a 5 rps replica
    assert {gpus[i].labels.get("pod") for i in "1234"} == {"trainer-0"}
    assert training.value >= 80
    assert idle.value == 0 and "pod" not in idle.labels
    assert m.value("DCGM_FI_DEV_FB_USED", gpu="7", Hostname=node) == 0
    assert m.value("DCGM_FI_DEV_FB_FREE", gpu="0", Hostname=node) < \
        m.value("DCGM_FI_DEV_FB_FREE", gpu="7", Hostname=node)
    assert m.value("DCGM_FI_DEV_POWER_USAGE", gpu="1", Hostname=node) > \
        m.value("DCGM_FI_DEV_POWER_USAGE", gpu="7", Hostname=node)

    labels = {"pod": "llama-0", "namespace": NS, "model_name": MODEL, "inference_pool": "llama"}
    assert m.value("vllm:request_success_total", **labels) == pytest.approx(4 * 60, abs=10)
    assert m.families["vllm:time_to_first_token_seconds"].type == "histogram"
    assert m.value("vllm:time_to_first_token_seconds_count", **labels) > 0
    assert 0 < m.value("vllm:kv_cache_usage_perc", **labels) <= 1
    assert m.value("vllm:prefix_cache_hits_total", **labels) < \
        m.value("vllm:prefix_cache_queries_total", **labels)
    assert m.value("vllm:generation_tokens_total", **labels) > 0
    assert not m.series("vllm:num_requests_running", pod="trainer-0")
    assert not m.series("vllm:num_requests_running", inference_pool="selects-nothing")


def test_a_pod_annotation_pins_gpu_utilisation_and_an_xid_shows_on_its_gpu(cluster_factory):
    c = cluster_factory()
    node = c.node(gpus=2)
    c.pod("batch-0", node, app="batch", image="ghcr.io/acme/batch:1",
          annotations={"sim.gpuops.io/gpu-util": "37"})
    c.wait_ready("batch-0")
    assert c.scrape().value("DCGM_FI_DEV_GPU_UTIL", pod="batch-0") == 37
    c.sim.fault("gpu-xid", node, xid=79, gpu=1)
    m = c.scrape()
    assert m.value("DCGM_FI_DEV_XID_ERRORS", Hostname=node, gpu="1") == 79
    assert m.value("DCGM_FI_DEV_XID_ERRORS", Hostname=node, gpu="0") == 0


def test_httproute_weights_90_10_split_the_requests_between_two_pools(cluster_factory):
    c = cluster_factory(extra=constant_demand(6))
    node = c.node(gpus=8)
    for i in range(2):
        c.pod(f"stable-{i}", node, app="stable")
        c.pod(f"canary-{i}", node, app="canary")
    c.pool("stable", "stable")
    c.pool("canary", "canary")
    c.route(MODEL, {"stable": 90, "canary": 10})
    c.wait_ready("stable-0", "stable-1", "canary-0", "canary-1")
    before = c.scrape()
    c.sim.advance(600)
    after = c.scrape()

    def requests(m: Scrape, pool: str) -> float:
        return m.value("vllm:request_success_total", inference_pool=pool)

    stable = requests(after, "stable") - requests(before, "stable")
    canary = requests(after, "canary") - requests(before, "canary")
    assert stable + canary == pytest.approx(6 * 600, rel=0.02)
    assert stable / (stable + canary) == pytest.approx(0.9, abs=0.01)
    # each pool spreads its share evenly over its Ready pods
    assert after.value("vllm:request_success_total", pod="canary-0") == pytest.approx(
        after.value("vllm:request_success_total", pod="canary-1"), abs=2)


def test_bad_version_raises_ttft_and_errors_of_its_pool_and_good_version_clears_it(
        cluster_factory):
    c = cluster_factory(extra=constant_demand(6))
    node = c.node(gpus=8)
    c.pod("v1-0", node, app="v1")
    c.pod("v2-0", node, app="v2", image="vllm/vllm-openai:v0.12.0-rc1")
    c.pool("v1", "v1")
    c.pool("v2", "v2")
    c.route(MODEL, {"v1": 50, "v2": 50})
    c.wait_ready("v1-0", "v2-0")
    result = c.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.0-*", ttft_factor=4,
                         error_rate=0.1)
    assert result["pods"] == 1
    c.sim.advance(600)
    m = c.scrape()

    def errors(m: Scrape, pool: str) -> float:
        return m.value("vllm:request_success_total", inference_pool=pool, finished_reason="error")

    ttft = "vllm:time_to_first_token_seconds"
    assert m.quantile(0.9, ttft, inference_pool="v2") > 2.5 * m.quantile(0.9, ttft,
                                                                         inference_pool="v1")
    assert m.quantile(0.5, "vllm:inter_token_latency_seconds", inference_pool="v2") > \
        m.quantile(0.5, "vllm:inter_token_latency_seconds", inference_pool="v1")
    served = m.value("vllm:request_success_total", inference_pool="v2")
    assert errors(m, "v2") / served == pytest.approx(0.1, abs=0.02)
    assert errors(m, "v1") == 0

    assert c.sim.fault("good-version")["cleared"] == 1
    c.sim.advance(300)
    assert errors(c.scrape(), "v2") <= errors(m, "v2") + 1


def test_bad_version_on_a_pool_target_and_unknown_pools_are_refused(cluster_factory):
    c = cluster_factory()
    c.pool("v1", "v1")
    assert c.sim.fault("bad-version", f"{NS}/v1")["pool"] == f"{NS}/v1"
    with pytest.raises(urllib.error.HTTPError) as err:
        c.sim.fault("bad-version", f"{NS}/nope")
    assert err.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        c.sim.fault("bad-version", f"{NS}/v1", error_rate=2)
    assert err.value.code == 400
    assert "params.error_rate must be a number from 0 to 1" in json.loads(
        err.value.read())["message"]


def test_demand_spike_builds_a_queue_of_waiting_requests(cluster_factory):
    c = cluster_factory(extra=constant_demand(6))
    node = c.node(gpus=8)
    for i in range(2):
        c.pod(f"llama-{i}", node, app="llama")
    c.pool("llama", "llama")
    c.route(MODEL, {"llama": 1})
    c.wait_ready("llama-0", "llama-1")
    c.sim.advance(60)
    calm = c.scrape().value("vllm:num_requests_waiting", inference_pool="llama")
    c.sim.fault("demand-spike", model=MODEL, factor=4, duration_s=120)
    c.sim.advance(60)
    spiked = c.scrape()
    waiting = spiked.value("vllm:num_requests_waiting", inference_pool="llama")
    assert waiting > 100 and waiting > 10 * calm  # 24 rps on 2 x 5 rps for a minute
    assert spiked.value("vllm:kv_cache_usage_perc", pod="llama-0") > 0.9
    c.sim.advance(600)  # the spike is over: the backlog drains
    assert c.scrape().value("vllm:num_requests_waiting", inference_pool="llama") < waiting


def test_counters_are_monotonic_across_scrapes_and_a_deleted_pod_is_forgotten(cluster_factory):
    c = cluster_factory(extra=constant_demand(3))
    node = c.node(gpus=2)
    c.pod("llama-0", node, app="llama")
    c.pod("llama-1", node, app="llama")
    c.pool("llama", "llama")
    c.wait_ready("llama-0", "llama-1")
    counters = ("vllm:request_success_total", "vllm:prompt_tokens_total",
                "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
                "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_sum")
    previous: dict = {}
    for _ in range(4):
        c.sim.advance(37)
        m = c.scrape()
        for name in counters:
            for s in m.series(name, pod="llama-0"):
                key = (name, tuple(sorted(s.labels.items())))
                assert s.value >= previous.get(key, 0), key
                previous[key] = s.value
    assert previous[("vllm:request_success_total", tuple(sorted({
        "model_name": MODEL, "engine": "0", "namespace": NS, "pod": "llama-0",
        "inference_pool": "llama", "finished_reason": "stop"}.items())))] > 0

    c.core.delete_namespaced_pod("llama-1", NS, grace_period_seconds=0)
    wait_for(lambda: not c.scrape().series("vllm:request_success_total", pod="llama-1"),
             timeout=10, message="the deleted pod's series to go")
    m = c.scrape()
    assert not m.series("DCGM_FI_DEV_GPU_UTIL", pod="llama-1")
    assert m.series("vllm:request_success_total", pod="llama-0")


def test_default_scenario_serves_its_pools_and_their_gpus_are_busy(sim_factory):
    c = Cluster(sim_factory("default"))
    pools = client.CustomObjectsApi(c.sim.api).list_cluster_custom_object(
        POOL_GROUP, "v1", "inferencepools")["items"]
    names = {p["metadata"]["name"] for p in pools}
    assert names

    def every_pool_serving() -> Scrape | None:
        c.sim.advance(30)  # image pulls and model loads take minutes
        m = c.scrape()
        serving = {s.labels["inference_pool"] for s in m.series("vllm:num_requests_running")}
        return m if serving >= names else None

    m = wait_for(every_pool_serving, timeout=60, interval=0.2,
                 message=f"vLLM series for every InferencePool {sorted(names)}")
    c.sim.advance(60)
    m = c.scrape()
    for s in m.series("vllm:num_requests_running"):
        pod = s.labels["pod"]
        assert m.value("vllm:request_success_total", pod=pod) > 0, pod
        assert all(g.value > 0 for g in m.series("DCGM_FI_DEV_GPU_UTIL", pod=pod)), pod
