"""Runbooks run as Prefect flows against simcluster over HTTP, with a real Prefect server and
the Slack fake: the dry-run plan from live state, the shipped drain runbook end to end with
an approval from the UI form, compensation in reverse order, preconditions, parameters."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run
from prefect.utilities.callables import parameter_schema

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.deployments.serve import served_deployment_names
from gpuops.flows.run_runbook import load_runbooks, runbook_deployments, runbook_flow
from gpuops.runbooks.arguments import ParametersInvalid, bind_values
from gpuops.runbooks.bindings import flows as flow_bindings
from gpuops.runbooks.bindings import load_bindings
from gpuops.runbooks.catalog import CATALOG
from gpuops.runbooks.journal import PREFIX, read_journal
from gpuops.runbooks.loader import load_texts, shipped_files
from tests import helpers
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(240)

GPU = "nvidia.com/gpu"


def _node(v1: client.CoreV1Api, name: str, gpus: int = 8) -> None:
    allocatable = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: str(gpus)}
    v1.create_node({"metadata": {"name": name, "labels": {"gpuops.io/pool": "h100"}},
                    "status": {"capacity": allocatable, "allocatable": allocatable,
                               "conditions": [{"type": "Ready", "status": "True"}]}})


def _pod(v1: client.CoreV1Api, name: str, node: str, labels: dict[str, str] | None = None
         ) -> None:
    v1.create_namespaced_pod("default", {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox:1"}]}})


def _blocks(sim, slack_fake=None) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = {"cluster_block": f"rb-cluster-{suffix}"}

    async def save() -> None:
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(sim.kubeconfig)
                                ).save(names["cluster_block"], overwrite=True)
        if slack_fake is not None:
            names["slack_block"], names["policy_block"] = f"rb-slack-{suffix}", \
                f"rb-policy-{suffix}"
            await SlackConnection(bot_token="xoxb-test-token", signing_secret="s",
                                  base_url=slack_fake.base_url, default_channel="#ops"
                                  ).save(names["slack_block"], overwrite=True)
            await ApprovalPolicy(channel="#ops", timeout_s=120, poll_interval_s=1,
                                 expiry_grace_s=60).save(names["policy_block"], overwrite=True)

    asyncio.run(save())
    return names


@pytest.fixture
def cluster(prefect_server, sim) -> tuple[Any, client.CoreV1Api, client.PolicyV1Api]:
    """gpu-1 with two pods, one of them under a budget that allows no disruption; gpu-2
    with 8 free GPUs."""
    v1, policy = client.CoreV1Api(sim.api), client.PolicyV1Api(sim.api)
    _node(v1, "gpu-1")
    _node(v1, "gpu-2")
    _pod(v1, "worker-0", "gpu-1")
    _pod(v1, "guarded-0", "gpu-1", {"app": "guarded"})
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    # The budget counts its pod healthy once it runs: only then is a dry-run eviction
    # refused for the budget (a pod not yet running may be evicted).
    wait_for(lambda: (policy.read_namespaced_pod_disruption_budget("guarded", "default")
                      .status or client.V1PodDisruptionBudgetStatus(
                          current_healthy=0, desired_healthy=0, disruptions_allowed=0,
                          expected_pods=0)).current_healthy == 1,
             timeout=30, message="the budget to count its pod healthy")
    return sim, v1, policy


def _run(flow: Any, **params: Any) -> Any:
    return asyncio.run(flow(**params, return_state=True))


def _flow(name: str, *texts: tuple[str, str]) -> Any:
    registry = load_texts(texts, known=[(str(p), p.read_text()) for p in shipped_files()]) \
        if texts else load_runbooks()
    if name not in registry:  # a test runbook may run a shipped one
        registry = load_texts([*texts, *((str(p), p.read_text()) for p in shipped_files())])
    return runbook_flow(registry.get(name), registry)


def _cordoned(v1: client.CoreV1Api, node: str) -> bool:
    spec = v1.read_node(node).spec
    return bool(spec and spec.unschedulable)


def _terminating(v1: client.CoreV1Api, name: str) -> bool:
    try:
        return v1.read_namespaced_pod(name, "default").metadata.deletion_timestamp is not None
    except client.ApiException as e:
        return e.status == 404


async def _task_run_names(state: Any) -> list[str]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    async with get_client() as c:
        runs = await c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(
            any_=[state.state_details.flow_run_id])), sort=TaskRunSort.EXPECTED_START_TIME_ASC)
    return [r.name for r in runs]


async def _artifact_of(state: Any) -> str:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    run_id = state.state_details.flow_run_id
    async with get_client() as c:
        artifacts = await c.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
    return next(a.data for a in artifacts if a.type == "markdown"
                and "# Runbook" in str(a.data))


def test_a_dry_run_plans_the_drain_from_live_state_and_changes_nothing(cluster):
    sim, v1, _ = cluster
    state = _run(_flow("drain-gpu-node"), node="gpu-1", dry_run=True, **_blocks(sim))
    assert state.name == "DryRun", state.message
    assert not _cordoned(v1, "gpu-1")
    assert not _terminating(v1, "worker-0") and not _terminating(v1, "guarded-0")
    plan = asyncio.run(_artifact_of(state))
    assert "- cordon node gpu-1" in plan
    assert "- evict pod default/worker-0 from node gpu-1" in plan
    assert "evict pod default/guarded-0" not in plan
    # The API server's own answer to the eviction sent as a dry run, and the budget's name.
    assert "! pod default/guarded-0 would stay: Cannot evict pod as it would violate the " \
        "pod's disruption budget. (budget guarded)" in plan
    # The last step's message is rendered from the drain's predicted output.
    assert "Drained gpu-1 (maintenance): 1 pod(s) evicted, 1 kept by disruption" in plan


def test_a_dry_run_counts_a_budget_down_across_the_nodes_pods(prefect_server, sim):
    """Each eviction alone would pass the server's dry run; together they exceed the
    budget, and the plan says which pod would stay."""
    v1, policy = client.CoreV1Api(sim.api), client.PolicyV1Api(sim.api)
    _node(v1, "gpu-1")
    _node(v1, "gpu-2")
    for i in range(2):
        _pod(v1, f"replica-{i}", "gpu-1", {"app": "serving"})
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "serving"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serving"}}}})
    wait_for(lambda: (policy.read_namespaced_pod_disruption_budget("serving", "default")
                      .status or client.V1PodDisruptionBudgetStatus(
                          current_healthy=0, desired_healthy=0, disruptions_allowed=0,
                          expected_pods=0)).disruptions_allowed == 1,
             timeout=30, message="the budget to allow one disruption")
    state = _run(_flow("drain-gpu-node"), node="gpu-1", dry_run=True, **_blocks(sim))
    plan = asyncio.run(_artifact_of(state))
    assert "- evict pod default/replica-0 from node gpu-1" in plan
    assert "! pod default/replica-1 would stay: disruption budget serving allows no more " \
        "evictions" in plan


def test_the_shipped_drain_runbook_runs_end_to_end_after_approval(cluster, slack_fake):
    sim, v1, _ = cluster
    blocks = _blocks(sim, slack_fake)
    flow = _flow("drain-gpu-node")

    class Run(helpers.FlowThread):
        def run_flow(self, **params: Any) -> Any:
            return _run(flow, **params)

    run = Run(node="gpu-1", reason="Xid 79 on GPU 3", channel="#ops", wait="30s", **blocks)
    request = wait_for(lambda: next((m for m in slack_fake.messages()
                                     if "Approval needed" in json.dumps(m.get("blocks"))),
                                    None), timeout=60, message="the approval request")
    shown = json.dumps(request["blocks"])
    assert "evict pod default/worker-0 from node gpu-1" in shown  # the plan is shown
    run_id = json.loads(next(e["value"] for b in request["blocks"] if b["type"] == "actions"
                             for e in b["elements"]))["flow_run_id"]
    wait_for(lambda: asyncio.run(_paused(run_id)), timeout=60, message="the pause")
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "alice"})
    state = run.result(180)
    assert state.is_completed() and state.name == "Completed", state.message
    assert _cordoned(v1, "gpu-1") and _terminating(v1, "worker-0")
    assert not _terminating(v1, "guarded-0")  # its budget allows no disruption
    told = [m for m in slack_fake.messages() if m.get("text", "").startswith("Drained gpu-1")]
    assert told and "1 pod(s) evicted" in told[0]["text"] and "1 kept" in told[0]["text"]
    artifact = asyncio.run(_artifact_of(state))
    assert "Approved by alice." in artifact
    assert "| cordon | `cordon-node(node='gpu-1')` | done |" in artifact


async def _paused(run_id: str) -> bool:
    async with get_client() as c:
        run = await c.read_flow_run(uuid.UUID(run_id))
    return bool(run.state and run.state.is_paused())


def test_a_no_stops_the_run_before_anything_changes(cluster, slack_fake):
    sim, v1, _ = cluster
    blocks = _blocks(sim, slack_fake)
    flow = _flow("drain-gpu-node")

    class Run(helpers.FlowThread):
        def run_flow(self, **params: Any) -> Any:
            return _run(flow, **params)

    run = Run(node="gpu-1", **blocks)
    request = wait_for(lambda: next((m for m in slack_fake.messages()
                                     if "Approval needed" in json.dumps(m.get("blocks"))),
                                    None), timeout=60, message="the approval request")
    run_id = json.loads(next(e["value"] for b in request["blocks"] if b["type"] == "actions"
                             for e in b["elements"]))["flow_run_id"]
    wait_for(lambda: asyncio.run(_paused(run_id)), timeout=60, message="the pause")
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": False, "approver": "bob",
                                                  "comment": "not now"})
    state = run.result(120)
    assert state.name == "NotApproved" and "bob: not now" in state.message
    assert not _cordoned(v1, "gpu-1") and not _terminating(v1, "worker-0")


def test_a_plan_that_drifted_while_waiting_for_approval_voids_it(cluster, slack_fake):
    sim, v1, _ = cluster
    blocks = _blocks(sim, slack_fake)
    flow = _flow("drain-gpu-node")

    class Run(helpers.FlowThread):
        def run_flow(self, **params: Any) -> Any:
            return _run(flow, **params)

    run = Run(node="gpu-1", **blocks)
    request = wait_for(lambda: next((m for m in slack_fake.messages()
                                     if "Approval needed" in json.dumps(m.get("blocks"))),
                                    None), timeout=60, message="the approval request")
    run_id = json.loads(next(e["value"] for b in request["blocks"] if b["type"] == "actions"
                             for e in b["elements"]))["flow_run_id"]
    wait_for(lambda: asyncio.run(_paused(run_id)), timeout=60, message="the pause")
    _pod(v1, "late-0", "gpu-1")  # the drain would now evict a pod the approver never saw
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "alice"})
    state = run.result(120)
    assert state.name == "PlanChanged", state.message
    assert "now also: evict pod default/late-0 from node gpu-1" in state.message
    assert not _cordoned(v1, "gpu-1") and not _terminating(v1, "worker-0")


FAILING = """\
name: cordon-taint-then-fail
parameters:
  node: {type: node, required: true}
steps:
  - name: cordon
    action: cordon-node
    args: {node: "{{ node }}"}
    undo: {action: uncordon-node, args: {node: "{{ node }}"}}
  - name: taint
    action: taint-node
    args: {node: "{{ node }}", key: gpuops.io/quarantine, value: xid}
    undo: {action: untaint-node, args: {node: "{{ node }}", key: gpuops.io/quarantine, value: xid}}
  - name: empty
    action: wait-until
    args: {check: node-drained, args: {node: "{{ node }}"}, timeout: 1s, interval: 1s}
    on_failure:
      - name: mark_failure
        action: taint-node
        args: {node: gpu-2, key: gpuops.io/failed, value: "{{ 'wait' if 'WaitTimedOut' in error else 'other' }}"}
  - name: never
    action: cordon-node
    args: {node: gpu-2}
"""


def test_a_failing_step_runs_its_on_failure_then_undoes_the_done_steps_last_first(cluster):
    sim, v1, _ = cluster
    state = _run(_flow("cordon-taint-then-fail", ("failing.yaml", FAILING)), node="gpu-1",
                 **_blocks(sim))
    assert state.is_failed()
    assert "step empty: WaitTimedOut: node-drained did not hold within 1 s" in state.message
    spec = v1.read_node("gpu-1").spec
    assert not (spec and (spec.unschedulable or spec.taints))  # both undone
    assert not _cordoned(v1, "gpu-2")  # the step after the failure never ran
    # Its on_failure step ran first, reading the error; it has no undo, so it stays.
    assert [(t.key, t.value) for t in v1.read_node("gpu-2").spec.taints] == [
        ("gpuops.io/failed", "wait")]
    artifact = asyncio.run(_artifact_of(state))
    steps = artifact.split("## Steps", 1)[1]
    rows = [line.split("|")[1].strip() for line in steps.splitlines()
            if line.startswith("| ") and "`" in line]
    assert rows == ["cordon", "taint", "empty", "mark_failure", "undo-taint", "undo-cordon"]
    assert asyncio.run(_task_run_names(state)) == [  # one task run per step
        "cordon", "taint", "empty", "mark_failure", "undo-taint", "undo-cordon"]
    # Compensated as it went: no journal is left for `recover`.
    assert asyncio.run(read_journal(str(state.state_details.flow_run_id))) is None


def test_a_precondition_that_does_not_hold_stops_the_run_before_any_step(cluster):
    sim, v1, _ = cluster
    _node(v1, "cpu-1", gpus=0)
    state = _run(_flow("drain-gpu-node"), node="cpu-1", **_blocks(sim))
    assert state.is_failed()
    assert "precondition-failed: node-has-gpus: node cpu-1 has 0 allocatable GPU(s)" in \
        state.message
    assert not _cordoned(v1, "cpu-1")


def test_a_later_step_of_a_real_run_reads_an_earlier_steps_output(cluster):
    sim, v1, _ = cluster
    text = """\
name: cordon-then-report
parameters: {node: {type: node, required: true}}
steps:
  - {name: cordon, action: cordon-node, args: {node: "{{ node }}"}}
  - name: again
    action: cordon-node
    when: not steps.cordon.changed
    args: {node: gpu-2}
"""
    flow = _flow("cordon-then-report", ("r.yaml", text))
    assert _run(flow, node="gpu-1", **_blocks(sim)).is_completed()
    assert _cordoned(v1, "gpu-1") and not _cordoned(v1, "gpu-2")  # changed: `again` skipped
    assert _run(flow, node="gpu-1", **_blocks(sim)).is_completed()
    assert _cordoned(v1, "gpu-2")  # already cordoned: not changed, so `again` ran


def test_a_runbook_runs_another_with_its_parameters(cluster):
    sim, v1, _ = cluster
    outer = """\
name: quarantine
parameters: {node: {type: node, required: true}}
steps:
  - name: inner
    action: run-runbook
    args: {runbook: cordon-only, params: {node: "{{ node }}"}}
"""
    inner = """\
name: cordon-only
parameters: {node: {type: node, required: true}}
steps:
  - {name: cordon, action: cordon-node, args: {node: "{{ node }}"}}
"""
    flow = _flow("quarantine", ("o.yaml", outer), ("i.yaml", inner))
    dry = _run(flow, node="gpu-1", dry_run=True, **_blocks(sim))
    assert dry.name == "DryRun" and not _cordoned(v1, "gpu-1")
    assert _run(flow, node="gpu-1", **_blocks(sim)).is_completed()
    assert _cordoned(v1, "gpu-1")


def test_bad_parameters_are_all_named_before_anything_runs():
    runbook = load_runbooks().get("drain-gpu-node").runbook
    with pytest.raises(ParametersInvalid) as caught:
        bind_values(runbook, {"nod": "gpu-1", "wait": "3h", "min_free_gpus": "x"})
    assert set(caught.value.problems) == {"nod", "node", "wait", "min_free_gpus"}
    assert "'3h' is longer than the maximum 2h" in caught.value.problems["wait"]
    assert bind_values(runbook, {"node": "gpu-1", "wait": "90s"})["wait"] == 90


def test_the_ui_form_is_the_runbooks_declaration():
    loaded = load_runbooks().get("drain-gpu-node")
    schema = parameter_schema(runbook_flow(loaded).fn).model_dump()
    props = schema["properties"]
    assert schema["required"] == ["node"]
    assert props["node"]["description"] == "The node to drain."
    assert props["min_free_gpus"]["minimum"] == 0 and props["min_free_gpus"]["default"] == 0
    assert props["channel"]["pattern"] == "^#[a-z0-9._-]+$"
    assert props["dry_run"]["type"] == "boolean"


def test_each_runbook_is_a_deployment_with_its_trigger(tmp_path: Path):
    text = """\
name: quarantine-on-xid
parameters: {node: {type: node, required: true}}
trigger:
  event: gpuops.pod.restarted
  match: {gpuops.cause: gpu-xid}
  parameters: {node: "{{ event.resource['gpuops.node'] }}"}
steps:
  - {name: cordon, action: cordon-node, args: {node: "{{ node }}"}}
"""
    registry = load_texts([("q.yaml", text)])
    (deployment,) = runbook_deployments(registry)
    assert deployment.name == "runbook" and deployment.flow_name == "quarantine-on-xid"
    (trigger,) = deployment.triggers
    assert trigger.expect == {"gpuops.pod.restarted"}
    assert trigger.parameters == {"node": "{{ event.resource['gpuops.node'] }}",
                                  "started_by": "event {{ event.event }}"}  # no person


def test_every_declared_action_is_bound():
    assert set(CATALOG) == set(load_bindings())


def test_flow_backed_actions_name_deployments_gpuops_serves():
    served = served_deployment_names()
    assert flow_bindings.REBALANCE in served and flow_bindings.ROLLBACK in served


def test_the_shipped_quarantine_runbook_taints_cordons_and_tells(cluster, slack_fake):
    sim, v1, _ = cluster
    flow = _flow("quarantine-gpu-node")
    state = _run(flow, node="gpu-1", reason="ecc", channel="#ops", **_blocks(sim, slack_fake))
    assert state.is_completed() and state.name == "Completed", state.message
    spec = v1.read_node("gpu-1").spec
    assert spec.unschedulable
    assert [(t.key, t.value, t.effect) for t in spec.taints] == [
        ("gpuops.io/quarantine", "ecc", "NoSchedule")]
    assert not _terminating(v1, "worker-0")  # running pods stay
    told = [m["text"] for m in slack_fake.messages() if m.get("text", "").startswith(
        "Quarantined gpu-1")]
    assert told == [("Quarantined gpu-1 (ecc). Drain it with `gpuops runbook run "
                     "drain-gpu-node --param node=gpu-1`.")]


def test_cli_runs_a_dry_run_and_refuses_bad_parameters_before_starting(cluster):
    from typer.testing import CliRunner

    from gpuops.deployments.cli import app

    sim, v1, _ = cluster
    blocks = _blocks(sim)
    runner = CliRunner()
    result = runner.invoke(app, ["runbook", "run", "quarantine-gpu-node", "--param",
                                 "node=gpu-1", "--dry-run", "--cluster-block",
                                 blocks["cluster_block"]])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "runbook quarantine-gpu-node",
        ("1. taint: taint-node(node='gpu-1', key='gpuops.io/quarantine', value='xid', "
        "effect='NoSchedule', exclusive=False)"),
        "   - taint node gpu-1 gpuops.io/quarantine=xid:NoSchedule",
        "2. cordon: cordon-node(node='gpu-1')",
        "   - cordon node gpu-1",
        ("3. tell: slack-post(channel='#gpuops', text='Quarantined gpu-1 (xid). Drain it with "
        "`gpuops runbook run drain-gpu-node --param node=gpu-1`.')"),
        ("   - post to #gpuops: Quarantined gpu-1 (xid). Drain it with `gpuops runbook run "
        "drain-gpu-node --param node=gpu-1`."),
        "DryRun: 3 change(s) planned"]
    assert not _cordoned(v1, "gpu-1")
    bad = runner.invoke(app, ["runbook", "run", "quarantine-gpu-node", "--param", "node=GPU_1",
                              "--param", "reason=fire"])
    assert bad.exit_code == 2
    assert "parameters.node: 'GPU_1' is not a DNS subdomain name" in bad.stderr
    assert "parameters.reason: 'fire' is not one of 'xid', 'ecc'" in bad.stderr


async def _deployed(name: str) -> bool:
    from prefect.exceptions import ObjectNotFound

    async with get_client() as c:
        try:
            await c.read_deployment_by_name(name)
        except ObjectNotFound:
            return False
    return True


def test_a_shipped_runbook_runs_as_the_deployment_gpuops_up_serves(
        cluster, slack_fake, serve_deployments):
    from typer.testing import CliRunner

    from gpuops.deployments.cli import app

    sim, v1, _ = cluster
    blocks = _blocks(sim, slack_fake)
    serve_deployments()  # `serve_all()` in its own process, as `gpuops up` runs it
    wait_for(lambda: asyncio.run(_deployed("quarantine-gpu-node/runbook")), timeout=90,
             message="the runbook's served deployment")
    result = CliRunner().invoke(app, [
        "runbook", "run", "quarantine-gpu-node", "--served", "--param", "node=gpu-1",
        "--param", "channel=#ops", *(f"--{k.replace('_', '-')}={v}" for k, v in blocks.items())])
    assert result.exit_code == 0, result.output
    assert "of quarantine-gpu-node/runbook" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "Completed: 3 step(s) done"
    assert _cordoned(v1, "gpu-1")
    # The server checks a run's parameters against the declaration too (the UI's form).
    from prefect.deployments import arun_deployment

    with pytest.raises(Exception, match="reason") as refused:
        asyncio.run(arun_deployment("quarantine-gpu-node/runbook", timeout=0, parameters={
            "node": "gpu-2", "reason": "fire", **blocks}))
    assert "'fire' is not one of" in str(refused.value)
    assert not _cordoned(v1, "gpu-2")


STUCK = """\
name: cordon-taint-then-wait
parameters: {node: {type: node, required: true}}
steps:
  - name: cordon
    action: cordon-node
    args: {node: "{{ node }}"}
    undo: {action: uncordon-node, args: {node: "{{ node }}"}}
  - name: taint
    action: taint-node
    args: {node: "{{ node }}", key: gpuops.io/quarantine, value: xid}
    undo: {action: untaint-node, args: {node: "{{ node }}", key: gpuops.io/quarantine, value: xid}}
  - name: empty
    action: wait-until
    args: {check: node-drained, args: {node: "{{ node }}"}, timeout: 1h, interval: 1s}
"""


async def _journals() -> list[dict]:
    async with get_client() as c:
        return [v.value for v in await c.read_variables() if v.name.startswith(PREFIX)]


def test_a_run_killed_mid_way_is_undone_by_recover(cluster, tmp_path: Path):
    import os
    import signal
    import subprocess
    import sys

    from typer.testing import CliRunner

    from gpuops.deployments.cli import app

    sim, v1, _ = cluster
    blocks = _blocks(sim)
    path = tmp_path / "stuck.yaml"
    path.write_text(STUCK)
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuops.deployments.cli", "runbook", "run",
         "cordon-taint-then-wait", "--file", str(path), "--param", "node=gpu-1",
         "--cluster-block", blocks["cluster_block"]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        journal = wait_for(lambda: next((j for j in asyncio.run(_journals())
                                         if j["runbook"] == "cordon-taint-then-wait"
                                         and [e["state"] for e in j["undo"]] == ["done"] * 2),
                                        None), timeout=90, message="both steps journaled")
        spec = v1.read_node("gpu-1").spec
        assert spec.unschedulable and spec.taints  # the run waits in its third step
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    runner = CliRunner()
    result = runner.invoke(app, ["runbook", "recover", journal["flow_run"],
                                 "--cluster-block", blocks["cluster_block"]])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["undo-taint", "undo-cordon"]
    spec = v1.read_node("gpu-1").spec
    assert not (spec and (spec.unschedulable or spec.taints))
    again = runner.invoke(app, ["runbook", "recover", journal["flow_run"],
                                "--cluster-block", blocks["cluster_block"]])
    assert again.stdout.strip() == f"nothing to undo for run {journal['flow_run']}"


TRIGGERED = """\
name: cordon-on-test-event
parameters: {node: {type: node, required: true}}
trigger:
  event: gpuops.node.test-fault
  match: {gpuops.kind: Node}
  parameters: {node: "{{ event.resource['prefect.resource.name'] }}"}
steps:
  - {name: cordon, action: cordon-node, args: {node: "{{ node }}"}}
"""


def test_a_runbooks_trigger_runs_it_when_its_event_happens(
        cluster, tmp_path: Path, monkeypatch, serve_deployments):
    from prefect.events import emit_event

    from gpuops.common.events import k8s_resource

    sim, v1, _ = cluster
    (tmp_path / "triggered.yaml").write_text(TRIGGERED)
    # What `gpuops up` exports for the flow runs it serves, and the runbooks folder.
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    monkeypatch.setenv("GPUOPS_RUNBOOKS_DIR", str(tmp_path))
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    serve_deployments()
    wait_for(lambda: asyncio.run(_deployed("cordon-on-test-event/runbook")), timeout=90,
             message="the triggered runbook's deployment")
    def fault_reported() -> bool:
        # Sent again until it is acted on: the server loads a new deployment's trigger a
        # moment after the deployment exists. An event about a Pod named like a node does
        # not match (`gpuops.kind`), or gpu-2 would be cordoned.
        emit_event("gpuops.node.test-fault", resource=k8s_resource("sim", "Pod", None,
                                                                   "gpu-2"))
        emit_event("gpuops.node.test-fault", resource=k8s_resource("sim", "Node", None,
                                                                   "gpu-1"))
        return _cordoned(v1, "gpu-1")

    wait_for(fault_reported, timeout=120, interval=3, message="the triggered run")
    assert not _cordoned(v1, "gpu-2")


CORDON_ASK_DRAIN = """\
name: cordon-ask-drain
parameters: {node: {type: node, required: true}}
steps:
  - {name: cordon, action: cordon-node, args: {node: "{{ node }}"}}
  - name: approve
    action: request-approval
    args: {title: "Drain {{ node }}", summary: "Evict what runs on {{ node }}."}
  - {name: drain, action: drain-node, args: {node: "{{ node }}"}}
"""


def test_an_approval_after_a_change_shows_and_holds_the_plan_from_there(cluster, slack_fake):
    """The approval shows what the steps after it would do once the cordon before it is
    done (so the drain's own cordon is not a change any more), and that plan still holds."""
    sim, v1, _ = cluster
    flow = _flow("cordon-ask-drain", ("c.yaml", CORDON_ASK_DRAIN))

    class Run(helpers.FlowThread):
        def run_flow(self, **params: Any) -> Any:
            return _run(flow, **params)

    run = Run(node="gpu-1", **_blocks(sim, slack_fake))
    request = wait_for(lambda: next((m for m in slack_fake.messages()
                                     if "Approval needed" in json.dumps(m.get("blocks"))),
                                    None), timeout=60, message="the approval request")
    shown = json.dumps(request["blocks"])
    assert "evict pod default/worker-0 from node gpu-1" in shown
    assert "- cordon node gpu-1" not in shown  # done before it asked
    run_id = json.loads(next(e["value"] for b in request["blocks"] if b["type"] == "actions"
                             for e in b["elements"]))["flow_run_id"]
    wait_for(lambda: asyncio.run(_paused(run_id)), timeout=60, message="the pause")
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "alice"})
    state = run.result(120)
    assert state.name == "Completed", state.message
    assert _terminating(v1, "worker-0")
