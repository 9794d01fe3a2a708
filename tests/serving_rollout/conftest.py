"""Fixtures of the serving-rollout tests: the stack, serving and scraped, with its Blocks."""

from __future__ import annotations

from typing import Any

import pytest

from gpuops.deployments.services import host_port
from tests.serving_rollout.stack import MODEL, SPEED, Stack, save_blocks


@pytest.fixture
def stack(sim_factory) -> Stack:
    demand = {"demand": {MODEL: {"baseRps": 40, "peakRps": 40}}}
    return Stack(sim_factory("empty", speed=SPEED, extra=demand))


@pytest.fixture
def served(stack, prometheus_scraping, slack_fake, prefect_server):
    """The stack serving, scraped by Prometheus, and the Blocks a rollout uses (the policy's
    values from the test's `policy` marker)."""
    def make(**policy: Any) -> dict[str, str]:
        stack.deploy()
        prometheus = prometheus_scraping(host_port(stack.sim.url))
        return save_blocks(stack, prometheus, slack_fake, **policy)
    return make


@pytest.fixture
def full_stack(sim_factory) -> Stack:
    """Four replicas on a node with four GPUs: no room for a new copy beside them."""
    demand = {"demand": {MODEL: {"baseRps": 40, "peakRps": 40}}}
    return Stack(sim_factory("empty", speed=SPEED, extra=demand), gpus=4)
