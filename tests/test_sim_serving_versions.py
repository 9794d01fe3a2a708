"""simcluster's serving versions, as a rollout analysis meets them: a version's behaviour comes
from its pods' spec (so a Deployment created later behaves like its version from its first
replica), a bad version may be bad only under load or only in its prefix cache, a new replica
is cold for a while after Ready, a slow version takes long to become Ready, and every request is
drawn on its own from the cluster's seed (errors at the modelled rate, noisy but unbiased
quantiles from few requests).

The pure model (`simcluster/metrics/serving.py`) is tested directly; what users see goes
through the admin fault API and the `/metrics` exposition over HTTP.
"""

from __future__ import annotations

import json
import statistics
import urllib.error

import numpy as np
import pytest
from kubernetes import client

from gpuops.simcluster.metrics.serving import (
    NO_DEGRADATION,
    TTFT_BUCKETS,
    Degradation,
    Histogram,
    ReplicaProfile,
    ReplicaState,
    RequestStreams,
    Warmup,
    latency_at,
    serve_requests,
    service_at,
    step_replica,
)
from gpuops.simcluster.metrics.servingindex import replica_profile
from tests.helpers import wait_for
from tests.test_sim_metrics import MODEL, NS, Cluster, Scrape, constant_demand

pytestmark = pytest.mark.timeout(180)

TTFT = "vllm:time_to_first_token_seconds"
WARM = Warmup(seconds=0)


def quantile(q: float, hist: Histogram) -> float:
    """histogram_quantile() as PromQL interpolates within a bucket."""
    rank, lower, below = q * hist.count, 0.0, 0.0
    for bound, running in zip(hist.bounds, np.cumsum(hist.counts)):
        if running >= rank:
            return lower + (bound - lower) * (rank - below) / max(running - below, 1e-12)
        lower, below = bound, float(running)
    return lower


def served(n: int, profile: ReplicaProfile, rho: float = 0.5, *, key: object = 0,
           degradation: Degradation = NO_DEGRADATION) -> ReplicaState:
    state = ReplicaState(streams=RequestStreams(key))
    serve_requests(state, profile, n, service_at(profile, rho, 0.0, degradation),
                   degradation.error_rate)
    return state


# --- noise: every request drawn on its own ----------------------------------------------------

def test_sampled_latencies_keep_the_modelled_means():
    profile = ReplicaProfile(warmup=WARM)
    state = served(20_000, profile, rho=0.6)
    mean = latency_at(profile, 0.6, 0.0)
    assert state.ttft.total / state.ttft.count == pytest.approx(mean.ttft_s, rel=0.03)
    assert state.itl.total / state.itl.count == pytest.approx(mean.itl_s, rel=0.03)
    assert state.e2e.total / state.e2e.count == pytest.approx(mean.e2e_s, rel=0.03)


def test_a_few_requests_give_noisy_quantiles_centred_on_the_true_one():
    profile = ReplicaProfile(warmup=WARM)
    truth = quantile(0.9, served(50_000, profile, key="truth").ttft)
    small = [quantile(0.9, served(40, profile, key=seed).ttft) for seed in range(200)]
    assert len(set(small)) > 20  # noisy: each window of 40 requests tells its own story
    assert statistics.pstdev(small) > 0.1 * truth
    assert statistics.median(small) == pytest.approx(truth, rel=0.15)  # but not biased


def test_errors_come_out_per_request_at_the_modelled_rate():
    profile = ReplicaProfile(warmup=WARM)
    bad = Degradation(error_rate=0.1)
    windows = [served(10, profile, key=seed, degradation=bad).finished["error"]
               for seed in range(1000)]
    assert statistics.mean(windows) == pytest.approx(1.0, abs=0.1)
    # binomial, not every tenth request: some windows of 10 have none, some several
    assert windows.count(0) > 250 and sum(1 for e in windows if e >= 3) > 30


def test_request_draws_follow_the_seed_not_how_the_steps_are_cut():
    profile = ReplicaProfile(capacity_rps=5, warmup=WARM)
    fine, coarse, other = (ReplicaState(streams=RequestStreams(key)) for key in ("a", "a", "b"))
    for _ in range(60):
        step_replica(fine, profile, 3.0, 1.0, (Degradation(error_rate=0.2),))
    for state in (coarse, other):
        for _ in range(4):
            step_replica(state, profile, 3.0, 15.0, (Degradation(error_rate=0.2),))
    assert fine.finished == coarse.finished
    assert list(fine.ttft.counts) == list(coarse.ttft.counts)
    assert list(fine.itl.counts) == list(coarse.itl.counts)
    assert fine.ttft.total == pytest.approx(coarse.ttft.total)
    assert list(other.ttft.counts) != list(fine.ttft.counts)


# --- bad-version's parameters -----------------------------------------------------------------

def test_a_version_bad_only_under_load_is_good_at_light_load():
    profile = ReplicaProfile(capacity_rps=5, warmup=WARM)
    under_load = (Degradation(ttft_factor=2.0, error_rate=0.2, min_rps=3.0),)
    by_utilisation = (Degradation(ttft_factor=2.0, error_rate=0.2, min_utilisation=0.6),)

    def run(load: float, degradations: tuple[Degradation, ...]) -> ReplicaState:
        state = ReplicaState()
        for _ in range(100):
            step_replica(state, profile, load, 5.0, degradations)
        return state

    for degradations in (under_load, by_utilisation):
        light, light_good = run(1.0, degradations), run(1.0, ())
        assert light.finished["error"] == 0
        assert light.ttft.total == pytest.approx(light_good.ttft.total)  # the same requests
        heavy, heavy_good = run(4.0, degradations), run(4.0, ())
        served_heavy = heavy.ttft.count
        assert heavy.finished["error"] / served_heavy == pytest.approx(0.2, abs=0.03)
        assert heavy.ttft.total / heavy_good.ttft.total == pytest.approx(2.0, rel=0.05)


def test_prefix_hit_factor_lowers_the_hit_ratio_and_lengthens_ttft():
    profile = ReplicaProfile(warmup=WARM)
    good = served(5000, profile, rho=0.4)
    bad = served(5000, profile, rho=0.4, degradation=Degradation(prefix_hit_factor=0.2))
    nominal = profile.prefix_hit_rate * (1 - 0.5 * 0.4)
    assert good.prefix_hits / good.prefix_queries == pytest.approx(nominal, rel=0.1)
    assert bad.prefix_hits / bad.prefix_queries == pytest.approx(0.2 * nominal, rel=0.15)
    assert bad.ttft.total / good.ttft.total > 1.1  # more prefill per request


def test_prefix_caching_turned_off_by_vllm_args_queries_no_cache():
    profile = replica_profile({}, ["vllm", "serve", MODEL, "--no-enable-prefix-caching"])
    assert not profile.prefix_caching
    state = served(500, profile)
    assert state.prefix_queries == 0 and state.prefix_hits == 0 and state.prompt_tokens > 0
    assert replica_profile({}, ["--max-num-seqs", "64"]).max_num_seqs == 64


# --- the cold period after Ready --------------------------------------------------------------

def test_a_replica_is_cold_right_after_ready_and_warm_after_its_warmup():
    profile = ReplicaProfile(capacity_rps=5, warmup=Warmup(seconds=120, ttft_factor=3.0))
    state = ReplicaState()

    def window(start: float, seconds: float) -> tuple[float, float]:
        """Mean TTFT and prefix hit ratio of the requests served in [start, start+seconds)."""
        t0, n0 = state.ttft.total, state.ttft.count
        q0, h0 = state.prefix_queries, state.prefix_hits
        for i in range(int(seconds)):
            step_replica(state, profile, 2.0, 1.0, age_s=start + i + 0.5)
        return ((state.ttft.total - t0) / (state.ttft.count - n0),
                (state.prefix_hits - h0) / (state.prefix_queries - q0))

    first_ttft, first_hits = window(0, 20)
    window(20, 180)
    warm_ttft, warm_hits = window(200, 600)
    assert first_ttft > 2.0 * warm_ttft
    assert first_hits < 0.5 * warm_hits  # the prefix cache starts empty
    expected = latency_at(ReplicaProfile(capacity_rps=5, warmup=WARM), 0.4, 0.0)
    assert warm_ttft == pytest.approx(expected.ttft_s, rel=0.05)
    assert profile.warmup.coldness(None) == 0  # a replica whose Ready time is unknown is warm


# --- over HTTP --------------------------------------------------------------------------------

@pytest.fixture
def cluster_factory(sim_factory):
    return lambda **options: Cluster(sim_factory("empty", **options))


def deployment(c: Cluster, name: str, image: str, *, replicas: int = 1,
               args: tuple[str, ...] = (), probe: bool = False) -> None:
    container = {"name": "vllm", "image": image,
                 "args": ["--served-model-name", MODEL, *args],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    if probe:  # as the llm-d guides probe vLLM: model-aware, on /v1/models
        container["startupProbe"] = {"httpGet": {"path": "/v1/models", "port": 8000},
                                     "periodSeconds": 10, "failureThreshold": 120}
        container["readinessProbe"] = {"httpGet": {"path": "/v1/models", "port": 8000},
                                       "periodSeconds": 5}
    client.AppsV1Api(c.sim.api).create_namespaced_deployment(NS, {
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name},
                                           "annotations": {"sim.gpuops.io/pull-seconds": "1"}},
                              "spec": {"containers": [container]}}}})


def ready_pods(c: Cluster, app: str) -> list[str]:
    pods = c.core.list_namespaced_pod(NS, label_selector=f"app={app}").items
    return sorted(p.metadata.name for p in pods
                  if any(cond.type == "Ready" and cond.status == "True"
                         for cond in p.status.conditions or ()))


def wait_ready_pods(c: Cluster, app: str, n: int, step: float = 2) -> list[str]:
    """Advance the clock `step` at a time until `n` pods of `app` are Ready."""
    def ready() -> list[str] | None:
        c.sim.advance(step)
        names = ready_pods(c, app)
        return names if len(names) >= n else None
    return wait_for(ready, timeout=30, interval=0.2, message=f"{n} Ready pods of {app}")


def test_a_deployment_created_after_bad_version_is_bad_from_its_first_replica(cluster_factory):
    c = cluster_factory(extra=constant_demand(8))
    c.node(gpus=8)
    result = c.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=3,
                         error_rate=0.2)
    assert result["pods"] == 0  # nothing runs that version yet
    c.pool("old", "old")
    c.pool("new", "new")
    c.route(MODEL, {"old": 50, "new": 50})
    deployment(c, "old", "vllm/vllm-openai:v0.11.0", replicas=2)
    deployment(c, "new", "vllm/vllm-openai:v0.12.1", replicas=2)  # a rollout's new version
    wait_ready_pods(c, "old", 2)
    new_pods = wait_ready_pods(c, "new", 2)
    c.sim.advance(600)
    m = c.scrape()

    for pod in new_pods:  # each replica, the first one too
        errors = m.value("vllm:request_success_total", pod=pod, finished_reason="error")
        assert errors / m.value("vllm:request_success_total", pod=pod) == pytest.approx(
            0.2, abs=0.06)
    assert m.value("vllm:request_success_total", inference_pool="old",
                   finished_reason="error") == 0
    mean = {pool: m.value(f"{TTFT}_sum", inference_pool=pool)
            / m.value(f"{TTFT}_count", inference_pool=pool) for pool in ("old", "new")}
    assert mean["new"] / mean["old"] == pytest.approx(3.0, rel=0.15)
    assert_histograms_consistent(m)


def assert_histograms_consistent(m: Scrape) -> None:
    for name in (TTFT, "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds"):
        pods = {s.labels["pod"] for s in m.series(f"{name}_count")}
        assert pods
        for pod in pods:
            buckets = [s.value for s in m.series(f"{name}_bucket", pod=pod)]
            assert buckets == sorted(buckets), (name, pod)  # cumulative, in `le` order
            assert buckets[-1] == m.value(f"{name}_count", pod=pod), (name, pod)  # +Inf
            assert (m.value(f"{name}_sum", pod=pod) > 0) == (buckets[-1] > 0), (name, pod)


def test_a_version_bad_only_under_load_passes_a_small_share_and_fails_a_large_one(
        cluster_factory):
    c = cluster_factory(extra=constant_demand(10))
    c.node(gpus=8)
    c.sim.fault("bad-version", image="*:v0.12.*", ttft_factor=2, error_rate=0.3,
                min_rps_per_replica=2.5)
    c.pool("old", "old")
    c.pool("new", "new")
    deployment(c, "old", "vllm/vllm-openai:v0.11.0", replicas=2)
    deployment(c, "new", "vllm/vllm-openai:v0.12.1")
    c.route(MODEL, {"old": 95, "new": 5})  # 0.5 requests/s on the new replica
    wait_ready_pods(c, "old", 2)
    wait_ready_pods(c, "new", 1)
    c.sim.advance(600)
    small = c.scrape()
    assert small.value("vllm:request_success_total", inference_pool="new") > 100
    assert small.value("vllm:request_success_total", inference_pool="new",
                       finished_reason="error") == 0

    route = c.custom.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS,
                                                  "httproutes", MODEL)
    route["spec"]["rules"][0]["backendRefs"][1]["weight"] = 50  # 5 requests/s on it
    c.custom.replace_namespaced_custom_object("gateway.networking.k8s.io", "v1", NS,
                                              "httproutes", MODEL, route)
    c.sim.advance(600)
    large = c.scrape()

    def delta(name: str, **labels: str) -> float:
        return large.value(name, **labels) - small.value(name, **labels)

    errors = delta("vllm:request_success_total", inference_pool="new", finished_reason="error")
    assert errors / delta("vllm:request_success_total", inference_pool="new") == \
        pytest.approx(0.3, abs=0.05)


def test_slow_version_pods_become_ready_after_their_load_time_and_start_cold(cluster_factory):
    c = cluster_factory(extra=constant_demand(4))
    c.node(gpus=8)
    result = c.sim.fault("slow-version", image="vllm/vllm-openai:v0.13.*", load_seconds=300,
                         warmup_s=240, cold_ttft_factor=4)
    assert result["load_seconds"] == 300 and result["warmup_s"] == 240
    c.pool("slow", "slow")
    c.pool("fast", "fast")
    c.route(MODEL, {"slow": 1, "fast": 1})
    deployment(c, "slow", "vllm/vllm-openai:v0.13.0", probe=True)
    deployment(c, "fast", "vllm/vllm-openai:v0.11.0", probe=True)
    wait_ready_pods(c, "fast", 1)
    c.sim.advance(200)
    assert ready_pods(c, "slow") == []  # still loading its model: /v1/models refuses
    assert not c.scrape().series("vllm:num_requests_running", inference_pool="slow")
    [pod] = wait_ready_pods(c, "slow", 1, step=10)

    first = c.scrape()
    c.sim.advance(40)
    cold = c.scrape()
    c.sim.advance(400)
    warm_start = c.scrape()
    c.sim.advance(300)
    warm = c.scrape()

    def mean_ttft(a: Scrape, b: Scrape) -> float:
        return ((b.value(f"{TTFT}_sum", pod=pod) - a.value(f"{TTFT}_sum", pod=pod))
                / (b.value(f"{TTFT}_count", pod=pod) - a.value(f"{TTFT}_count", pod=pod)))

    assert mean_ttft(first, cold) > 2.5 * mean_ttft(warm_start, warm)
    hits = {name: (b.value("vllm:prefix_cache_hits_total", pod=pod)
                   - a.value("vllm:prefix_cache_hits_total", pod=pod))
            / (b.value("vllm:prefix_cache_queries_total", pod=pod)
               - a.value("vllm:prefix_cache_queries_total", pod=pod))
            for name, (a, b) in {"cold": (first, cold), "warm": (warm_start, warm)}.items()}
    assert hits["cold"] < 0.5 * hits["warm"]


def test_the_clusters_seed_makes_request_outcomes_reproducible(cluster_factory):
    def run(seed: int) -> dict[str, tuple[float, float]]:
        c = cluster_factory(extra={**constant_demand(8), "seed": seed})
        node = c.node(gpus=8)
        for i in range(4):
            c.pod(f"llama-{i}", node, app="llama")
        c.pool("llama", "llama")
        c.sim.fault("bad-version", f"{NS}/llama", ttft_factor=1, error_rate=0.5)
        c.wait_ready(*(f"llama-{i}" for i in range(4)))
        c.sim.advance(300)
        m = c.scrape()
        return {f"llama-{i}": (m.value("vllm:request_success_total", pod=f"llama-{i}"),
                               m.value("vllm:request_success_total", pod=f"llama-{i}",
                                       finished_reason="error")) for i in range(4)}

    first, again, other = run(7), run(7), run(8)
    # Request k of a replica fails or not by the seed alone: two runs that served a few
    # requests more or less (real time passes between the calls) agree on the rest.
    for pod, (served_n, errors) in first.items():
        assert abs(errors - again[pod][1]) <= abs(served_n - again[pod][0]), pod
    assert any(abs(errors - other[pod][1]) > abs(served_n - other[pod][0]) + 5
               for pod, (served_n, errors) in first.items())


def test_version_faults_refuse_bad_parameters_naming_the_field(cluster_factory):
    c = cluster_factory()

    def refused(kind: str, target: str | None = None, **params: object) -> str:
        with pytest.raises(urllib.error.HTTPError) as err:
            c.sim.fault(kind, target, **params)
        assert err.value.code == 400
        return json.loads(err.value.read())["message"]

    assert "params.min_rps_per_replica must be a number from 0 to 100000" in refused(
        "bad-version", image="x:*", min_rps_per_replica=-1)
    assert "params.prefix_hit_factor must be a number from 0 to 10" in refused(
        "bad-version", image="x:*", prefix_hit_factor="low")
    assert "params.min_utilisation must be a number from 0 to 100" in refused(
        "bad-version", image="x:*", min_utilisation=1e9)
    assert "params.image, params.model or params.args" in refused("bad-version")
    assert "params.image, params.model or params.args" in refused("slow-version",
                                                                  load_seconds=60)
    assert "params.load_seconds must be a number from 0 to 86400" in refused(
        "slow-version", image="x:*", load_seconds=-5)
    assert "params.cold_ttft_factor must be a number from 1 to 1000" in refused(
        "slow-version", image="x:*", cold_ttft_factor=0.5)
    assert "params.load_time: unknown parameter of 'slow-version'" in refused(
        "slow-version", image="x:*", load_time=5)
    assert "takes no target" in refused("slow-version", f"{NS}/pool", image="x:*")
    assert c.sim.fault("good-version")["cleared"] == 0  # nothing was half applied


def test_bad_version_matches_a_versions_model_and_args(cluster_factory):
    c = cluster_factory(extra=constant_demand(4))
    node = c.node(gpus=8)
    c.pod("plain-0", node, app="llama")
    c.core.create_namespaced_pod(NS, {
        "metadata": {"name": "tuned-0", "labels": {"app": "llama"}},
        "spec": {"nodeName": node, "containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
            "args": ["--served-model-name", MODEL, "--max-num-seqs", "512"],
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    c.pool("llama", "llama")
    result = c.sim.fault("bad-version", model="llama-*", args="*--max-num-seqs 512*",
                         error_rate=0.5, ttft_factor=1)
    assert result["pods"] == 1
    c.wait_ready("plain-0", "tuned-0")
    c.sim.advance(300)
    m = c.scrape()
    assert m.value("vllm:request_success_total", pod="plain-0", finished_reason="error") == 0
    assert m.value("vllm:request_success_total", pod="tuned-0", finished_reason="error") > 100
    assert len(TTFT_BUCKETS) == len(m.series(f"{TTFT}_bucket", pod="tuned-0")) - 1


# --- what a warm-up gate can check: vLLM's own endpoints through the pod proxy ---------------

def proxy_get(c: Cluster, pod: str, path: str, port: int = 8000) -> bytes:
    """GET from a pod's port through the API server, the body as it came (the client would
    turn a JSON answer into a Python repr)."""
    return c.core.connect_get_namespaced_pod_proxy_with_path(
        f"{pod}:{port}", NS, path, _preload_content=False).data


def proxy_post(c: Cluster, pod: str, path: str, body: dict) -> tuple[int, dict]:
    """POST to a pod's port through the API server (the client has no body on its connect_*
    calls, so the request is built with the client's own serializer)."""
    method, url, headers, data, _ = c.sim.api.param_serialize(
        "POST", "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}",
        {"namespace": NS, "name": f"{pod}:8000", "path": path},
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body, auth_settings=["BearerToken"])
    response = c.sim.api.call_api(method, url, headers, data)
    response.read()
    return response.status, json.loads(response.data)


def test_v1_models_through_the_pod_proxy_refuses_until_the_model_is_loaded(cluster_factory):
    c = cluster_factory(extra=constant_demand(2))
    c.node(gpus=8)
    c.sim.fault("slow-version", image="vllm/vllm-openai:v0.13.*", load_seconds=240)
    c.pool("new", "new")
    deployment(c, "new", "vllm/vllm-openai:v0.13.0", probe=True)

    def pod_running() -> str | None:
        c.sim.advance(2)
        pods = c.core.list_namespaced_pod(NS, label_selector="app=new").items
        return pods[0].metadata.name if pods and pods[0].status.phase == "Running" else None

    pod = wait_for(pod_running, timeout=30, interval=0.2, message="the new pod Running")
    with pytest.raises(client.ApiException) as err:
        proxy_get(c, pod, "v1/models")
    assert err.value.status == 503  # vLLM is loading its model: nothing listens yet
    assert "connect: connection refused" in json.loads(err.value.body)["message"]

    assert wait_ready_pods(c, "new", 1, step=10) == [pod]
    models = json.loads(proxy_get(c, pod, "v1/models"))
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert proxy_get(c, pod, "health") == b""
    with pytest.raises(client.ApiException) as err:
        proxy_get(c, pod, "v1/models", port=9000)
    assert err.value.status == 503  # nothing on that port


def test_warm_up_requests_through_the_pod_proxy_are_served_cold_and_counted(cluster_factory):
    c = cluster_factory(extra=constant_demand(4))
    c.node(gpus=8)
    c.sim.fault("slow-version", image="vllm/vllm-openai:v0.13.*", load_seconds=30,
                warmup_s=300, cold_ttft_factor=5)
    c.pool("old", "old")
    c.pool("new", "new")
    c.route(MODEL, {"old": 100, "new": 0})  # no traffic to the new version yet
    deployment(c, "old", "vllm/vllm-openai:v0.11.0")
    deployment(c, "new", "vllm/vllm-openai:v0.13.0", probe=True)
    wait_ready_pods(c, "old", 1)
    [pod] = wait_ready_pods(c, "new", 1)

    def warm_up(n: int) -> tuple[float, float]:
        """Send n requests; the TTFT sum and count they added to the pod's own /metrics."""
        before = Scrape(proxy_get(c, pod, "metrics").decode())
        answers = [proxy_post(c, pod, "v1/completions", {"model": MODEL, "prompt": "hello",
                                                         "max_tokens": 64})
                   for _ in range(n)]
        assert all(status == 200 for status, _ in answers)
        assert all(body["usage"]["completion_tokens"] > 0 for _, body in answers)
        after = Scrape(proxy_get(c, pod, "metrics").decode())
        return (after.value(f"{TTFT}_sum") - before.value(f"{TTFT}_sum"),
                after.value(f"{TTFT}_count") - before.value(f"{TTFT}_count"))

    cold_sum, cold_n = warm_up(40)
    assert cold_n == 40  # served and counted by the replica, though the route gives it none
    c.sim.advance(400)
    warm_sum, warm_n = warm_up(40)
    assert cold_sum / cold_n > 2.5 * (warm_sum / warm_n)

    own = Scrape(proxy_get(c, pod, "metrics").decode())
    assert {tuple(sorted(s.labels)) for s in own.series("vllm:num_requests_running")} == {
        ("engine", "model_name")}  # vLLM's own labels; Prometheus adds the pod's
    scraped = c.scrape()
    assert scraped.value("vllm:request_success_total", pod=pod) == 80
    status, body = proxy_post(c, pod, "v1/completions", {"model": "other", "prompt": "x"})
    assert status == 404 and body["type"] == "NotFoundError"
