"""The capacity side of `gpuops.gpu.capacity-needed`, end to end: a GPU rebalance finds a
Pending pod that fits no node even empty and emits the event; the capacity flow, given the
event's pods, raises the pool whose nodes would hold it. simcluster over HTTP with moto behind
its node pools, a real Prefect server, the Slack fake (the pools of test_capacity_prewarm.py:
one tainted h100 node, no a100 node, one 4-GPU l4 node)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from gpuops.flows.capacity_for_pending import capacity_for_pending
from gpuops.flows.gpu_rebalance import gpu_rebalance
from tests import helpers
from tests.helpers import stored_events, wait_for
from tests.test_capacity_prewarm import env_factory, moto_url, prometheus  # noqa: F401
from tests.test_scale_in import approve

pytestmark = pytest.mark.timeout(240)


class CapacityThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(capacity_for_pending(**params, return_state=True))


def test_a_pod_no_node_fits_is_named_by_the_rebalance_and_its_pool_raised_after_approval(
        env_factory, slack_fake):  # noqa: F811
    env = env_factory(slack_url=slack_fake.base_url, approval_cost_per_hour=10.0)
    core = client.CoreV1Api(env.sim.api)
    # 8 GPUs, no toleration: the h100 node's taint keeps it out, the l4 node has 4 GPUs.
    core.create_namespaced_pod("default", {"metadata": {"name": "train"}, "spec": {
        "containers": [{"name": "main", "image": "trainer:1", "resources": {
            "limits": {"nvidia.com/gpu": "8"}}}]}})
    since = datetime.now(UTC)
    rebalance = asyncio.run(gpu_rebalance(cluster_block=env.blocks["cluster_block"],
                                          return_state=True))
    assert rebalance.name == "CapacityNeeded", rebalance.message
    [event] = wait_for(lambda: stored_events("gpuops.gpu.capacity-needed", since),
                       timeout=30, message="the capacity-needed event")
    assert event.payload["pods"] == ["default/train"]
    pods = event.payload["pods"]
    before = env.groups()

    dry = asyncio.run(capacity_for_pending(pods=pods, mode="dry-run", **env.blocks,
                                           return_state=True))
    assert dry.is_completed(), dry.message
    assert dry.message.startswith("dry run: would raise 1 pool(s) (+21.96 $/h): pool a100: "
                                  "0 -> 1 node(s) for default/train")
    assert env.groups() == before and slack_fake.messages() == []

    run = CapacityThread(pods=pods, mode="apply", **env.blocks)
    message = approve(slack_fake)
    assert "Capacity for pending GPU pods: +21.96 $/h" in str(message["blocks"])
    state = run.result()
    assert state.is_completed() and state.name == "Completed", state.message
    after = env.groups()
    assert after["a100"] == (1, 4, 1)  # the node group's minSize raised, desired with it
    assert {k: v for k, v in after.items() if k != "a100"} == \
        {k: v for k, v in before.items() if k != "a100"}
    wait_for(lambda: len(env.nodes("a100")) == 1, timeout=30, message="the a100 node")

    # The event again (the next rebalance, or a replay) while the node boots: no new raise.
    again = asyncio.run(capacity_for_pending(pods=pods, mode="apply", **env.blocks,
                                             return_state=True))
    assert again.name == "NoChange", again.message
    assert "1 node(s) already requested, not Ready yet" in again.message
    assert env.groups() == after
    core.delete_namespaced_pod("train", "default")
    gone = asyncio.run(capacity_for_pending(pods=pods, mode="apply", **env.blocks,
                                            return_state=True))
    assert gone.name == "NothingPending" and "default/train: gone" in gone.message


def test_the_served_deployment_is_triggered_by_capacity_needed_and_dry_runs_unless_applying():
    from gpuops.deployments.serve import deployments
    from gpuops.sensors.emitter import build_event

    def served(**kwargs: str) -> Any:
        [d] = [d for d in deployments(**kwargs) if d.flow_name == "capacity-for-pending"]
        return d

    needed = build_event(obj="gpu", what="capacity-needed", cluster="prod", kind="Cluster",
                         namespace=None, name="prod", identity="run-1", payload={})
    stranded = build_event(obj="gpu", what="stranded", cluster="prod", kind="Cluster",
                           namespace=None, name="prod", identity="episode-1", payload={})
    deployment = served(approval_policy="oncall")
    [trigger] = deployment.triggers
    assert needed.event in trigger.expect and stranded.event not in trigger.expect
    assert trigger.match.includes([needed.resource])
    assert trigger.parameters == {"pods": "{{ event.payload.pods }}",
                                  "event_id": "{{ event.id | string }}"}
    assert deployment.parameters == {"mode": "dry-run", "policy_block": "oncall"}
    assert served(capacity_mode="apply").parameters == {"mode": "apply"}
    assert deployment.concurrency_limit == 1
