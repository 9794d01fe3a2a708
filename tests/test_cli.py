"""The `gpuops` command line: help, benches, simcluster admin calls and the `up` guard."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from typer.testing import CliRunner

from gpuops.deployments.cli import app

runner = CliRunner()


def test_help_lists_up_sim_and_bench() -> None:
    result = runner.invoke(app, ["--help"])

    assert result.exit_code == 0
    for command in ("up", "sim", "bench"):
        assert command in result.output


def test_module_entrypoint_runs_the_same_app() -> None:
    result = subprocess.run([sys.executable, "-m", "gpuops.deployments.cli", "sim", "--help"],
                            check=False, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0
    assert "fault" in result.stdout and "serve" in result.stdout


def test_unknown_bench_is_a_clear_error() -> None:
    result = runner.invoke(app, ["bench", "nosuch"])

    assert result.exit_code == 2
    assert "unknown bench 'nosuch'" in result.stderr
    assert "available benches:" in result.stderr


@pytest.fixture
def probe_bench(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A bench module `gpuops.bench.cli_probe` that records how `main` was called."""
    calls: list[dict[str, Any]] = []
    module = types.ModuleType("gpuops.bench.cli_probe")

    def main(json_output: bool, pods: int = 10, label: str = "") -> None:
        calls.append({"json_output": json_output, "pods": pods, "label": label})
        print(json.dumps({"pods": pods}))

    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gpuops.bench.cli_probe", module)
    return calls


def test_bench_passes_json_flag_and_extra_options_to_main(probe_bench: list) -> None:
    result = runner.invoke(app, ["bench", "cli-probe", "--json", "--pods", "3", "--label=x"])

    assert result.exit_code == 0, result.output
    assert probe_bench == [{"json_output": True, "pods": 3, "label": "x"}]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"pods": 3}


def test_bench_rejects_an_option_its_main_does_not_take(probe_bench: list) -> None:
    result = runner.invoke(app, ["bench", "cli-probe", "--nodes", "5"])

    assert result.exit_code == 2
    assert "nodes" in result.stderr
    assert probe_bench == []


class _AdminRecorder(BaseHTTPRequestHandler):
    """Stands in for simcluster's admin endpoint: records each POST, answers with JSON."""

    received: ClassVar[list[tuple[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, body))
        answer = json.dumps({"accepted": True, "id": "fault-1"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def sim_kubeconfig(tmp_path: Path) -> Iterator[tuple[Path, list]]:
    _AdminRecorder.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AdminRecorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig.yaml"
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig.write_text(yaml.safe_dump({"clusters": [{"name": "sim",
                                                        "cluster": {"server": url}}]}))
    yield kubeconfig, _AdminRecorder.received
    server.shutdown()
    server.server_close()


def test_sim_fault_posts_kind_target_and_typed_params(sim_kubeconfig: tuple) -> None:
    kubeconfig, received = sim_kubeconfig

    result = runner.invoke(app, ["sim", "fault", "gpu-xid", "--target", "gpu-node-1",
                                 "--param", "xid=79", "--param", "container=fell off the bus",
                                 "--kubeconfig", str(kubeconfig)])

    assert result.exit_code == 0, result.output
    assert received == [("/admin/faults", {"kind": "gpu-xid", "target": "gpu-node-1",
                                           "params": {"xid": 79,
                                                      "container": "fell off the bus"}})]
    assert json.loads(result.stdout) == {"accepted": True, "id": "fault-1"}


def test_sim_clock_advance_posts_seconds(sim_kubeconfig: tuple) -> None:
    kubeconfig, received = sim_kubeconfig

    result = runner.invoke(app, ["sim", "clock", "--advance", "600",
                                 "--kubeconfig", str(kubeconfig)])

    assert result.exit_code == 0, result.output
    assert received == [("/admin/clock", {"advance": 600.0})]


def test_sim_clock_needs_exactly_one_of_advance_or_speed(sim_kubeconfig: tuple) -> None:
    kubeconfig, received = sim_kubeconfig

    result = runner.invoke(app, ["sim", "clock", "--kubeconfig", str(kubeconfig)])

    assert result.exit_code == 2
    assert "exactly one" in result.stderr
    assert received == []


def test_sim_fault_reports_an_unreachable_cluster(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(
        {"clusters": [{"name": "sim", "cluster": {"server": "http://127.0.0.1:9"}}]}))

    result = runner.invoke(app, ["sim", "fault", "crashloop", "--kubeconfig", str(kubeconfig)])

    assert result.exit_code == 1
    assert "cannot reach simcluster at http://127.0.0.1:9" in result.stderr


def test_up_refuses_to_start_twice_in_the_same_home(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gpuops"])
    try:
        (tmp_path / "up.pid").write_text(f"{holder.pid}\nhttp://127.0.0.1:4321\n")

        result = runner.invoke(app, ["up", "--home", str(tmp_path)])

        assert result.exit_code == 1
        assert (f"gpuops is already running (pid {holder.pid}): UI at http://127.0.0.1:4321"
                in result.stderr)
    finally:
        holder.kill()
        holder.wait()


# --- sim fault: kinds, targets, errors a person can act on ------------------------------------

def test_sim_fault_list_prints_every_kind_with_what_it_does_and_its_parameters() -> None:
    from gpuops.simcluster.cluster import fault_catalog

    result = runner.invoke(app, ["sim", "fault", "--list"])

    assert result.exit_code == 0, result.output
    for kind in fault_catalog():
        assert f"\n{kind}: " in "\n" + result.stdout
    assert "crashloop: the container exits with a Python traceback" in result.stdout
    assert "exit_code      an integer from 0 to 255 (default 1); the exit code" in result.stdout
    assert re.search(r"\n +reason +one of NotFound, Unauthorized, Timeout", result.stdout)


def test_the_sim_fault_help_names_only_kinds_that_exist() -> None:
    from gpuops.simcluster.cluster import fault_catalog

    result = runner.invoke(app, ["sim", "fault", "--help"], env={"COLUMNS": "300"})
    text = " ".join(result.stdout.replace("│", " ").split())
    named = re.search(r"Fault kind[:,] (?:e\.g\. )?([a-z0-9, -]+?)(?:, \.\.\.|\.)", text)

    assert named, text
    kinds = [k.strip() for k in named.group(1).split(",")]
    assert len(kinds) >= 5 and set(kinds) <= set(fault_catalog()), kinds
    assert "kind/namespace/name" in text and "--list" in text


@pytest.fixture
def default_cluster(tmp_path: Path):
    """simcluster with the default scenario (what `gpuops up` starts)."""
    from kubernetes import client, config

    from gpuops.simcluster.config import SimConfig
    from gpuops.simcluster.testing import SimClusterThread
    from tests.helpers import wait_for

    sim = SimClusterThread(SimConfig(scenario="default"), tmp_path / "kubeconfig").start()
    v1 = client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))
    wait_for(lambda: v1.list_namespaced_pod("inference", label_selector="app=llama-3-8b")
             .items, message="the llama-3-8b pods created")
    yield sim
    sim.stop()


def test_a_workload_target_of_the_default_scenario_is_faulted(default_cluster) -> None:
    """What `gpuops up` suggests: a crash loop in an inference Deployment, by its name."""
    result = runner.invoke(app, ["sim", "fault", "crashloop", "--target",
                                 "inference/llama-3-8b", "--kubeconfig",
                                 str(default_cluster.kubeconfig)])

    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["rule"] is True
    assert answer["pods"] and all(p["pod"].startswith("inference/llama-3-8b-")
                                  for p in answer["pods"])


def test_a_refused_fault_is_one_line_naming_the_namespace_and_what_is_there(
        default_cluster) -> None:
    result = runner.invoke(app, ["sim", "fault", "crashloop", "--target", "inference/lama",
                                 "--kubeconfig", str(default_cluster.kubeconfig)])

    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith('error: simcluster refused POST /admin/faults (404): no pod or '
                           'workload named "lama" in namespace "inference"; pods there: ')
    assert "workloads: deployment/llama-3-8b" in line and "{" not in line


def test_a_bad_fault_parameter_is_one_line_saying_what_it_may_be(default_cluster) -> None:
    result = runner.invoke(app, ["sim", "fault", "oom", "--target", "inference/llama-3-8b",
                                 "--param", "once=maybe",
                                 "--kubeconfig", str(default_cluster.kubeconfig)])

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: simcluster refused POST /admin/faults (400): fault 'oom': params.once must "
        "be true or false (see `gpuops sim fault --list`)")


# --- files and Blocks: one line, exit 2 -------------------------------------------------------

BAD_SCENARIO = "cluster:\n  name: sim\npools:\n  - name: gpu\n    gpusPerNode: -1\n"


@pytest.mark.parametrize(("text", "expected"), [
    (BAD_SCENARIO, "bad.yaml:4: pools[0]"),
    ("", ("bad.yaml: the scenario is empty; for a cluster with nothing in it use the shipped "
         "scenario `empty`")),
    ("namespaces: [a, b\n", "bad.yaml:2: not valid YAML"),
])
def test_a_bad_scenario_file_is_one_error_line_naming_it_and_exit_2(tmp_path: Path, text,
                                                                     expected) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)

    result = runner.invoke(app, ["sim", "serve", "--kubeconfig", str(tmp_path / "kc"),
                                 "--scenario", str(path)])

    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path}/{expected}"), line


def test_a_missing_scenario_through_the_real_entry_point_prints_no_traceback(
        tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gpuops.deployments.cli", "sim", "serve",
                             "--kubeconfig", str(tmp_path / "kc"), "--scenario",
                             str(tmp_path / "missing.yaml")],
                            check=False, capture_output=True, text=True, timeout=60)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        (f"error: {tmp_path}/missing.yaml: no such scenario: not a shipped one (default, "
        "empty) nor a file")]


def test_a_missing_kubeconfig_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sim", "fault", "oom", "--kubeconfig",
                                 str(tmp_path / "nope.yaml")])

    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: kubeconfig '{tmp_path}/nope.yaml' does not exist"


@pytest.mark.parametrize("command", [
    ["sensor", "cluster", "--cluster-block", "no-such-block"],
    ["sensor", "slack", "--slack-block", "no-such-block"],
    ["plan", "capacity", "--config-block", "no-such-block"],
])
def test_a_missing_block_is_one_line_naming_it_and_exit_2(prefect_server, command) -> None:
    result = runner.invoke(app, command)

    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: Block gpuops-") and "/no-such-block: name: no such Block" \
        in line


def test_restart_rules_load_puts_a_checked_file_into_the_policy_block(prefect_server,
                                                                      tmp_path: Path) -> None:
    from gpuops.blocks.restart_policy import RestartPolicy

    rules = tmp_path / "rules.yaml"
    rules.write_text("- id: triton-model-load\n  cause: model-load\n  title: t\n"
                     "  confidence: 0.8\n  when: {log_regex: [failed to load]}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: x\n  cause: c\n  title: t\n  confidence: 2\n"
                   "  when: {pod_deleting: true}\n")

    loaded = runner.invoke(app, ["restart-rules", "load", str(rules), "--policy-block", "r1"])
    refused = runner.invoke(app, ["restart-rules", "load", str(bad), "--policy-block", "r1"])
    missing = runner.invoke(app, ["restart-rules", "load", str(tmp_path / "no.yaml"),
                                  "--policy-block", "r1"])

    assert loaded.exit_code == 0, loaded.output
    assert "1 rule(s)" in loaded.stdout
    assert "triton-model-load" in RestartPolicy.load("r1").cause_rules().ids()
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (f"error: {bad}:4:3: rules[0].confidence: Input should "
                                      "be less than or equal to 1")
    assert missing.exit_code == 2
    assert missing.stderr.strip() == f"error: {tmp_path}/no.yaml: no such file or directory"
