"""The shipped runbooks that react to, or act on, what other gpuops jobs see, end to end
against simcluster: quarantine-node-on-xid from an injected Xid through restart diagnostics
and the runbook's trigger."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run

from gpuops.sensors.cluster_watcher import ClusterWatcher
from gpuops.tasks.clients.kube import Kube
from tests import test_restart_diagnostics as restarts
from tests.helpers import wait_for
from tests.test_cluster_watcher import restart_events

pytestmark = pytest.mark.timeout(300)


async def _deployed(name: str) -> bool:
    from prefect.exceptions import ObjectNotFound

    async with get_client() as c:
        try:
            await c.read_deployment_by_name(name)
        except ObjectNotFound:
            return False
    return True


async def _paused(run_id: str) -> bool:
    async with get_client() as c:
        run = await c.read_flow_run(uuid.UUID(run_id))
    return bool(run.state and run.state.is_paused())


async def _state(run_id: str) -> Any:
    async with get_client() as c:
        return (await c.read_flow_run(uuid.UUID(run_id))).state


async def _artifact(run_id: str) -> str:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as c:
        found = await c.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[uuid.UUID(run_id)])))
    return "\n".join(str(a.data) for a in found)


def _approval_request(slack_fake, title: str) -> dict | None:
    return next((m for m in slack_fake.messages() if "Approval needed" in json.dumps(
        m.get("blocks")) and title in json.dumps(m.get("blocks"))), None)


def _run_id_of(request: dict) -> str:
    return json.loads(next(e["value"] for b in request["blocks"] if b["type"] == "actions"
                           for e in b["elements"]))["flow_run_id"]


@pytest.mark.timeout(600)  # the watcher, restart diagnostics and `serve_all`, on 2 cores
def test_a_hardware_xid_quarantines_the_node_and_asks_to_drain_it(
        prefect_server, sim_factory, slack_fake, serve_deployments, monkeypatch,
        tmp_path: Path):
    """An Xid 79 injected on a GPU pod: the watcher reports the restart, restart diagnostics
    classifies it as a hardware Xid and says so about the node; the shipped runbook's
    trigger runs it: the node is tainted and cordoned before anyone is asked, the approval
    asks to drain it, and the drain follows the yes."""
    sim = sim_factory("empty", speed=10)
    sim.name = restarts.unique_cluster()
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(restarts.node("gpu-bad"))
    v1.create_node(restarts.node("gpu-good"))
    v1.create_namespaced_pod("default", restarts.pod("xid", "gpu-bad"))
    watcher = ClusterWatcher(Kube(sim.api, cluster_name=sim.name),
                             state_file=tmp_path / "reported.json").start()
    try:
        # What `gpuops up` exports for the flow runs it serves.
        monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
        monkeypatch.setenv("GPUOPS_SLACK_BASE_URL", slack_fake.base_url)
        monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
        serve_deployments()
        wait_for(lambda: asyncio.run(_deployed("quarantine-node-on-xid/runbook")),
                 timeout=90, message="the runbook's served deployment")
        wait_for(lambda: v1.read_namespaced_pod("xid", "default").status.phase == "Running",
                 timeout=60, message="the pod running")
        started = datetime.now(UTC)
        sim.fault("gpu-xid", "default/xid", xid=79, after_seconds=0.5)
        wait_for(lambda: any(e.payload["pod"] == "xid" for e in restart_events(started)
                             if e.payload["cluster"] == sim.name),
                 timeout=120, interval=1, message="the restart event")
        restarts.run_flow(restarts.save_blocks(sim, slack_fake, sim.name))
        wait_for(lambda: (spec := v1.read_node("gpu-bad").spec).unschedulable and spec.taints,
                 timeout=120, interval=1, message="the node quarantined")
        spec = v1.read_node("gpu-bad").spec
        assert [(t.key, t.value, t.effect) for t in spec.taints] == [
            ("gpuops.io/quarantine", "xid", "NoSchedule")]
        title = "Node gpu-bad quarantined (GPU Xid 79): drain it?"
        request = wait_for(lambda: _approval_request(slack_fake, title), timeout=90,
                           message="the approval request")
        shown = json.dumps(request["blocks"])
        assert "after GPU Xid 79 (pod default/xid)" in shown  # the event's Xid and pod
        assert "evict pod default/xid from node gpu-bad" in shown  # the plan it asks for
        run_id = _run_id_of(request)
        wait_for(lambda: asyncio.run(_paused(run_id)), timeout=60, message="the pause")
        resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "alice"})
        seen: list[Any] = []
        try:
            wait_for(lambda: seen.append(asyncio.run(_state(run_id))) or seen[-1].is_final(),
                     timeout=180, interval=1, message="the runbook run to end")
        except AssertionError:
            raise AssertionError(f"the runbook run is {seen[-1]!r}") from None
        state = seen[-1]
        assert state.name == "Completed", state.message
        assert v1.read_node("gpu-bad").spec.unschedulable
        assert not getattr(v1.read_node("gpu-good").spec, "unschedulable", False)
        # Every restart of the crash loop was an event and a run; one asked.
        assert len([m for m in slack_fake.messages() if "Approval needed" in json.dumps(
            m.get("blocks")) and title in json.dumps(m.get("blocks"))]) == 1
        drained = [m["text"] for m in slack_fake.messages()
                   if m.get("text", "").startswith("Drained gpu-bad")]
        assert drained == ["Drained gpu-bad (GPU Xid 79): 1 pod(s) evicted."], (
            drained, asyncio.run(_artifact(run_id)))
    finally:
        watcher.stop()


def _approve_when_asked(slack_fake, title: str) -> None:
    request = wait_for(lambda: _approval_request(slack_fake, title), timeout=90,
                       message="the approval request")
    run_id = _run_id_of(request)
    wait_for(lambda: asyncio.run(_paused(run_id)), timeout=60, message="the pause")
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "alice"})


class _ReadySampler:
    """The fewest Ready pods of an app seen while a run goes on (polled: a dip it misses
    cannot fail the test, one it sees does)."""

    def __init__(self, stack: Any, app: str) -> None:
        import threading

        self.stack, self.app, self.fewest = stack, app, stack.ready_pods(app)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.fewest = min(self.fewest, self.stack.ready_pods(self.app))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.fewest


def test_restart_inference_pool_replaces_each_pod_only_after_the_last_one_is_warm(
        prefect_server, sim_factory, slack_fake):
    from tests import helpers
    from tests.serving_rollout.stack import MODEL, NS, SPEED, Stack
    from tests.test_runbook_engine import _blocks, _flow, _run

    stack = Stack(sim_factory("empty", speed=SPEED))
    stack.deploy(replicas=2)
    before = {p.metadata.name for p in stack.core.list_namespaced_pod(
        NS, label_selector=f"app={MODEL}").items}
    flow = _flow("restart-inference-pool")
    blocks = _blocks(stack.sim, slack_fake)
    dry = _run(flow, pool=f"{NS}/{MODEL}", dry_run=True, **blocks)
    assert dry.name == "DryRun", dry.message
    assert {p.metadata.name for p in stack.core.list_namespaced_pod(
        NS, label_selector=f"app={MODEL}").items} == before  # the plan changed nothing

    class Run(helpers.FlowThread):
        def run_flow(self, **params: Any) -> Any:
            return _run(flow, **params)

    sampler = _ReadySampler(stack, MODEL)
    run = Run(pool=f"{NS}/{MODEL}", min_ready=1, timeout="5m", channel="#ops", **blocks)
    request = wait_for(lambda: _approval_request(slack_fake, f"Restart pool {NS}/{MODEL}"),
                       timeout=90, message="the approval request")
    shown = json.dumps(request["blocks"])
    for pod in before:  # the plan names every pod it restarts
        assert f"evict pod {NS}/{pod}" in shown
    _approve_when_asked(slack_fake, f"Restart pool {NS}/{MODEL}")
    state = run.result(300)
    fewest = sampler.stop()
    assert state.name == "Completed", state.message
    after = {p.metadata.name for p in stack.core.list_namespaced_pod(
        NS, label_selector=f"app={MODEL}").items if p.metadata.deletion_timestamp is None}
    assert not after & before and stack.ready_pods(MODEL) == 2
    assert fewest >= 1  # min_ready held throughout
    [told] = [m["text"] for m in slack_fake.messages()
              if m.get("text", "").startswith(f"Restarted pool {NS}/{MODEL}")]
    assert "2 pod(s) replaced" in told and all(p in told for p in after)
    # Each replacement was sent warm-up requests before the next pod went: its own vLLM
    # counts them.
    for pod in after:
        metrics = stack.core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod}:8000", NS, "metrics")
        assert "vllm:time_to_first_token_seconds_count" in metrics
