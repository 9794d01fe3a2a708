"""A new run of a runbook first undoes what earlier runs of it that died left (their journal
and node records), and leaves alone the runs that may still be alive (paused, suspended)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.states import Crashed, Paused, Suspended

from gpuops.runbooks.journal import Journal, read_journal
from gpuops.runbooks.leftovers import decide, runs_of
from gpuops.runbooks.node_record import undo_key
from gpuops.tasks.clients.kube import Kube
from tests.helpers import wait_for
from tests.test_runbook_engine import (
    _artifact_of,
    _blocks,
    _cordoned,
    _flow,
    _journals,
    _node,
    _run,
)

pytestmark = pytest.mark.timeout(240)

# The same steps as test_runbook_engine.STUCK, under a precondition that no node of the pool
# is cordoned: a new run gets past it only if what the dead run did is undone before it.
QUARANTINE = """\
name: quarantine-then-wait
parameters: {node: {type: node, required: true}}
preconditions:
  - {check: max-cordoned-in-pool, args: {pool: h100, max: 0}}
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


@pytest.mark.parametrize(("state", "compensate"), [
    ("CRASHED", True), ("FAILED", True), ("CANCELLED", True), (None, True),
    ("RUNNING", False), ("PAUSED", False), ("PENDING", False), ("SCHEDULED", False),
    ("CANCELLING", False), ("COMPLETED", False)])
def test_only_runs_that_have_ended_are_compensated(state: str | None, compensate: bool):
    assert decide(state).compensate is compensate


def test_only_earlier_runs_of_the_same_runbook_are_looked_at():
    bodies = {"a": {"runbook": "r"}, "b": {"runbook": "other"}, "own": {"runbook": "r"}}
    assert runs_of("r", bodies, "OWN") == ["a"]


def _quarantined(v1: client.CoreV1Api, node: str) -> bool:
    spec = v1.read_node(node).spec
    return bool(spec and (spec.unschedulable or spec.taints))


async def _set_state(run_id: str, state: Any) -> None:
    async with get_client() as c:
        await c.set_flow_run_state(uuid.UUID(run_id), state, force=True)


def _nodes(sim: Any) -> client.CoreV1Api:
    v1 = client.CoreV1Api(sim.api)
    _node(v1, "gpu-1")
    _node(v1, "gpu-2")
    v1.create_namespaced_pod("default", {"metadata": {"name": "worker-0"}, "spec": {
        "nodeName": "gpu-1", "containers": [{"name": "main", "image": "busybox:1"}]}})
    return v1  # gpu-1 keeps a run waiting in its third step; gpu-2 is empty


def test_a_killed_run_is_compensated_by_the_next_run_of_its_runbook(
        prefect_server, sim, tmp_path: Path):
    v1 = _nodes(sim)
    blocks = _blocks(sim)
    path = tmp_path / "quarantine.yaml"
    path.write_text(QUARANTINE)
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuops.deployments.cli", "runbook", "run",
         "quarantine-then-wait", "--file", str(path), "--param", "node=gpu-1",
         "--cluster-block", blocks["cluster_block"]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        journal = wait_for(lambda: next((j for j in asyncio.run(_journals())
                                         if j["runbook"] == "quarantine-then-wait"
                                         and [e["state"] for e in j["undo"]] == ["done"] * 2),
                                        None), timeout=90, message="both steps journaled")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    dead = journal["flow_run"]
    assert _quarantined(v1, "gpu-1")
    # What `gpuops up` does on its next start to the runs a stop left (served_runs.py): a
    # killed run stays Running on the server until something says its process is gone.
    asyncio.run(_set_state(dead, Crashed(message="its process was killed")))
    runbook = _flow("quarantine-then-wait", (str(path), QUARANTINE))

    dry = _run(runbook, node="gpu-2", dry_run=True, **blocks)
    assert f"would undo run {dead}'s cordon of gpu-1" in asyncio.run(_artifact_of(dry))
    assert _quarantined(v1, "gpu-1")  # a dry run changes nothing

    state = _run(runbook, node="gpu-2", **blocks)
    # Its precondition (no node of the pool cordoned) held: gpu-1 was uncordoned before it.
    assert state.is_completed(), state.message
    assert not _quarantined(v1, "gpu-1")
    assert _cordoned(v1, "gpu-2")  # its own steps ran after
    artifact = asyncio.run(_artifact_of(state))
    left = artifact.split("## Left by earlier runs", 1)[1].split("## Plan", 1)[0]
    assert f"undid run {dead}'s taint of gpu-1" in left
    assert f"undid run {dead}'s cordon of gpu-1" in left
    assert asyncio.run(read_journal(dead, Kube(v1.api_client))) is None  # nor on the node
    assert undo_key(dead) not in (v1.read_node("gpu-1").metadata.annotations or {})

    v1.patch_node("gpu-2", {"spec": {"unschedulable": False, "taints": None}})
    third = _run(runbook, node="gpu-2", **blocks)
    assert third.is_completed(), third.message
    assert "Left by earlier runs" not in asyncio.run(_artifact_of(third))


@flow(name="stand-in-for-an-earlier-run")
def _earlier() -> None:
    """Never run: its flow runs stand for earlier runbook runs in a given state."""


async def _earlier_run(state: Any) -> str:
    async with get_client() as c:
        run = await c.create_flow_run(_earlier, state=state)
    return str(run.id)


@pytest.mark.parametrize("waiting", [Paused, Suspended])
def test_a_run_waiting_for_an_approval_is_left_alone(prefect_server, sim, tmp_path: Path,
                                                      waiting: Any):
    v1 = _nodes(sim)
    blocks = _blocks(sim)
    kube = Kube(v1.api_client)
    run_id = asyncio.run(_earlier_run(waiting()))
    journal = Journal(run_id, "quarantine-then-wait", kube)  # as the waiting run wrote it
    asyncio.run(journal.will_run("cordon", "uncordon-node", {"node": "gpu-1"}))
    asyncio.run(journal.ran("cordon", {"node": "gpu-1"}))
    runbook = _flow("quarantine-then-wait", (str(tmp_path / "q.yaml"), QUARANTINE))
    state = _run(runbook, node="gpu-2", **blocks)
    assert state.is_completed(), state.message
    assert "Left by earlier runs" not in asyncio.run(_artifact_of(state))
    assert asyncio.run(read_journal(run_id)) is not None  # kept for when it resumes
    assert undo_key(run_id) in (v1.read_node("gpu-1").metadata.annotations or {})
    # Once it has ended, the next run does undo it.
    asyncio.run(_set_state(run_id, Crashed(message="its process was killed")))
    v1.patch_node("gpu-2", {"spec": {"unschedulable": False, "taints": None}})
    state = _run(runbook, node="gpu-2", **blocks)
    assert f"undid run {run_id}'s cordon of gpu-1" in asyncio.run(_artifact_of(state))
    assert asyncio.run(read_journal(run_id, kube)) is None
