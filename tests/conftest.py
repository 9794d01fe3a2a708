"""Shared fixtures: a simcluster reached over HTTP through the official client.

Set KUBECONFIG_REAL to run the client-level tests marked `real_cluster` against a real
cluster instead (they then skip the simcluster-only admin calls).
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.request
from collections.abc import Iterator
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

import pytest
from kubernetes import client, config

from gpuops.simcluster.config import SimConfig
from gpuops.simcluster.testing import SimClusterThread


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
def prefect_server() -> Iterator[str]:
    """A real Prefect server (SQLite) for the whole session; returns its API URL."""
    from gpuops.deployments.services import start_prefect_server

    service = start_prefect_server(_PREFECT_HOME, port=_PREFECT_PORT, timeout_s=120)
    try:
        yield service.url
    finally:
        service.stop()


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
