"""The rollout's reads and writes against simcluster (over HTTP, the official client) and a real
Prometheus scraping it: pools and routes read from the served API versions, a weight split
patched and a concurrent edit refused; analysis windows where a pool with a `bad-version`
fault fails its gates against the old version and a healthy one passes; missing series fail
closed; an older vLLM's metric names read through Prometheus."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpuops.common.errors import ConfigError, KubeInvalid
from gpuops.deployments.services import free_port, host_port
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus
from gpuops.tasks.rollout.gates import Analysis, Status, judge
from gpuops.tasks.rollout.metrics import SeriesSelector, pool_series
from gpuops.tasks.rollout.objects import ApiVersion
from gpuops.tasks.rollout.read_metrics import read_window
from gpuops.tasks.rollout.read_objects import (
    patch_route,
    read_pool_view,
    read_route,
    read_served_apis,
)
from gpuops.tasks.rollout.report import verdict_text
from gpuops.tasks.rollout.weights import WeightSplit, current_split, weight_patch
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(240)

NS = "default"
MODEL = "llama-3-8b"
POOL_GROUP = "inference.networking.k8s.io"
ALPHA = "inference.networking.x-k8s.io"


class Serving:
    """A GPU node and vLLM Deployments, each behind its own InferencePool, made through the
    official client as a user would."""

    def __init__(self, sim) -> None:
        self.sim = sim
        self.core = client.CoreV1Api(sim.api)
        self.apps = client.AppsV1Api(sim.api)
        self.custom = client.CustomObjectsApi(sim.api)
        capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": "8"}
        self.core.create_node({
            "metadata": {"name": "gpu-node-0",
                         "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}]}})

    def version(self, name: str, image: str, replicas: int = 1) -> None:
        labels = {"app": "llama", "version": name}
        self.apps.create_namespaced_deployment(NS, {
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {
                         "metadata": {"labels": labels, "annotations": {
                             "sim.gpuops.io/capacity-rps": "10",
                             "sim.gpuops.io/warmup-seconds": "0"}},
                         "spec": {"containers": [{
                             "name": "vllm", "image": image,
                             "args": ["--served-model-name", MODEL, "--port", "8000"],
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
        self.custom.create_namespaced_custom_object(POOL_GROUP, "v1", NS, "inferencepools", {
            "apiVersion": f"{POOL_GROUP}/v1", "kind": "InferencePool",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": labels}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}}})

    def route(self, weights: dict[str, int]) -> None:
        self.custom.create_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", NS, "httproutes", {
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "llama"},
                "spec": {"parentRefs": [{"name": "inference-gateway"}], "rules": [{
                    "backendRefs": [{"group": POOL_GROUP, "kind": "InferencePool", "name": pool,
                                     "weight": weight} for pool, weight in weights.items()]}]}})

    def wait_ready(self, count: int) -> None:
        def ready() -> bool:
            self.sim.advance(10)  # image pulls and model loads
            pods = self.core.list_namespaced_pod(NS).items
            return len(pods) == count and all(
                any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
                for p in pods)

        wait_for(ready, timeout=60, interval=0.2, message=f"{count} pods Ready")


@pytest.fixture
def serving(sim_factory):
    demand = {"demand": {MODEL: {"baseRps": 20, "peakRps": 20}}}
    return Serving(sim_factory("empty", extra=demand))


def test_a_pool_is_read_with_its_model_server_and_routes_and_its_weights_are_moved(serving):
    serving.version("llama-v1", "vllm/vllm-openai:v0.11.0", replicas=2)
    serving.version("llama-v2", "vllm/vllm-openai:v0.12.0")
    serving.route({"llama-v1": 100})
    serving.wait_ready(3)
    kube = Kube(serving.sim.api)

    apis = read_served_apis(kube)
    assert apis.inference_pool == ApiVersion(POOL_GROUP, "v1")
    assert apis.http_route == ApiVersion("gateway.networking.k8s.io", "v1")
    old = read_pool_view(kube, apis, NS, "llama-v1")
    server = old.model_server()
    assert (server.kind, server.name, server.replicas) == ("Deployment", "llama-v1", 2)
    assert server.images == ("vllm/vllm-openai:v0.11.0",)
    assert len(old.pods) == 2 and all(p.ready for p in old.pods)
    assert old.pool.target_ports == (8000,) and old.pool.endpoint_picker is not None
    [route] = old.routes
    new = read_pool_view(kube, apis, NS, "llama-v2")
    assert new.routes == ()  # no route names it yet

    patch = weight_patch(route, old.pool.ref, new.pool.ref, WeightSplit(99, 1),
                         annotations={"gpuops.io/rollout": "step-1"})
    after = patch_route(kube, apis, route, patch)
    assert current_split(after, old.pool.ref, new.pool.ref) == {0: (99, 1)}
    assert after.annotations["gpuops.io/rollout"] == "step-1"

    # A patch computed from the route as it was before someone else moved the weights is
    # refused by the API server, and the route keeps their edit.
    stale = weight_patch(after, old.pool.ref, new.pool.ref, WeightSplit(95, 5))
    patch_route(kube, apis, after, weight_patch(after, old.pool.ref, new.pool.ref,
                                                WeightSplit(90, 10)))
    with pytest.raises(KubeInvalid):
        patch_route(kube, apis, after, stale)
    assert current_split(read_route(kube, apis, NS, "llama"), old.pool.ref, new.pool.ref) == {
        0: (90, 10)}

    with pytest.raises(ConfigError) as err:
        read_pool_view(kube, apis, NS, "llama-v3", field="new_pool")
    assert err.value.field == "new_pool" and "llama-v1, llama-v2" in str(err.value)


def test_the_older_inference_pool_shape_is_read_where_the_cluster_serves_it(serving):
    serving.custom.create_cluster_custom_object(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"inferencepools.{ALPHA}"},
            "spec": {"group": ALPHA, "scope": "Namespaced",
                     "names": {"plural": "inferencepools", "singular": "inferencepool",
                               "kind": "InferencePool"},
                     "versions": [{"name": "v1alpha2", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    kube = Kube(serving.sim.api)
    wait_for(lambda: ALPHA in kube.api_groups(), timeout=10, message="the CRD served")
    serving.custom.create_namespaced_custom_object(ALPHA, "v1alpha2", NS, "inferencepools", {
        "apiVersion": f"{ALPHA}/v1alpha2", "kind": "InferencePool",
        "metadata": {"name": "legacy"},
        "spec": {"selector": {"app": "legacy"}, "targetPortNumber": 8000,
                 "extensionRef": {"name": "legacy-epp"}}})
    apis = read_served_apis(kube)
    assert apis.inference_pool.version == "v1"  # both served: v1 is preferred
    alpha = dataclasses.replace(apis, inference_pool=ApiVersion(ALPHA, "v1alpha2"))
    pool = read_pool_view(kube, alpha, NS, "legacy").pool
    assert (pool.selector, pool.target_ports) == ({"app": "legacy"}, (8000,))
    assert pool.endpoint_picker is not None and pool.endpoint_picker.name == "legacy-epp"
    assert pool.ref.group == ALPHA


def pods_of(kube: Kube, name: str) -> SeriesSelector:
    selector = pool_series(read_pool_view(kube, read_served_apis(kube), NS, name))
    assert len(selector.pods) == (2 if name == "llama-v1" else 1)
    return selector


def test_a_bad_version_fails_its_gates_against_the_old_version_and_a_good_one_passes(
        serving, prometheus_scraping):
    serving.version("llama-v1", "vllm/vllm-openai:v0.11.0", replicas=2)
    serving.version("llama-v2", "vllm/vllm-openai:v0.12.0")
    serving.version("llama-v3", "vllm/vllm-openai:v0.12.1")
    serving.route({"llama-v1": 50, "llama-v2": 25, "llama-v3": 25})  # 5 req/s per replica
    serving.wait_ready(4)
    serving.sim.fault("bad-version", f"{NS}/llama-v2", ttft_factor=2, error_rate=0.05)
    prom = Prometheus(prometheus_scraping(host_port(serving.sim.url)))
    kube = Kube(serving.sim.api)
    old, bad, good = (pods_of(kube, n) for n in ("llama-v1", "llama-v2", "llama-v3"))
    wait_for(lambda: prom.query(f"vllm:request_success_total{{{bad.matchers()}}}"),
             timeout=30, message="Prometheus scrapes the pools")

    start = datetime.now(UTC)
    for _ in range(12):  # 360 virtual seconds of traffic: ~1,800 requests per new replica
        serving.sim.advance(30)
        time.sleep(0.5)
    time.sleep(1.5)  # the last scrape lands
    end = datetime.now(UTC)
    baseline = read_window(prom, old, start, end)

    verdict = judge(Analysis(), read_window(prom, bad, start, end), baseline)
    assert verdict.status is Status.FAIL, verdict_text(verdict)
    failed = {r.gate.metric: r for r in verdict.failed}
    assert {"error_ratio", "ttft_p90", "ttft_mean"} <= set(failed)
    assert failed["error_ratio"].value == pytest.approx(0.05, abs=0.02)
    assert failed["ttft_mean"].value == pytest.approx(2 * failed["ttft_mean"].baseline, rel=0.2)
    assert verdict.requests is not None and verdict.requests >= 1000
    assert verdict.baseline_requests == pytest.approx(2 * verdict.requests, rel=0.2)

    # Where the scrape config labels series with their pool, that label selects the same.
    by_label = read_window(prom, SeriesSelector(NS, label=("inference_pool", "llama-v2")),
                           start, end)
    assert by_label.requests == verdict.requests

    healthy = judge(Analysis(), read_window(prom, good, start, end), baseline)
    assert healthy.status is Status.PASS, verdict_text(healthy)

    # Pods that expose no vLLM series (or a pool that lost them) fail, never pass.
    silent = read_window(prom, SeriesSelector.of_pods(NS, ["llama-v9-0"]), start, end)
    missing = judge(Analysis(), silent, baseline)
    assert missing.status is Status.FAIL and not any(r.passed for r in missing.results)
    assert "no vllm:request_success_total series" in missing.reason


def exposition(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    """`/metrics` in the text format vLLM's Prometheus endpoint answers with."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    return Handler


def test_an_older_vllms_metric_names_are_read_through_prometheus(prometheus_scraping):
    """A vLLM V1 engine from before the renames (0.8): gpu_cache_usage_perc,
    time_per_output_token_seconds, gpu_prefix_cache_* counters, on its own /metrics."""
    registry = CollectorRegistry()
    labels = {"namespace": NS, "pod": "old-vllm-0", "model_name": MODEL}
    names = list(labels)
    finished = Counter("vllm:request_success", "", [*names, "finished_reason"],
                       registry=registry)
    ttft = Histogram("vllm:time_to_first_token_seconds", "", names, registry=registry,
                     buckets=(0.1, 0.25, 0.5, 1.0))
    tpot = Histogram("vllm:time_per_output_token_seconds", "", names, registry=registry,
                     buckets=(0.01, 0.025, 0.05))
    waiting = Gauge("vllm:num_requests_waiting", "", names, registry=registry)
    kv = Gauge("vllm:gpu_cache_usage_perc", "", names, registry=registry)
    queries = Counter("vllm:gpu_prefix_cache_queries", "", names, registry=registry)
    hits = Counter("vllm:gpu_prefix_cache_hits", "", names, registry=registry)
    for reason in ("stop", "length", "abort"):
        finished.labels(**labels, finished_reason=reason)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), exposition(registry))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stop = threading.Event()

    def serve_traffic() -> None:  # 50 requests per 0.1 s: 2 % aborted, TTFT 0.2 s
        while not stop.wait(0.1):
            finished.labels(**labels, finished_reason="stop").inc(49)
            finished.labels(**labels, finished_reason="abort").inc(1)
            for _ in range(50):
                ttft.labels(**labels).observe(0.2)
                tpot.labels(**labels).observe(0.02)
            waiting.labels(**labels).set(2)
            kv.labels(**labels).set(0.4)
            queries.labels(**labels).inc(1000)
            hits.labels(**labels).inc(250)

    worker = threading.Thread(target=serve_traffic, daemon=True)
    worker.start()
    try:
        prom = Prometheus(prometheus_scraping(f"127.0.0.1:{server.server_port}"))
        pods = SeriesSelector.of_pods(NS, ["old-vllm-0"])
        wait_for(lambda: prom.query(f"vllm:gpu_cache_usage_perc{{{pods.matchers()}}}"),
                 timeout=30, message="Prometheus scrapes the old vLLM")
        start = datetime.now(UTC)
        time.sleep(6)
        window = read_window(prom, pods, start, datetime.now(UTC))
    finally:
        stop.set()
        worker.join(5)
        server.shutdown()
        thread.join(5)
    assert window.names.kv_cache == "vllm:gpu_cache_usage_perc"
    assert window.names.itl == "vllm:time_per_output_token_seconds"
    assert not window.missing, window.missing
    assert window.requests is not None and window.requests > 1000
    assert window.value("error_ratio") == pytest.approx(0.02, abs=0.002)
    assert window.value("ttft_mean") == pytest.approx(0.2)
    assert 0.1 < (window.value("ttft_p90") or 0) <= 0.25  # interpolated inside its bucket
    assert window.value("kv_cache_usage") == pytest.approx(0.4)
    assert window.value("queue_depth") == pytest.approx(2)
    assert window.value("prefix_cache_hit_ratio") == pytest.approx(0.25, abs=0.01)
    assert window.value("itl_mean") == pytest.approx(0.02)
