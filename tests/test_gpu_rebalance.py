"""The GPU rebalance flow end to end: simcluster over HTTP (its `gpu-fragmentation` episode,
whose known repack empties one node with 2 moves), a real Prefect server, the Slack fake and
the real Bolt receiver with signed clicks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.states import Crashed
from pydantic import ValidationError

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.blocks.rebalance import RebalancePolicy
from gpuops.common.annotations import REBALANCE_RUN, REBALANCE_TAINT
from gpuops.deployments.services import free_port
from gpuops.flows.gpu_rebalance import gpu_rebalance
from gpuops.sensors.slack_receiver import build_receiver, serve_http
from tests import helpers
from tests.helpers import wait_for
from tests.test_approvals import SIGNING_SECRET, Receiver, run_id_of, wait_paused

pytestmark = pytest.mark.timeout(300)

ALICE = "UALICE"
FAULT = "gpuops.io/fault=gpu-fragmentation"
SPEED = 5.0  # the simulated clock: grace periods and image pulls pass 5x faster


@dataclass
class Episode:
    sim: Any
    v1: client.CoreV1Api
    fault: dict
    victim: str
    pending: str  # the pending Job pod's name
    blocks: dict[str, str]
    receiver: Receiver | None = None
    slack: Any = None


def _gpu_pods_bound(v1: client.CoreV1Api) -> bool:
    pods = [p for p in v1.list_pod_for_all_namespaces().items
            if any("nvidia.com/gpu" in ((c.resources.limits or {}) if c.resources else {})
                   for c in p.spec.containers)]
    return bool(pods) and all(p.spec.node_name for p in pods)


def _save_blocks(sim, slack_fake, **rebalance: Any) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = {"cluster_block": f"cluster-{suffix}", "slack_block": f"slack-{suffix}",
             "policy_block": f"policy-{suffix}", "rebalance_block": f"rebalance-{suffix}"}

    async def save() -> None:
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(sim.kubeconfig)
                                ).save(names["cluster_block"], overwrite=True)
        await SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                              base_url=slack_fake.base_url if slack_fake else None,
                              default_channel="#ops").save(names["slack_block"], overwrite=True)
        await ApprovalPolicy(approvers=[ALICE], channel="#ops", timeout_s=180,
                             poll_interval_s=1, expiry_grace_s=60
                             ).save(names["policy_block"], overwrite=True)
        await RebalancePolicy(**{"settle_timeout_s": 120, **rebalance}).save(
            names["rebalance_block"], overwrite=True)

    asyncio.run(save())
    return names


def _receiver(slack_fake) -> Receiver:
    conn = SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                           base_url=slack_fake.base_url)
    port = free_port()
    runner = slack_fake.loop.run(serve_http(build_receiver(conn), "127.0.0.1", port))
    slack_fake.loop.on_stop(runner.cleanup)
    return Receiver(f"http://127.0.0.1:{port}/slack/events")


def episode(sim_factory, slack_fake=None, **rebalance: Any) -> Episode:
    """The default cluster with the gpu-fragmentation fault injected and its Job pending."""
    sim = sim_factory("default", speed=SPEED)
    v1 = client.CoreV1Api(sim.api)
    wait_for(lambda: _gpu_pods_bound(v1), timeout=60, message="the scenario's GPU pods bound")
    fault = sim.fault("gpu-fragmentation")
    job = fault["job"].split("/")[1]

    def pending_pod() -> str | None:
        pods = v1.list_namespaced_pod("default", label_selector=f"job-name={job}").items
        events = pods and [e for e in v1.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={pods[0].metadata.name}").items
            if e.reason == "FailedScheduling"]
        return pods[0].metadata.name if events else None

    pending = wait_for(pending_pod, timeout=60, message="the Job's pod pending")
    blocks = _save_blocks(sim, slack_fake, **rebalance)
    ep = Episode(sim, v1, fault, fault["repack"]["empties"], pending, blocks)
    if slack_fake is not None:
        slack_fake.post("/_fake/usergroups", {"usergroup": "SOPS", "users": []})
        ep.receiver, ep.slack = _receiver(slack_fake), slack_fake
    return ep


class FlowThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(gpu_rebalance(**params, return_state=True))


def _approval_message(ep: Episode) -> dict:
    def find() -> dict | None:
        return next((m for m in ep.slack.messages()
                     if any(b.get("type") == "header" and "Approval needed" in b["text"]["text"]
                            for b in m.get("blocks") or [])), None)
    return wait_for(find, timeout=90, message="the approval request in Slack")


def _fillers(ep: Episode) -> list[client.V1Pod]:
    return [p for p in ep.v1.list_namespaced_pod("default", label_selector=FAULT).items
            if p.metadata.owner_references[0].kind == "ReplicaSet"
            and p.metadata.deletion_timestamp is None]


def _temporary_changes(ep: Episode) -> list[str]:
    """Every rebalance taint, nomination and record still on the cluster."""
    found = [f"taint on {n.metadata.name}" for n in ep.v1.list_node().items
             for t in n.spec.taints or [] if t.key == REBALANCE_TAINT]
    found += [f"record on node {n.metadata.name}" for n in ep.v1.list_node().items
              if REBALANCE_RUN in (n.metadata.annotations or {})]
    for p in ep.v1.list_pod_for_all_namespaces().items:
        if p.status.nominated_node_name:
            found.append(f"nomination of {p.metadata.name}")
        if REBALANCE_RUN in (p.metadata.annotations or {}):
            found.append(f"record on pod {p.metadata.name}")
    return found


def _pending_runs_on(ep: Episode) -> str | None:
    def running() -> str | None:
        ep.sim.advance(5)
        pod = ep.v1.read_namespaced_pod(ep.pending, "default")
        return pod.spec.node_name if pod.status.phase == "Running" else None
    return wait_for(running, timeout=60, message="the pending pod Running")


def _repaired(ep: Episode, fillers_before: list[client.V1Pod]) -> None:
    """The pending pod runs where planned (the emptied node); the moved pods' replacements
    run elsewhere; nothing temporary is left."""
    assert _pending_runs_on(ep) == ep.victim
    moved = {p.metadata.uid for p in fillers_before if p.spec.node_name == ep.victim}
    assert len(moved) == ep.fault["repack"]["moves"] == 2
    now = _fillers(ep)
    assert not moved & {p.metadata.uid for p in now}  # evicted
    assert len(now) == len(fillers_before) and all(p.spec.node_name for p in now)
    assert not any(p.spec.node_name == ep.victim for p in now)  # not back where they were
    assert _temporary_changes(ep) == []


def test_a_stranded_gpu_episode_is_planned_approved_in_slack_and_repaired(
        prefect_server, sim_factory, slack_fake):
    ep = episode(sim_factory, slack_fake)
    fillers = _fillers(ep)
    run = FlowThread(**ep.blocks)

    message = _approval_message(ep)
    text = json.dumps(message["blocks"], ensure_ascii=False)
    assert "GPU rebalance: 2 move(s) to schedule 1 pending pod(s)" in text
    assert f"default/{ep.pending}` on {ep.victim}" in text  # what then gets scheduled
    assert "GPUs freed and put to work: 8" in text and "expected GPU-hours saved" in text
    for pod in fillers:
        if pod.spec.node_name == ep.victim:
            assert f"default/{pod.metadata.name}" in text  # what moves
    wait_paused(run_id_of(message))
    assert ep.receiver.click(message, "gpuops_approve", ALICE)[0] == 200

    state = run.result(timeout=240)
    assert state.is_completed() and state.name == "Completed", state.message
    _repaired(ep, fillers)
    artifacts = asyncio.run(_artifacts(run_id_of(message)))
    plan_map = artifacts["gpu-rebalance-plan"]
    assert f"| `{ep.victim}` |" in plan_map and "★" in plan_map and "↗" in plan_map
    assert "⬜" in plan_map  # the stranded GPUs, white in the picture before
    assert {"gpu-rebalance-moves", "gpu-rebalance-measures", "gpu-rebalance-after"} \
        <= set(artifacts)


async def _artifacts(run_id: str) -> dict[str, str]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as c:
        found = await c.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[uuid.UUID(run_id)])))
    return {a.key: str(a.data) for a in found if a.key}


def _snapshot(ep: Episode) -> dict[str, Any]:
    nodes = {n.metadata.name: (sorted(str(t.to_dict()) for t in n.spec.taints or []),
                               n.spec.unschedulable, sorted(n.metadata.annotations or {}))
             for n in ep.v1.list_node().items}
    pods = {p.metadata.uid: (p.metadata.namespace, p.metadata.name, p.spec.node_name,
                             p.status.nominated_node_name, p.metadata.deletion_timestamp,
                             sorted(str(t.to_dict()) for t in p.spec.tolerations or []),
                             sorted((p.metadata.annotations or {}).items()))
            for p in ep.v1.list_pod_for_all_namespaces().items}
    return {"nodes": nodes, "pods": pods}


def test_a_dry_run_plans_and_reports_and_changes_nothing(prefect_server, sim_factory):
    ep = episode(sim_factory)
    before = _snapshot(ep)

    state = asyncio.run(gpu_rebalance(dry_run=True, **ep.blocks, return_state=True))

    assert state.is_completed() and state.name == "DryRun", state.message
    assert "would move 2 pod(s) and land 1" in state.message
    assert _snapshot(ep) == before
    assert ep.v1.read_namespaced_pod(ep.pending, "default").spec.node_name is None


def test_a_run_killed_mid_execution_is_cleaned_up_by_the_next_run(prefect_server, sim_factory,
                                                                 tmp_path):
    # No approval needed for 2 moves; every pods/status write fails, so the run sits in its
    # retries right after it tainted the node and added the toleration: then it is killed.
    ep = episode(sim_factory, approve_up_to_moves=5)
    ep.sim.fault("api-500", count=100000, method="PATCH", path="/api/v1/namespaces/*/pods/*/status")
    code = ("import asyncio, json, sys; from gpuops.flows.gpu_rebalance import gpu_rebalance; "
            "asyncio.run(gpu_rebalance(**json.loads(sys.argv[1])))")
    killed = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(ep.blocks)],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "killed.log").open("w"),
        start_new_session=True)
    try:
        wait_for(lambda: any(t.key == REBALANCE_TAINT for t in ep.v1.read_node(
            ep.victim).spec.taints or []), timeout=120, message="the run to taint the node")
        wait_for(lambda: REBALANCE_RUN in (ep.v1.read_namespaced_pod(
            ep.pending, "default").metadata.annotations or {}), timeout=30,
            message="the run to record its toleration on the pending pod")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(10)
    ep.sim.fault("api-clear")
    crashed = ep.v1.read_node(ep.victim).metadata.annotations[REBALANCE_RUN]
    assert _temporary_changes(ep)  # what the killed run left
    # What Prefect's heartbeat detection does to a run whose process died.
    asyncio.run(_mark_crashed(crashed))

    fillers = _fillers(ep)
    state = asyncio.run(gpu_rebalance(**ep.blocks, return_state=True))

    assert state.is_completed() and state.name == "Completed", state.message
    assert crashed in state.result()["cleaned_runs"]
    _repaired(ep, fillers)


async def _mark_crashed(run_id: str) -> None:
    async with get_client() as c:
        await c.set_flow_run_state(uuid.UUID(run_id), Crashed(message="process killed"),
                                   force=True)


def test_a_new_pod_taking_the_freed_space_stops_the_run_before_anything_changes(
        prefect_server, sim_factory, slack_fake):
    ep = episode(sim_factory, slack_fake)
    run = FlowThread(**ep.blocks)
    message = _approval_message(ep)
    wait_paused(run_id_of(message))
    # While the approver reads, someone binds a pod to the node the plan empties.
    ep.v1.create_namespaced_pod("default", {
        "metadata": {"name": "intruder"},
        "spec": {"nodeName": ep.victim, "containers": [{
            "name": "main", "image": "busybox:1",
            "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})
    before = _snapshot(ep)
    assert ep.receiver.click(message, "gpuops_approve", ALICE)[0] == 200

    state = run.result(timeout=120)
    assert state.is_completed() and state.name == "Diverged", state.message
    assert f"no longer fits on node {ep.victim}" in state.message
    assert "a new pod took the space (default/intruder)" in state.message
    after = _snapshot(ep)
    assert after["nodes"] == before["nodes"]
    assert set(after["pods"]) == set(before["pods"])  # nobody evicted
    assert _temporary_changes(ep) == []


def _gpu_node(v1: client.CoreV1Api, name: str) -> None:
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    v1.create_node({"metadata": {"name": name, "labels": {"gpuops.io/pool": "h100"}},
                    "status": {"capacity": capacity, "allocatable": capacity,
                               "conditions": [{"type": "Ready", "status": "True"}]}})


def _gpu_pod(name: str, gpus: int, node: str | None = None) -> dict:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox:1", "resources": {
        "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def test_pods_without_a_controller_are_never_evicted(prefect_server, sim_factory):
    sim = sim_factory("empty", speed=SPEED)
    v1 = client.CoreV1Api(sim.api)
    for name in ("gpu-a", "gpu-b"):
        _gpu_node(v1, name)
    # 3 + 3 + 2 free: moving a bare pod would fit the 8-GPU pod, but nothing recreates one.
    v1.create_namespaced_pod("default", _gpu_pod("bare-a", 5, "gpu-a"))
    v1.create_namespaced_pod("default", _gpu_pod("bare-b", 3, "gpu-b"))
    v1.create_namespaced_pod("default", _gpu_pod("big", 8))
    uids = {p.metadata.name: p.metadata.uid for p in v1.list_namespaced_pod("default").items}
    blocks = _save_blocks(sim, None, approve_up_to_moves=5)

    state = asyncio.run(gpu_rebalance(**blocks, return_state=True))

    assert state.is_completed() and state.name == "CannotHelp", state.message
    assert "no candidate may move" in state.message
    now = {p.metadata.name: p for p in v1.list_namespaced_pod("default").items}
    assert {n: p.metadata.uid for n, p in now.items()} == uids
    assert not any(p.metadata.deletion_timestamp for p in now.values())
    assert now["big"].spec.node_name is None


@pytest.mark.parametrize(("values", "field"), [
    ({"max_moves": -1}, "max_moves"),
    ({"move_cost_by_owner_kind": {"Job": -2.0}}, "move_cost_by_owner_kind['Job']"),
    ({"move_cost_by_owner_kind": {"DaemonSet": 1.0}}, "move_cost_by_owner_kind['DaemonSet']"),
    ({"opt_out_annotation": "not an annotation!"}, "opt_out_annotation"),
    ({"settle_timeout_s": 0}, "settle_timeout_s"),
    ({"eviction_attempts": 0}, "eviction_attempts"),
])
def test_bad_policy_values_are_refused_naming_the_field(values, field):
    with pytest.raises(ValidationError) as err:
        RebalancePolicy(**values)
    assert field in str(err.value)


def test_a_bad_policy_document_fails_the_run_naming_the_block_and_field(prefect_server,
                                                                         sim_factory):
    # A name without digits: the message must not echo the bad value, -37.
    name = "bad-" + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:8])
    RebalancePolicy.model_construct(max_moves=-37).save(name)  # as edited in the UI

    state = asyncio.run(gpu_rebalance(rebalance_block=name, return_state=True))

    assert state.is_failed()
    assert f"Block gpuops-rebalance-policy/{name}: max_moves:" in state.message
    assert "-37" not in state.message


def test_the_served_deployment_is_triggered_by_the_watchers_stranded_event_and_a_schedule():
    from gpuops.deployments.serve import deployments
    from gpuops.sensors.emitter import build_event

    [rebalance] = [d for d in deployments(approval_policy="oncall")
                   if d.flow_name == "gpu-rebalance"]
    stranded = build_event(obj="gpu", what="stranded", cluster="prod", kind="Cluster",
                           namespace=None, name="prod", identity="episode-1", payload={})
    pod_event = build_event(obj="pod", what="restarted", cluster="prod", kind="Pod",
                            namespace="default", name="x", identity="r-1", payload={})
    [trigger] = rebalance.triggers
    assert stranded.event in trigger.expect and pod_event.event not in trigger.expect
    assert trigger.match.includes([stranded.resource])
    assert not trigger.match.includes([pod_event.resource])
    assert trigger.parameters == {"event_id": "{{ event.id | string }}"}
    assert rebalance.parameters == {"policy_block": "oncall"}  # the named approval policy
    assert rebalance.schedules  # and every half hour
    assert rebalance.concurrency_limit == 1


def test_an_eviction_a_disruption_budget_refuses_stops_the_run_and_cleans_up(
        prefect_server, sim_factory, slack_fake):
    ep = episode(sim_factory, slack_fake)
    moving = [p for p in _fillers(ep) if p.spec.node_name == ep.victim]
    app = moving[0].metadata.labels["app"]
    policy = client.PolicyV1Api(ep.sim.api)
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": app}, "spec": {"maxUnavailable": 2, "selector": {
            "matchLabels": {"app": app}}}})
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget(
        app, "default").status.disruptions_allowed == 2, timeout=30, message="the PDB counted")
    run = FlowThread(**ep.blocks)
    message = _approval_message(ep)
    wait_paused(run_id_of(message))
    # The budget tightens after the plan was made: the Eviction API answers 429.
    policy.patch_namespaced_pod_disruption_budget(app, "default",
                                                  {"spec": {"maxUnavailable": 0}})
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget(
        app, "default").status.disruptions_allowed == 0, timeout=30, message="the PDB at 0")
    assert ep.receiver.click(message, "gpuops_approve", ALICE)[0] == 200

    state = run.result(timeout=180)
    assert state.is_completed() and state.name == "Blocked", state.message
    assert "refused by a PodDisruptionBudget" in state.message
    assert {p.metadata.uid for p in _fillers(ep)} >= {p.metadata.uid for p in moving}
    assert _temporary_changes(ep) == []
    assert ep.v1.read_namespaced_pod(ep.pending, "default").spec.node_name is None


def _approvals(slack_fake) -> list[dict]:
    return [m for m in slack_fake.messages()
            if any(b.get("type") == "header" and "Approval needed" in b["text"]["text"]
                   for b in m.get("blocks") or [])]


def _preferring(name: str, node: str, gpus: int) -> dict:
    """A one-replica Deployment whose pod prefers `node` (not pinned: a repack may move it)."""
    prefer = {"weight": 100, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}
    return {"metadata": {"name": name}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {
            "affinity": {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [prefer]}},
            "containers": [{"name": "main", "image": "vllm:1", "resources": {
                "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def test_a_budget_refusal_re_plans_once_without_that_pod_and_the_second_plan_lands(
        prefect_server, sim_factory, slack_fake):
    sim = sim_factory("empty", speed=SPEED)
    v1, apps = client.CoreV1Api(sim.api), client.AppsV1Api(sim.api)
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        v1.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                        "status": {"capacity": capacity, "allocatable": capacity,
                                   "conditions": [{"type": "Ready", "status": "True"}]}})
    # Free GPUs 2 + 2 + 3: the 4-GPU pod fits once x leaves gpu-a or y leaves gpu-b.
    for node, gpus in (("gpu-a", 4), ("gpu-b", 4), ("gpu-c", 5)):
        v1.create_namespaced_pod("default", _gpu_pod(f"fill-{node}", gpus, node))
    apps.create_namespaced_deployment("default", _preferring("x", "gpu-a", 2))
    apps.create_namespaced_deployment("default", _preferring("y", "gpu-b", 2))
    wait_for(lambda: _placed(v1), timeout=30, message="x on gpu-a, y on gpu-b")
    v1.create_namespaced_pod("default", _gpu_pod("big", 4))
    blocks = _save_blocks(sim, slack_fake, eviction_attempts=1)
    slack_fake.post("/_fake/usergroups", {"usergroup": "SOPS", "users": []})
    receiver = _receiver(slack_fake)

    run = FlowThread(**blocks)
    first = wait_for(lambda: _approvals(slack_fake), timeout=90,
                     message="the approval request")[0]
    text = json.dumps(first["blocks"])
    moved = "x" if "`default/x-" in text else "y"
    kept, kept_node = ("y", "gpu-b") if moved == "x" else ("x", "gpu-a")
    [refused] = [p.metadata.name for p in v1.list_namespaced_pod(
        "default", label_selector=f"app={moved}").items]
    # While the approval waits, the moved pod's budget goes to zero: its eviction gets 429.
    policy = client.PolicyV1Api(sim.api)
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": moved}, "spec": {"maxUnavailable": 0, "selector": {
            "matchLabels": {"app": moved}}}})
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget(
        moved, "default").status.expected_pods == 1, message="the budget counted")
    wait_paused(run_id_of(first))
    assert receiver.click(first, "gpuops_approve", ALICE)[0] == 200

    # The re-plan moves the other pod; it is a new plan, so it is approved anew.
    second = wait_for(lambda: len(_approvals(slack_fake)) > 1 and _approvals(slack_fake)[1],
                      timeout=90, message="the re-plan's approval request")
    text = json.dumps(second["blocks"])
    assert f"a PodDisruptionBudget refused default/{refused}" in text
    assert f"`default/{kept}-" in text and f"`default/{refused}`" not in text
    wait_paused(run_id_of(second))
    assert receiver.click(second, "gpuops_approve", ALICE)[0] == 200

    state = run.result(timeout=180)
    assert state.is_completed() and state.name == "Completed", state.message
    assert f"re-planned after a PodDisruptionBudget refused default/{refused}" in state.message
    assert state.result()["replan"]["without"] == [f"default/{refused}"]
    pods = {p.metadata.name: p for p in v1.list_namespaced_pod("default").items}
    assert pods["big"].spec.node_name == kept_node
    assert not pods[refused].metadata.deletion_timestamp  # the refused pod stayed
    for node in v1.list_node().items:  # every temporary change removed
        assert not any(t.key == REBALANCE_TAINT for t in (node.spec and node.spec.taints or []))
        assert REBALANCE_RUN not in (node.metadata.annotations or {})


def _placed(v1: client.CoreV1Api) -> bool:
    where = {p.metadata.labels.get("app"): p.spec.node_name
             for p in v1.list_namespaced_pod("default").items
             if p.status.phase == "Running" and p.metadata.labels}
    return where.get("x") == "gpu-a" and where.get("y") == "gpu-b"


def test_a_run_whose_step_fails_removes_its_own_temporary_changes(prefect_server, sim_factory):
    # Every pods/status write fails: the nomination cannot be made after the taint and the
    # toleration were; the run fails and, on its way out, takes its taint and records back.
    ep = episode(sim_factory, approve_up_to_moves=5)
    fillers = {p.metadata.uid for p in _fillers(ep)}
    ep.sim.fault("api-500", count=100000, method="PATCH",
                 path="/api/v1/namespaces/*/pods/*/status")

    state = asyncio.run(gpu_rebalance(**ep.blocks, return_state=True))
    ep.sim.fault("api-clear")

    assert state.is_failed()
    assert _temporary_changes(ep) == []
    assert {p.metadata.uid for p in _fillers(ep)} == fillers  # nothing evicted


def test_the_watchers_stranded_event_starts_the_served_run_which_repairs_after_approval(
        prefect_server, sim_factory, slack_fake, monkeypatch, serve_deployments):
    """As under `gpuops up`: served deployments, settings-default Blocks, an approval from the
    Prefect UI (the default policy's wait is long, so the run suspends and runs again)."""
    from prefect.flow_runs import resume_flow_run

    from gpuops.sensors.emitter import EventSender, build_event

    ep = episode(sim_factory)
    fillers = _fillers(ep)
    cluster = f"served-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("KUBECONFIG", str(ep.sim.kubeconfig))
    monkeypatch.setenv("GPUOPS_CLUSTER_NAME", cluster)
    monkeypatch.setenv("GPUOPS_SLACK_BASE_URL", slack_fake.base_url)
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    serve_deployments()
    wait_for(lambda: asyncio.run(_rebalance_deployment()) is not None, timeout=90,
             interval=0.5, message="the rebalance deployment served")
    event = build_event(obj="gpu", what="stranded", cluster=cluster, kind="Cluster",
                        namespace=None, name=cluster, identity=uuid.uuid4().hex,
                        payload={"stranded_pods": [f"default/{ep.pending}"]})
    EventSender().send([event])

    def triggered() -> Any:
        runs = asyncio.run(_rebalance_runs())
        return next((r for r in runs if r.parameters.get("event_id") == str(event.id)), None)
    run = wait_for(triggered, timeout=90, interval=0.5, message="the triggered run")
    wait_paused(str(run.id))
    resume_flow_run(run.id, run_input={"approved": True, "approver": "alice@ui"})

    def finished() -> Any:
        now = next(r for r in asyncio.run(_rebalance_runs()) if r.id == run.id)
        return now if now.state and now.state.is_final() else None
    done = wait_for(finished, timeout=240, interval=1, message="the run to finish")
    assert done.state.is_completed() and done.state.name == "Completed", done.state.message
    _repaired(ep, fillers)


async def _rebalance_deployment() -> Any:
    from prefect.exceptions import ObjectNotFound

    async with get_client() as c:
        try:
            return await c.read_deployment_by_name("gpu-rebalance/on-stranded")
        except ObjectNotFound:
            return None


async def _rebalance_runs() -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    deployment = await _rebalance_deployment()
    async with get_client() as c:
        return await c.read_flow_runs(deployment_filter=DeploymentFilter(
            id=DeploymentFilterId(any_=[deployment.id])), limit=200)
