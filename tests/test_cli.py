"""The `gpuops` command line: help, benches, simcluster admin calls and the `up` guard."""

from __future__ import annotations

import json
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

    result = runner.invoke(app, ["sim", "fault", "xid", "--target", "gpu-node-1",
                                 "--param", "code=79", "--param", "reason=fell off the bus",
                                 "--kubeconfig", str(kubeconfig)])

    assert result.exit_code == 0, result.output
    assert received == [("/admin/faults", {"kind": "xid", "target": "gpu-node-1",
                                           "params": {"code": 79, "reason": "fell off the bus"}})]
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
