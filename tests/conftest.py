"""Shared fixtures: a simcluster reached over HTTP through the official client.

Set KUBECONFIG_REAL to run the client-level tests marked `real_cluster` against a real
cluster instead (they then skip the simcluster-only admin calls).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client, config

from gpuops.simcluster.server import SimConfig
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
