"""The cluster watcher against simcluster and a real Prefect server: every restart is
reported once with its evidence, across dropped watches, a forced 410 and a watcher restart."""

from __future__ import annotations

import time
from datetime import UTC
from pathlib import Path

import pytest
from kubernetes import client

from gpuops.sensors.cluster_watcher import ClusterWatcher
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.restarts.evidence import RestartEvidence
from tests.helpers import stored_events, wait_for

pytestmark = pytest.mark.timeout(240)

GPU_NODE = {"metadata": {"name": "gpu-a", "labels": {"gpuops.io/pool": "h100"}},
            "status": {"capacity": {"cpu": "96", "memory": "1Ti", "pods": "110",
                                    "nvidia.com/gpu": "8"},
                       "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110",
                                       "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def make_pod(v1, name: str, env_secret: str = "hunter2-pa55w0rd") -> None:
    v1.create_namespaced_pod("default", {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"nodeName": "gpu-a",
                 "initContainers": [{"name": "fetch-weights", "image": "busybox:1"}],
                 "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                 "env": [{"name": "DB_PASSWORD", "value": env_secret}],
                                 "resources": {"limits": {"nvidia.com/gpu": "1",
                                                          "memory": "16Gi"}}}]}})


def restart_events(since) -> list:
    return stored_events("gpuops.pod.restarted", since)


def restart_count(v1, name: str, container: str = "vllm") -> int:
    pod = v1.read_namespaced_pod(name, "default")
    return next((c.restart_count for c in pod.status.container_statuses or []
                 if c.name == container), 0)


def test_every_restart_is_reported_once_with_its_evidence(prefect_server, sim_factory,
                                                          tmp_path: Path):
    from datetime import datetime
    since = datetime.now(UTC)
    sim = sim_factory("empty", speed=10)
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(GPU_NODE)
    make_pod(v1, "crashy")
    wait_for(lambda: v1.read_namespaced_pod("crashy", "default").status.phase == "Running",
             timeout=30, message="crashy running")
    kube = Kube(sim.api, cluster_name="test")
    watcher = ClusterWatcher(kube, state_file=tmp_path / "reported.json").start()
    try:
        sim.fault("crashloop", "default/crashy", after_seconds=0.2, exit_code=3,
                  error="RuntimeError: boom Bearer abcdefghijklmnopqrstuvwxyz")
        wait_for(lambda: restart_count(v1, "crashy") >= 2, timeout=60, message="two restarts")
        sim.fault("drop-watches")
        sim.advance(30)
        wait_for(lambda: restart_count(v1, "crashy") >= 3, timeout=60, message="three restarts")
    finally:
        watcher.stop()
    # A new watcher (restarted process) with the same state file; a forced 410 meanwhile.
    sim.fault("force-410")
    sim.advance(60)
    wait_for(lambda: restart_count(v1, "crashy") >= 4, timeout=60, message="four restarts")
    sim.fault("recover", "default/crashy")
    watcher = ClusterWatcher(kube, state_file=tmp_path / "reported.json").start()
    try:
        wait_for(lambda: max((e.payload["restart_count"] for e in restart_events(since)),
                             default=0) == restart_count(v1, "crashy"), timeout=60,
                 message="the last restart reported")
        time.sleep(1)  # anything reported twice would arrive now
    finally:
        watcher.stop()
    final = restart_count(v1, "crashy")
    events = [e for e in restart_events(since) if e.payload["container"] == "vllm"]
    counts = [e.payload["restart_count"] for e in events]
    assert len(counts) == len(set(counts)), f"a restart was reported twice: {counts}"
    assert max(counts) == final
    # Every restart is either reported with evidence or counted as missed (no log left).
    assert len(counts) + sum(e.payload["restarts_missed"] for e in events) == final
    evidence = RestartEvidence.model_validate(max(events, key=lambda e: e.payload[
        "restart_count"]).payload)
    assert evidence.container == "vllm" and evidence.container_kind == "app"
    assert evidence.last_state.terminated and evidence.last_state.terminated.exit_code == 3
    assert "RuntimeError: boom" in evidence.previous_log
    for event in events:
        assert "abcdefghijklmnopqrstuvwxyz" not in str(event.payload)
        assert "hunter2-pa55w0rd" not in str(event.payload)
    assert evidence.workload.kind == "Pod" and evidence.node == "gpu-a"
    assert events[-1].resource["prefect.resource.id"] == "k8s.test.pod.default.crashy"


def test_an_evicted_pod_is_reported_once_across_updates_and_a_watcher_restart(tmp_path: Path):
    """A one-off trigger (pod failed, restartCount 0) is remembered like a restart is."""
    from kubernetes import client as k8s

    from gpuops.tasks.restarts.evidence import ContainerState, Workload

    evicted = {"metadata": {"name": "ev", "namespace": "default", "uid": "u-1"},
               "spec": {"containers": [{"name": "main"}]},
               "status": {"phase": "Failed", "reason": "Evicted",
                          "containerStatuses": [{"name": "main", "restartCount": 0,
                                                 "state": {"terminated": {"exitCode": 137}}}]}}
    sent: list = []

    class Sender:
        def send(self, events, stop=None):
            sent.extend(events)

    def fake_capture(restart, pod, observed_at):
        return RestartEvidence(cluster="t", namespace="default", pod="ev", pod_uid="u-1",
                               container="main", restart_count=0, trigger=restart.trigger,
                               trigger_reason=restart.reason, last_state=ContainerState(),
                               workload=Workload(kind="Pod", name="ev", namespace="default"),
                               observed_at=observed_at, captured_at=observed_at)

    def new_watcher() -> ClusterWatcher:
        w = ClusterWatcher(Kube(k8s.ApiClient(), cluster_name="t"),
                           state_file=tmp_path / "reported.json", sender=Sender())
        w.capture.capture = fake_capture  # type: ignore[method-assign]
        return w

    def deliver(w: ClusterWatcher) -> None:  # what the worker and delivery threads do
        while not w._queue.empty():
            w._capture(*w._queue.get_nowait())
        outgoing = []
        while not w._outbox.empty():
            outgoing.append(w._outbox.get_nowait())
        if outgoing:
            w._send(outgoing)

    watcher = new_watcher()
    for _ in range(3):  # later updates of the same pod
        watcher._detect(evicted)
        deliver(watcher)
    restarted = new_watcher()
    restarted._on_pod_relist([evicted])  # a restarted watcher relists
    deliver(restarted)
    assert [e.payload["trigger"] for e in sent] == ["pod-failed"]


def test_the_watcher_forgets_deleted_pods_once_their_restarts_are_reported(
        prefect_server, sim_factory, tmp_path: Path):
    """Its state stays as big as the cluster: a deleted pod is dropped after its last restart
    is reported, on the DELETED event or, for a pod deleted while no watcher ran, on relist."""
    sim = sim_factory("empty", speed=10)
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(GPU_NODE)
    make_pod(v1, "doomed")
    make_pod(v1, "doomed-later")
    for name in ("doomed", "doomed-later"):
        wait_for(lambda n=name: v1.read_namespaced_pod(n, "default").status.phase == "Running",
                 timeout=30, message=f"{name} running")
    uids = {n: v1.read_namespaced_pod(n, "default").metadata.uid
            for n in ("doomed", "doomed-later")}
    state = tmp_path / "reported.json"
    watcher = ClusterWatcher(Kube(sim.api, cluster_name="test"), state_file=state).start()
    try:
        for name in uids:
            sim.fault("crashloop", f"default/{name}", after_seconds=0.2, exit_code=3)
        wait_for(lambda: set(uids.values()) <= watcher.reported.pod_uids(), timeout=60,
                 message="both pods' restarts reported")
        v1.delete_namespaced_pod("doomed", "default", grace_period_seconds=0)
        wait_for(lambda: uids["doomed"] not in watcher.reported.pod_uids(), timeout=30,
                 message="the deleted pod forgotten")
        assert uids["doomed-later"] in watcher.reported.pod_uids()
    finally:
        watcher.stop()
    v1.delete_namespaced_pod("doomed-later", "default", grace_period_seconds=0)
    wait_for(lambda: not v1.list_namespaced_pod("default").items, timeout=30,
             message="the pod gone")
    watcher = ClusterWatcher(Kube(sim.api, cluster_name="test"), state_file=state).start()
    try:
        wait_for(lambda: watcher.pods.relists >= 1 and not watcher.reported.pod_uids(),
                 timeout=30, message="the pod deleted while down forgotten on relist")
    finally:
        watcher.stop()
