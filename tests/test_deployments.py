"""The served deployments as `gpuops up` runs them: an event trigger starts the restart
diagnostics deployment, and its run posts to Slack (the path a user relies on)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kubernetes import client

from gpuops.sensors.cluster_watcher import ClusterWatcher
from gpuops.tasks.clients.kube import Kube
from tests.helpers import wait_for
from tests.test_restart_diagnostics import node, pod

pytestmark = pytest.mark.timeout(240)


def test_a_restart_event_triggers_the_deployment_and_reaches_slack(
        sim_factory, slack_fake, tmp_path: Path, monkeypatch, serve_deployments):
    sim = sim_factory("empty", speed=10)
    # What `gpuops up` exports for the flow runs it serves.
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    name = f"sim-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GPUOPS_CLUSTER_NAME", name)
    monkeypatch.setenv("GPUOPS_SLACK_BASE_URL", slack_fake.base_url)
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    serve_deployments()  # `serve_all()` in its own process, exactly as `gpuops up` runs it
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node("gpu-1"))
    v1.create_namespaced_pod("default", pod("served"))
    wait_for(lambda: v1.read_namespaced_pod("served", "default").status.phase == "Running",
             timeout=30, message="pod running")
    watcher = ClusterWatcher(Kube(sim.api, cluster_name=name),
                             state_file=tmp_path / "r.json").start()
    try:
        sim.fault("cuda-oom", "default/served", after_seconds=0.3)
        wait_for(lambda: any("CUDA out of memory" in (m.get("text") or "")
                             for m in slack_fake.messages()), timeout=120, interval=1,
                 message="the triggered run's Slack message")
    finally:
        watcher.stop()
