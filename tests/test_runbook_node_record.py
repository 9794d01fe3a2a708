"""A runbook run's undos recorded on the nodes they are about: readable with kubectl, and
enough for `gpuops runbook recover RUN` when the journal on the Prefect server is gone."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client
from typer.testing import CliRunner

from gpuops.runbooks.journal import forget_journal
from gpuops.runbooks.node_record import by_node, merge_records, undo_key
from tests.helpers import wait_for
from tests.test_runbook_engine import STUCK, _blocks, _node


def test_a_journal_split_over_its_nodes_comes_back_whole_and_in_order():
    body = {"runbook": "r", "flow_run": "f", "undo": [
        {"step": "cordon-a", "action": "uncordon-node", "args": {"node": "a"}, "state": "done"},
        {"step": "cordon-b", "action": "uncordon-node", "args": {"node": "b"}, "state": "done"},
        {"step": "note", "action": "slack-post", "args": None, "state": "pending"},
        {"step": "taint-a", "action": "untaint-node", "args": {"node": "a", "key": "k",
                                                               "value": ""}, "state": "done"}]}
    parts = by_node(body)
    assert sorted(parts) == ["a", "b"]
    assert [e["step"] for e in parts["a"]["undo"]] == ["cordon-a", "taint-a"]
    merged = merge_records([parts["b"], parts["a"], parts["a"]])  # any order, twice
    assert [e["step"] for e in merged["undo"]] == ["cordon-a", "cordon-b", "taint-a"]
    assert merged["flow_run"] == "f" and merge_records([]) is None


def test_a_killed_run_is_recovered_from_what_it_recorded_on_the_node(
        prefect_server, sim, tmp_path: Path):
    from gpuops.deployments.cli import app

    v1 = client.CoreV1Api(sim.api)
    _node(v1, "gpu-1")
    _pod = {"metadata": {"name": "worker-0"}, "spec": {"nodeName": "gpu-1", "containers": [
        {"name": "main", "image": "busybox:1"}]}}
    v1.create_namespaced_pod("default", _pod)  # keeps the run waiting in its third step
    blocks = _blocks(sim)
    path = tmp_path / "stuck.yaml"
    path.write_text(STUCK)
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuops.deployments.cli", "runbook", "run",
         "cordon-taint-then-wait", "--file", str(path), "--param", "node=gpu-1",
         "--cluster-block", blocks["cluster_block"]],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def recorded() -> tuple[str, dict] | None:
        annotations = v1.read_node("gpu-1").metadata.annotations or {}
        for key, text in annotations.items():
            record = json.loads(text) if key.startswith("gpuops.io/runbook-undo-") else None
            if record and [e["state"] for e in record["undo"]] == ["done"] * 2:
                return record["flow_run"], record
        return None

    try:
        run_id, record = wait_for(recorded, timeout=90, message="both undos on the node")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    assert record["runbook"] == "cordon-taint-then-wait"
    assert [(e["step"], e["action"]) for e in record["undo"]] == [
        ("cordon", "uncordon-node"), ("taint", "untaint-node")]
    asyncio.run(forget_journal(run_id))  # the Prefect server's journal is lost
    runner = CliRunner()
    result = runner.invoke(app, ["runbook", "recover", run_id, "--cluster-block",
                                 blocks["cluster_block"]])
    assert result.exit_code == 0, result.output
    assert [line.split(":")[0] for line in result.stdout.strip().splitlines()] == [
        "undo-taint", "undo-cordon"]
    node = v1.read_node("gpu-1")
    assert not (node.spec.unschedulable or node.spec.taints)
    assert undo_key(run_id) not in (node.metadata.annotations or {})  # recovered: gone
    again = runner.invoke(app, ["runbook", "recover", run_id, "--cluster-block",
                                blocks["cluster_block"]])
    assert again.stdout.strip() == f"nothing to undo for run {run_id}"
