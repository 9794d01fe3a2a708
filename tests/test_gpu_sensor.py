"""The cluster watcher's GPU side against simcluster and a real Prefect server (and a real
Prometheus for idle GPUs): `gpuops.gpu.stranded` once per stranded-GPU episode, across pod
updates and a watcher restart, never for a capacity shortage or CPU-only pods;
`gpuops.node.gpu-idle` once a node's allocated GPUs have been idle for the configured time;
the gauges on the sensor process's `/metrics`; bad settings named."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prometheus_client.parser import text_string_to_metric_families

from gpuops.common.errors import ConfigError
from gpuops.deployments.services import free_port, host_port, start_cluster_watcher
from gpuops.sensors.cluster_watcher import ClusterWatcher
from gpuops.sensors.emitter import EventSender
from gpuops.sensors.gpu_sensor import GpuSensor, watcher_settings
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus
from tests.helpers import stored_events, wait_for
from tests.test_sim_gpu_faults import all_gpu_pods_bound

pytestmark = pytest.mark.timeout(240)

H100 = "NVIDIA-H100-80GB-HBM3"
SHAPE = f"8-gpu@{H100}"
FAST = {"GPUOPS_WATCHER_STRANDED_AFTER_S": "1", "GPUOPS_WATCHER_GPU_SCAN_INTERVAL_S": "0.2",
        "GPUOPS_WATCHER_GPU_IDLE_POLL_S": "600"}


def h100_job(name: str, gpus: int = 8) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "nodeSelector": {"nvidia.com/gpu.product": H100},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                 "effect": "NoSchedule"}],
                "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def job_pod(v1: client.CoreV1Api, job: str) -> client.V1Pod | None:
    return next(iter(v1.list_namespaced_pod("default", label_selector=f"job-name={job}").items),
                None)


def unschedulable(v1: client.CoreV1Api, job: str) -> bool:
    pod = job_pod(v1, job)
    return pod is not None and any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                                   for c in pod.status.conditions or [])


@pytest.fixture
def default_cluster(sim_factory, monkeypatch):
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GPUOPS_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}")  # none
    sim = sim_factory("default")
    v1 = client.CoreV1Api(sim.api)
    wait_for(lambda: all_gpu_pods_bound(v1), timeout=30, message="the scenario's GPU pods bound")
    return sim


def test_stranded_gpus_are_reported_once_per_episode_across_pod_updates_and_a_restart(
        prefect_server, default_cluster, tmp_path: Path):
    since = datetime.now(UTC)
    sim = default_cluster
    v1, batch = client.CoreV1Api(sim.api), client.BatchV1Api(sim.api)
    kube = Kube(sim.api, cluster_name="test")
    state = tmp_path / "watcher-state.json"
    watcher = ClusterWatcher(kube, state_file=state, workers=1).start()
    try:
        fault = sim.fault("gpu-fragmentation")
        job = fault["job"].split("/")[1]
        [event] = wait_for(lambda: stored_events("gpuops.gpu.stranded", since), timeout=60,
                           message="gpuops.gpu.stranded")
        pod = job_pod(v1, job)
        assert event.resource["prefect.resource.id"] == "k8s.test.cluster._.test"
        assert event.payload["pending_gpu_pods_by_shape"] == {
            SHAPE: [f"default/{pod.metadata.name}"]}
        assert {n: event.payload["free_gpus_by_node"][n] for n in fault["freeGpus"]} == {
            n: float(free) for n, free in fault["freeGpus"].items()}
        assert event.payload["free_gpus_usable"] == 8.0
        assert [r.id for r in event.related] == [f"k8s.test.pod.default.{pod.metadata.name}"]
        # Pod updates while the episode goes on: the pending pod and the fillers change.
        scans = watcher.gpu.scans
        for i in range(5):
            v1.patch_namespaced_pod(pod.metadata.name, "default",
                                    {"metadata": {"labels": {"touched": str(i)}}})
            sim.advance(5)  # the scheduler retries: more FailedScheduling updates
            time.sleep(0.3)
        wait_for(lambda: watcher.gpu.scans >= scans + 5, timeout=30, message="more scans")
    finally:
        watcher.stop()
    # A restarted watcher (same state file) sees the same episode going on.
    watcher = ClusterWatcher(kube, state_file=state, workers=1).start()
    try:
        # 10 scans 0.2 s apart: longer than the 1 s debounce a new episode would wait.
        wait_for(lambda: watcher.gpu.scans >= 10, timeout=30, message="the new watcher's scans")
        assert watcher.gpu.store.stranded is not None and watcher.gpu.store.stranded.reported
        assert watcher.gpu.reported == []
        assert len(stored_events("gpuops.gpu.stranded", since)) == 1

        # The episode ends when the pending pod goes; a new one is a new report.
        batch.delete_namespaced_job(job, "default", propagation_policy="Foreground")
        wait_for(lambda: watcher.gpu.store.stranded is None, timeout=30,
                 message="the episode ended")
        batch.create_namespaced_job("default", h100_job("second-pending"))
        wait_for(lambda: len(stored_events("gpuops.gpu.stranded", since)) == 2, timeout=60,
                 message="the second episode's report")
    finally:
        watcher.stop()
    first, second = sorted(stored_events("gpuops.gpu.stranded", since), key=lambda e: e.occurred)
    assert first.payload["episode"] != second.payload["episode"]
    assert list(second.payload["pending_gpu_pods_by_shape"]) == [SHAPE]


def test_no_stranded_report_for_a_capacity_shortage_or_cpu_only_pods(prefect_server,
                                                                      default_cluster):
    since = datetime.now(UTC)
    sim = default_cluster
    v1, batch = client.CoreV1Api(sim.api), client.BatchV1Api(sim.api)
    # h100 has 16 GPUs free (4 + 4 + 8): three 8-GPU Jobs leave two pending for 8 free GPUs.
    for i in range(3):
        batch.create_namespaced_job("default", h100_job(f"big-{i}"))
    v1.create_namespaced_pod("default", {
        "metadata": {"name": "cpu-hog"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1",
                                 "resources": {"requests": {"cpu": "500"}}}]}})
    wait_for(lambda: sum(unschedulable(v1, f"big-{i}") for i in range(3)) == 2, timeout=30,
             message="two 8-GPU Jobs unschedulable")
    watcher = ClusterWatcher(Kube(sim.api, cluster_name="test"), workers=1).start()
    try:
        def assessed():
            last = watcher.gpu.last
            return last if last is not None and len(last.stranded_pods) == 2 else None

        last = wait_for(assessed, timeout=30, message="the two pending GPU pods assessed")
        assert not last.stranded and "capacity shortage" in last.why
        assert last.pending_by_shape.keys() == {SHAPE}  # the CPU-only pod is no GPU shape
        pending = [job_pod(v1, f"big-{i}") for i in range(3)]
        pending = [p.metadata.name for p in pending if not p.spec.node_name]
        for i in range(5):  # pod updates, for longer than the debounce
            scans = watcher.gpu.scans
            v1.patch_namespaced_pod(pending[0], "default",
                                    {"metadata": {"labels": {"touched": str(i)}}})
            wait_for(lambda: watcher.gpu.scans > scans, timeout=30, message="a scan")  # noqa: B023
            time.sleep(0.3)
        assert not watcher.gpu.last.stranded
    finally:
        watcher.stop()
    assert stored_events("gpuops.gpu.stranded", since) == []


def test_a_node_whose_allocated_gpus_stay_idle_is_reported_once_after_the_set_time(
        prefect_server, sim_factory, prometheus_scraping, monkeypatch):
    since = datetime.now(UTC)
    monkeypatch.setenv("GPUOPS_WATCHER_GPU_IDLE_AFTER_S", "600")
    sim = sim_factory("default")
    v1 = client.CoreV1Api(sim.api)

    def training_running() -> bool:
        sim.advance(30)  # the trainers' image pulls
        pods = v1.list_namespaced_pod("training").items
        return bool(pods) and all(p.status.phase == "Running" for p in pods)

    wait_for(training_running, timeout=60, message="both training Jobs running")
    prometheus = Prometheus(prometheus_scraping(host_port(sim.url)))
    [idle_pod] = sim.fault("gpu-idle", "training/finetune-llama-3-8b")["pods"]
    node = v1.read_namespaced_pod(idle_pod.split("/")[1], "training").spec.node_name
    busy_nodes = {p.spec.node_name for p in v1.list_namespaced_pod("training").items} - {node}

    def reports() -> list:
        return [e for e in stored_events("gpuops.node.gpu-idle", since)
                if e.resource["prefect.resource.id"] == f"k8s.test.node._.{node}"]

    def idle_in_prometheus() -> bool:
        return any(labels.get("Hostname") == node and value == 0 and labels.get("pod")
                   for labels, value in prometheus.query('DCGM_FI_DEV_GPU_UTIL{pod!=""}'))

    wait_for(idle_in_prometheus, timeout=30, message="Prometheus shows the idle GPUs")
    # The sensor's clock is the test's: idle for 599 s is not enough, 600 s is.
    sensor = GpuSensor(cluster="test", sender=EventSender(), stop=threading.Event(),
                       prometheus=prometheus)
    t0 = datetime.now(UTC)
    assert node in sensor.poll_idle(now=t0)
    sensor.poll_idle(now=t0 + timedelta(seconds=599))
    time.sleep(0.5)
    assert reports() == []
    sensor.poll_idle(now=t0 + timedelta(seconds=600))
    sensor.poll_idle(now=t0 + timedelta(seconds=900))  # still idle: no second report
    [event] = wait_for(reports, timeout=30, message="gpuops.node.gpu-idle")
    assert event.payload["allocated_gpus"] == 8 and event.payload["max_gpu_util_pct"] == 0
    assert event.payload["pods"] == [idle_pod]
    assert event.payload["idle_since"] == t0.isoformat()
    assert not busy_nodes & set(sensor.store.idle)  # the busy trainer's node never idles

    # Busy again ends the episode; idle again is a new one, reported after the time again.
    sim.fault("gpu-idle", "training/finetune-llama-3-8b", clear=True)
    wait_for(lambda: not idle_in_prometheus(), timeout=30, message="the GPUs busy again")
    assert node not in sensor.poll_idle(now=t0 + timedelta(seconds=1000))
    sim.fault("gpu-idle", "training/finetune-llama-3-8b")
    wait_for(idle_in_prometheus, timeout=30, message="idle again")
    t1 = t0 + timedelta(seconds=1100)
    sensor.poll_idle(now=t1)
    sensor.poll_idle(now=t1 + timedelta(seconds=600))
    wait_for(lambda: len(reports()) == 2, timeout=30, message="the second idle episode's report")


def metric_values(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_sensor_process_serves_the_gpu_gauges_on_metrics(prefect_server, default_cluster,
                                                             tmp_path: Path):
    sim = default_cluster
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if k.startswith(("GPUOPS_", "PREFECT_"))},
           "KUBECONFIG": str(sim.kubeconfig), "GPUOPS_CLUSTER_NAME": "test",
           "GPUOPS_WATCHER_METRICS_PORT": str(port)}
    watcher = start_cluster_watcher(tmp_path, env=env)
    try:
        sim.fault("gpu-fragmentation")
        url = f"http://127.0.0.1:{port}/metrics"

        def stranded() -> dict | None:
            values = metric_values(url)
            pending = values.get(("gpuops_pending_gpu_pods",
                                  (("cluster", "test"), ("shape", SHAPE))))
            return values if pending == 1 else None

        values = wait_for(stranded, timeout=60, message="a pending 8-GPU pod on /metrics")
        assert values[("gpuops_stranded_gpus", (("cluster", "test"),))] > 0
        assert values[("gpuops_gpu_fragmentation", (("cluster", "test"),))] > 0
    finally:
        watcher.stop()


@pytest.mark.parametrize(("name", "value", "message"), [
    ("GPUOPS_WATCHER_GPU_IDLE_AFTER_S", "-5", "greater than 0"),
    ("GPUOPS_WATCHER_STRANDED_AFTER_S", "soon", "valid number"),
    ("GPUOPS_WATCHER_METRICS_PORT", "70000", "less than or equal to 65535"),
    ("GPUOPS_WATCHER_GPU_IDLE_UTIL_PCT", "150", "less than or equal to 100"),
])
def test_a_bad_watcher_setting_is_refused_naming_it(sim, monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name) as e:
        ClusterWatcher(Kube(sim.api, cluster_name="test"))
    assert message in str(e.value)
    with pytest.raises(ConfigError, match=name):
        watcher_settings()


def test_the_sensor_command_exits_2_with_the_bad_setting_named(sim, tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "gpuops.deployments.cli", "sensor", "cluster"], check=False,
        env={**os.environ, "KUBECONFIG": str(sim.kubeconfig),
             "GPUOPS_WATCHER_GPU_SCAN_INTERVAL_S": "0"},
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "GPUOPS_WATCHER_GPU_SCAN_INTERVAL_S" in result.stderr
    assert "greater than 0" in result.stderr


def test_the_scheduled_scan_tabulates_each_gpu_node_and_sees_the_episode(
        prefect_server, default_cluster, monkeypatch):
    import json

    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from gpuops.deployments.serve import deployments
    from gpuops.flows.gpu_scan import gpu_scan

    sim = default_cluster
    v1 = client.CoreV1Api(sim.api)
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    monkeypatch.setenv("GPUOPS_CLUSTER_NAME", "test")
    fault = sim.fault("gpu-fragmentation")
    wait_for(lambda: unschedulable(v1, fault["job"].split("/")[1]), timeout=30,
             message="the pending Job unschedulable")
    state = asyncio.run(gpu_scan(return_state=True))
    assert state.is_completed(), state.message
    result = state.result()
    assert result["stranded"] and list(result["pending_gpu_pods_by_shape"]) == [SHAPE]

    async def artifacts() -> dict:
        async with get_client() as c:
            found = await c.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
        return {a.key: a for a in found}

    found = asyncio.run(artifacts())
    rows = {r["node"]: r for r in json.loads(found["gpu-scan-nodes"].data)}
    assert {n: rows[n]["free_gpus"] for n in fault["freeGpus"]} == {
        n: float(f) for n, f in fault["freeGpus"].items()}
    assert all(rows[n]["gpu_model"] == H100 and rows[n]["gpus"] == 8 for n in fault["freeGpus"])
    assert "Stranded GPUs: an episode" in found["gpu-scan-summary"].data
    [scan] = [d for d in deployments() if d.flow_name == "gpu-scan"]
    assert scan.schedules and scan.schedules[0].schedule.interval == timedelta(minutes=10)
