"""Pre-warm and wait (`no_room: prewarm`): no spare GPUs for a blue-green copy, so the rollout
names its new pods the scheduler cannot place to the capacity side
(`gpuops.gpu.capacity-needed`), whose flow raises the node pool (moto behind simcluster's
pools, as the capacity tests use); once the new node holds them the rollout goes blue-green.
When the GPUs do not come in time the new pods go (none is left Pending) and the rollout falls
back to fixed-capacity, or stops, as the person chose."""

from __future__ import annotations

import asyncio
import textwrap
import urllib.request
import uuid
from datetime import UTC, datetime

import pytest

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import AwsConnection, KubernetesCluster
from gpuops.deployments.services import host_port
from gpuops.flows.capacity_for_pending import capacity_for_pending
from tests.helpers import stored_events, wait_for
from tests.serving_rollout.stack import (
    MODEL,
    NS,
    SPEED,
    RolloutThread,
    Stack,
    artifacts,
    failed_scheduling,
    new_pool_of,
    no_pod_pending,
    rollout,
    save_blocks,
    timeline,
)
from tests.test_capacity_prewarm import boto, moto_url  # noqa: F401

pytestmark = pytest.mark.timeout(420)

# One L4 node of 2 GPUs in an EKS node group that may grow to 3; the old version fills it.
SCENARIO = textwrap.dedent("""\
    cluster: {name: test}
    namespaces: [default]
    pools:
      - {name: l4, instanceType: g6.12xlarge, gpuProduct: NVIDIA-L4, gpusPerNode: 2,
         cpu: 48, memory: 192Gi, minSize: 1, maxSize: 3, desiredSize: 1,
         provisioningLagSeconds: 60, zones: [us-east-1a], backing: eks}
    sim: {aws_poll_seconds: 0.3}
    """)


def _l4_sizes(moto: str) -> tuple[int, int, int] | None:
    """The node group's (min, max, desired), None before it exists."""
    eks = boto("eks", moto)
    if "test" not in eks.list_clusters()["clusters"] or \
            "l4" not in eks.list_nodegroups(clusterName="test")["nodegroups"]:
        return None
    s = eks.describe_nodegroup(clusterName="test", nodegroupName="l4")["nodegroup"][
        "scalingConfig"]
    return s["minSize"], s["maxSize"], s["desiredSize"]


def _l4_nodes(stack: Stack) -> list:
    return stack.core.list_node(label_selector="gpuops.io/pool=l4").items


def _capacity_blocks(sim, moto: str, prometheus: str) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = {"config_block": f"capacity-{suffix}", "aws_block": f"aws-{suffix}",
             "cluster_block": f"capacity-cluster-{suffix}"}

    async def save() -> None:
        await CapacityConfig(
            pools=[{"name": "l4", "instance_type": "g6.12xlarge", "gpus_per_node": 2,
                    "price_per_hour": 4.6, "min_size": 1, "max_size": 3}],
            models=[{"name": MODEL, "gpus_per_replica": 1, "allowed_pools": ["l4"],
                     "throughput_per_replica": 30 * 3600}],
            prometheus_url=prometheus, approval_cost_per_hour=500.0,
        ).save(names["config_block"])
        await AwsConnection(endpoint_url=moto, access_key_id="testing",
                            secret_access_key="testing").save(names["aws_block"])
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(sim.kubeconfig)
                                ).save(names["cluster_block"])

    asyncio.run(save())
    return names


def test_without_spare_gpus_the_rollout_asks_for_a_node_waits_for_it_and_goes_blue_green(
        sim_factory, moto_url, prometheus_scraping, slack_fake, prefect_server,  # noqa: F811
        tmp_path):
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset",
                                                  method="POST"), timeout=10).read()
    (tmp_path / "prewarm.yaml").write_text(SCENARIO)
    sim = sim_factory(str(tmp_path / "prewarm.yaml"), speed=SPEED, aws_endpoint=moto_url,
                      extra={"demand": {MODEL: {"baseRps": 40, "peakRps": 40}}})
    wait_for(lambda: _l4_sizes(moto_url), timeout=60, message="the node group in moto")
    stack = Stack(sim, gpus=0)
    wait_for(lambda: len(_l4_nodes(stack)) == 1, timeout=60, message="the first L4 node")
    stack.deploy(replicas=2)  # its 2 GPUs taken
    prometheus = prometheus_scraping(host_port(sim.url))
    blocks = save_blocks(stack, prometheus, slack_fake, min_requests=30, no_room="prewarm",
                         prewarm_timeout_s=150)
    capacity = _capacity_blocks(sim, moto_url, prometheus)
    since = datetime.now(UTC)
    run = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0", **blocks)

    # The capacity side's part, as its served deployment runs on the event
    # (`capacity-for-pending/on-capacity-needed`, parameters from the payload).
    [event] = wait_for(lambda: stored_events("gpuops.gpu.capacity-needed", since),
                       timeout=120, message="the rollout's capacity-needed event")
    pods = event.payload["pods"]
    assert len(pods) == 2 and all(p.startswith(f"{NS}/{MODEL}-") for p in pods), pods
    raised = asyncio.run(capacity_for_pending(pods=pods, mode="apply", **capacity,
                                              return_state=True))
    assert raised.is_completed() and raised.name == "Completed", raised.message
    assert _l4_sizes(moto_url) == (2, 3, 2)  # one node more for the 2 new replicas

    state = run.result(timeout=360)
    assert state.is_completed(), state.message
    summary = state.result()
    assert summary["mode"] == "blue-green"
    assert any("pre-warm: all 2 new replica(s) placed" in n for n in summary["notes"])
    assert timeline(state) == [(1, "passed"), (5, "passed"), (25, "passed"), (50, "passed"),
                               (100, "passed")]
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100}
    assert len(_l4_nodes(stack)) == 2 and stack.ready_pods(new) == 2
    assert "pre-warm" in artifacts(state)["serving-rollout-plan"]
    assert no_pod_pending(stack)


def test_a_prewarm_no_gpus_answer_falls_back_to_fixed_capacity_with_nothing_left_pending(
        full_stack, prometheus_scraping, slack_fake, prefect_server):
    stack = full_stack
    stack.deploy(replicas=4)
    # Nothing handles the event here (as with the capacity side in dry run): no node comes.
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         min_requests=30, no_room="prewarm", prewarm_timeout_s=3)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    summary = state.result()
    assert summary["mode"] == "fixed-capacity"
    [note] = [n for n in summary["notes"] if "pre-warm" in n]
    assert "still not placed after 3 s" in note and "fixed-capacity" in note
    assert timeline(state) == [(25, "passed"), (50, "passed"), (75, "passed")]
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100} and stack.ready_pods(new) == 4
    assert no_pod_pending(stack)


def test_a_prewarm_that_times_out_with_fallback_fail_stops_and_removes_its_pods(
        full_stack, prometheus_scraping, slack_fake, prefect_server):
    stack = full_stack
    stack.deploy(replicas=4)
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         no_room="prewarm", prewarm_timeout_s=3, prewarm_fallback="fail")
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert "pre-warm" in state.message and "prewarm_fallback: fail" in state.message
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    assert stack.deployments()[new] == 0 and stack.deployments()[MODEL] == 4
    wait_for(lambda: no_pod_pending(stack) and stack.ready_pods(MODEL) == 4, timeout=60,
             interval=0.2, message="the old version at 4 Ready replicas, nothing Pending")
    # the only pods that ever waited for a GPU were the pre-warm's, now gone
    assert failed_scheduling(stack) and all(p.startswith(new) for p in failed_scheduling(stack))
