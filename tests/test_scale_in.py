"""Scale-in of chosen nodes (cordon, drain, terminate with decrement) and GPU consolidation,
end to end: simcluster over HTTP with moto behind its node pools (an Auto Scaling group per
pool, the one behind each EKS managed node group included, scaling in as AWS's default
termination policy does), a real Prometheus and Prefect server, the Slack fake.

The pools at the test's time (10:30, busy from 11:00, lead time 1 h): the plan holds 3 h100
nodes (1 now), 2 l4 nodes (3 now, minimum 1) and no a100 node (1 now)."""

from __future__ import annotations

import asyncio
import json
import textwrap
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run
from prefect.states import Crashed

from gpuops.common.annotations import SCALE_IN_CORDONED, SCALE_IN_EXPIRES, SCALE_IN_RUN
from gpuops.flows.gpu_consolidate import gpu_consolidate
from tests import helpers
from tests.helpers import wait_for
from tests.test_capacity_prewarm import (  # noqa: F401 (fixtures)
    CLUSTER,
    Env,
    boto,
    moto_url,
    prometheus,
    run_flow,
    save_blocks,
)

pytestmark = pytest.mark.timeout(240)

SCENARIO = textwrap.dedent(f"""\
    cluster: {{name: {CLUSTER}}}
    namespaces: [default]
    pools:
      - {{name: h100, instanceType: p5.48xlarge, gpuProduct: NVIDIA-H100-80GB-HBM3,
         gpusPerNode: 8, cpu: 192, memory: 2048Gi, minSize: 0, maxSize: 6, desiredSize: 1,
         provisioningLagSeconds: 240, zones: [us-east-1a], backing: eks}}
      - {{name: a100, instanceType: p4d.24xlarge, gpuProduct: NVIDIA-A100-SXM4-40GB,
         gpusPerNode: 8, cpu: 96, memory: 1152Gi, minSize: 0, maxSize: 4, desiredSize: 1,
         zones: [us-east-1a], backing: eks}}
      - {{name: l4, instanceType: g6.12xlarge, gpuProduct: NVIDIA-L4, gpusPerNode: 4,
         cpu: 48, memory: 192Gi, minSize: 1, maxSize: 6, desiredSize: 3,
         provisioningLagSeconds: 210, zones: [us-east-1a], backing: asg}}
      - {{name: cpu, instanceType: m6i.4xlarge, cpu: 16, memory: 64Gi, minSize: 1,
         maxSize: 3, desiredSize: 1, zones: [us-east-1a], backing: eks}}
    sim: {{aws_poll_seconds: 1.0}}
    """)
L4_GROUP = f"{CLUSTER}-l4"


class Cluster(Env):
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.sim.api)

    def node_names(self, pool: str) -> set[str]:
        return {n.metadata.name for n in self.nodes(pool)}

    def instance_of(self, node: str) -> str:
        return self.core().read_node(node).spec.provider_id.rsplit("/", 1)[-1]

    def asg(self, name: str) -> dict[str, Any]:
        return boto("autoscaling", self.aws_url).describe_auto_scaling_groups(
            AutoScalingGroupNames=[name])["AutoScalingGroups"][0]

    def nodegroup_asg(self, pool: str) -> str:
        group = boto("eks", self.aws_url).describe_nodegroup(
            clusterName=CLUSTER, nodegroupName=pool)["nodegroup"]
        return group["resources"]["autoScalingGroups"][0]["name"]

    def live_instances(self, group: str) -> set[str]:
        return {i["InstanceId"] for i in self.asg(group)["Instances"]
                if i["LifecycleState"] in ("InService", "Pending")}

    def gpu_pod(self, name: str, node: str, gpus: int = 1) -> None:
        """A running pod on `node` holding `gpus` GPUs (bound there, as the scheduler would)."""
        self.core().create_namespaced_pod("default", {
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": node, "containers": [{
                "name": "main", "image": "vllm:1",
                "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                              "limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]}})
        wait_for(lambda: self.core().read_namespaced_pod(name, "default").status.phase
                 == "Running", message=f"pod {name} running")

    def deployment_on(self, name: str, node: str) -> None:
        """A one-replica Deployment whose pod runs on `node`: the other nodes are cordoned
        while it is scheduled, then uncordoned."""
        others = [n.metadata.name for n in self.core().list_node().items
                  if n.metadata.name != node]
        for other in others:
            self.core().patch_node(other, {"spec": {"unschedulable": True}})
        client.AppsV1Api(self.sim.api).create_namespaced_deployment("default", {
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "containers": [{"name": "main", "image": "nginx:1", "resources": {
                             "requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}})
        wait_for(lambda: any(p.metadata.name.startswith(name) and p.status.phase == "Running"
                             for p in self.core().list_namespaced_pod(
                                 "default", field_selector=f"spec.nodeName={node}").items),
                 timeout=20, message=f"{name}'s pod running on {node}")
        for other in others:
            self.core().patch_node(other, {"spec": {"unschedulable": None}})

    def pods_on(self, node: str) -> set[str]:
        return {p.metadata.name for p in self.core().list_namespaced_pod(
            "default", field_selector=f"spec.nodeName={node}").items}


@pytest.fixture
def cluster(prefect_server, prometheus, moto_url, sim_factory, tmp_path):  # noqa: F811
    def make(slack_url: str | None = None, **overrides: Any) -> Cluster:
        urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset",
                                                      method="POST"), timeout=10).read()
        scenario = tmp_path / "scale-in.yaml"
        scenario.write_text(SCENARIO)
        sim = sim_factory(str(scenario), aws_endpoint=moto_url)
        env = Cluster(sim, moto_url, prometheus,
                      save_blocks(moto_url, sim, prometheus, slack_url, **overrides))
        wait_for(lambda: len(env.groups()) == 4 and len(env.nodes("l4")) == 3
                 and len(env.live_instances(L4_GROUP)) == 3,
                 timeout=30, message="node groups, ASGs and the l4 nodes in moto")
        return env
    return make


def busy_l4(env: Cluster) -> tuple[list[str], str]:
    """GPU pods on two l4 nodes, one of them the instance a bare decrease terminates (the
    first of the group's list); returns (the busy nodes, the empty one)."""
    first = env.asg(L4_GROUP)["Instances"][0]["InstanceId"]
    nodes = sorted(env.node_names("l4"), key=lambda n: env.instance_of(n) != first)
    busy, empty = nodes[:2], nodes[2]
    assert env.instance_of(busy[0]) == first
    for i, node in enumerate(busy):
        env.gpu_pod(f"llama-{i}", node, gpus=2)
    return busy, empty


# --- capacity pre-warm's scale-in ---------------------------------------------------------

def test_prewarm_scale_in_removes_the_empty_node_not_the_busy_one_aws_would_pick(cluster):
    env = cluster()
    busy, empty = busy_l4(env)
    empty_instance = env.instance_of(empty)
    state = run_flow(mode="apply", **env.blocks)
    assert state.is_completed(), state.message
    assert state.result()["targets"]["l4"] == 2
    wait_for(lambda: empty not in env.node_names("l4"), timeout=20,
             message="the empty l4 node gone")
    assert env.node_names("l4") == set(busy)  # both GPU nodes kept, with their pods
    assert {p for n in busy for p in env.pods_on(n)} == {"llama-0", "llama-1"}
    assert empty_instance not in env.live_instances(L4_GROUP)
    assert env.asg(L4_GROUP)["DesiredCapacity"] == 2
    assert f"node {empty} ({empty_instance}): removed" in state.message


def test_prewarm_scale_in_without_an_empty_node_removes_nothing_and_says_so(cluster):
    env = cluster()
    busy, empty = busy_l4(env)
    # A CPU pod on the third node: not GPU use (the plan still wants 2), yet not empty.
    env.gpu_pod("sidecar", empty, gpus=0)
    state = run_flow(mode="apply", **env.blocks)
    assert state.is_completed(), state.message
    assert "no empty node to remove: removed nothing" in state.message
    assert env.node_names("l4") == {*busy, empty}
    assert env.asg(L4_GROUP)["DesiredCapacity"] == 3


# --- consolidation -------------------------------------------------------------------------

def consolidate(env: Cluster, **params: Any) -> Any:
    return asyncio.run(gpu_consolidate(idle_for_s=0, **_blocks(env), **params,
                                       return_state=True))


def _blocks(env: Cluster) -> dict[str, str]:
    return {k: v for k, v in env.blocks.items()
            if k in ("config_block", "aws_block", "cluster_block", "slack_block",
                     "policy_block")}


def publish_plan(env: Cluster) -> None:
    """The capacity plan consolidation reads: a pre-warm dry run publishes it too."""
    assert run_flow(mode="dry-run", **env.blocks).is_completed()


class ConsolidateThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(gpu_consolidate(**params, return_state=True))


def approve(slack_fake: Any, approved: bool = True) -> dict[str, Any]:
    message = wait_for(lambda: next((m for m in slack_fake.messages() if m.get("blocks")),
                                    None), timeout=60, message="the approval request in Slack")
    value = next(e["value"] for b in message["blocks"] if b["type"] == "actions"
                 for e in b["elements"])
    run_id = json.loads(value)["flow_run_id"]

    async def paused() -> bool:
        async with get_client() as c:
            run = await c.read_flow_run(uuid.UUID(run_id))
            return bool(run.state and run.state.is_paused())
    wait_for(lambda: asyncio.run(paused()), timeout=60, message="the run to pause")
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": approved, "approver": "ops@ui"})
    return message


def test_consolidation_removes_only_the_idle_node_the_plan_does_not_hold(cluster,
                                                                         slack_fake):
    env = cluster(slack_url=slack_fake.base_url)
    busy, empty = busy_l4(env)
    publish_plan(env)
    a100 = next(iter(env.node_names("a100")))
    a100_instance, a100_group = env.instance_of(a100), env.nodegroup_asg("a100")
    h100 = env.node_names("h100")
    empty_instance = env.instance_of(empty)
    env.deployment_on("web", empty)  # no GPU pod, but a pod that fits elsewhere
    [web] = env.pods_on(empty)

    run = ConsolidateThread(idle_for_s=0, **_blocks(env))
    message = approve(slack_fake)
    text = json.dumps(message["blocks"])
    assert empty in text and a100 in text and "-26.56 $/h" in text  # 21.96 + 4.60
    assert f"moves default/{web}" in text
    state = run.result()
    assert state.is_completed(), state.message
    assert sorted(state.result()["removed"]) == sorted([empty, a100])
    kept = state.result()["kept"]
    assert all("runs GPU pods" in kept[n] for n in busy)
    assert all("capacity plan holds 3" in kept[n] for n in h100)

    wait_for(lambda: empty not in env.node_names("l4") and not env.node_names("a100"),
             timeout=20, message="the idle nodes gone")
    assert env.node_names("l4") == set(busy) and env.node_names("h100") == h100
    assert empty_instance not in env.live_instances(L4_GROUP)
    assert env.asg(L4_GROUP)["DesiredCapacity"] == 2
    wait_for(lambda: any(p.metadata.name.startswith("web-") and p.status.phase == "Running"
                         and p.spec.node_name in env.node_names("l4") | h100 | {
                             n.metadata.name for n in env.nodes("cpu")}
                         for p in env.core().list_namespaced_pod("default").items),
             timeout=20, message="web's replacement running on a remaining node")
    # The managed node group: that instance gone from the group behind it, sizes decremented.
    assert a100_instance not in env.live_instances(a100_group)
    assert env.asg(a100_group)["DesiredCapacity"] == 0
    wait_for(lambda: env.groups()["a100"][2] == 0, message="the node group's desiredSize 0")

    again = consolidate(env)  # at the plan's 2 l4 nodes and the minimum of the others
    assert again.name == "NothingToConsolidate", again.message


def test_consolidation_dry_run_changes_nothing(cluster):
    env = cluster()
    _, empty = busy_l4(env)
    publish_plan(env)
    a100 = next(iter(env.node_names("a100")))
    env.core().create_namespaced_pod("default", {  # no controller would recreate it
        "metadata": {"name": "bare"}, "spec": {"nodeName": a100, "containers": [
            {"name": "main", "image": "busybox:1"}]}})
    wait_for(lambda: env.core().read_namespaced_pod("bare", "default").status.phase
             == "Running", message="the bare pod running")
    before = (env.groups(), {p: env.node_names(p) for p in ("h100", "a100", "l4")},
              {n.metadata.name: (n.metadata.annotations, n.spec.unschedulable)
               for n in env.core().list_node().items})
    state = consolidate(env, dry_run=True)
    assert state.is_completed(), state.message
    assert state.result()["chosen"] == [empty]
    assert "default/bare may not move: no controller" in state.result()["kept"][a100]
    assert "would remove" in state.message
    after = (env.groups(), {p: env.node_names(p) for p in ("h100", "a100", "l4")},
             {n.metadata.name: (n.metadata.annotations, n.spec.unschedulable)
              for n in env.core().list_node().items})
    assert after == before


def test_consolidation_without_a_capacity_plan_holds_every_pool(cluster, prefect_server):
    env = cluster()
    state = consolidate(env, plan_max_age_s=0)  # any plan is too old
    assert state.name == "NothingToConsolidate", state.message
    assert "every pool held as it is" in state.result()["plan"]
    assert len(env.nodes("l4")) == 3 and len(env.nodes("a100")) == 1


async def _crashed_run() -> str:
    """A flow run that died mid-removal (its process killed): the server shows it Crashed."""
    async with get_client() as c:
        created = await c.create_flow_run(gpu_consolidate, name="killed-mid-drain")
        await c.set_flow_run_state(created.id, Crashed(message="killed"), force=True)
        return str(created.id)


def test_a_removal_left_mid_drain_by_a_crashed_run_is_undone_then_finished(cluster,
                                                                          slack_fake):
    env = cluster(slack_url=slack_fake.base_url)
    busy, empty = busy_l4(env)
    publish_plan(env)
    crashed = asyncio.run(_crashed_run())
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    marks = {SCALE_IN_RUN: crashed, SCALE_IN_CORDONED: "true", SCALE_IN_EXPIRES: expires}
    # What the crashed run left: a busy node cordoned and recorded mid-drain, its pod still
    # there (the plan no longer wants it removed), and the idle node likewise.
    for node in (busy[1], empty):
        env.core().patch_node(node, {"metadata": {"annotations": marks},
                                     "spec": {"unschedulable": True}})

    run = ConsolidateThread(idle_for_s=0, **_blocks(env))
    approve(slack_fake)
    state = run.result()
    assert state.is_completed(), state.message
    assert any(busy[1] in line and crashed in line for line in state.result()["settled"])
    busy_node = env.core().read_node(busy[1])
    assert not busy_node.spec.unschedulable  # gpuops' cordon taken back
    assert SCALE_IN_RUN not in (busy_node.metadata.annotations or {})
    assert env.pods_on(busy[1]) == {"llama-1"}
    assert empty in state.result()["removed"]  # the idle one: the removal finished
    wait_for(lambda: empty not in env.node_names("l4"), timeout=20,
             message="the idle node gone")


def test_the_served_deployment_is_triggered_by_the_watchers_gpu_idle_event_and_a_schedule():
    from gpuops.deployments.serve import deployments
    from gpuops.sensors.emitter import build_event

    def served(**kwargs: str) -> Any:
        [d] = [d for d in deployments(**kwargs) if d.flow_name == "gpu-consolidate"]
        return d

    consolidation = served(approval_policy="oncall")
    idle = build_event(obj="node", what="gpu-idle", cluster="prod", kind="Node",
                       namespace=None, name="gpu-1", identity="episode-1", payload={})
    stranded = build_event(obj="gpu", what="stranded", cluster="prod", kind="Cluster",
                           namespace=None, name="prod", identity="episode-1", payload={})
    [trigger] = consolidation.triggers
    assert idle.event in trigger.expect and stranded.event not in trigger.expect
    assert trigger.match.includes([idle.resource])
    assert not trigger.match.includes([stranded.resource])
    assert trigger.parameters == {"event_id": "{{ event.id | string }}"}
    # Removing nodes is a pool change: a dry run unless capacity changes are applied.
    assert consolidation.parameters == {"dry_run": True, "policy_block": "oncall"}
    assert served(capacity_mode="apply").parameters == {"dry_run": False}
    assert consolidation.schedules and consolidation.concurrency_limit == 1


def test_a_drain_a_disruption_budget_blocks_keeps_the_node_and_undoes_the_cordon(cluster,
                                                                                slack_fake):
    env = cluster(slack_url=slack_fake.base_url)
    _, empty = busy_l4(env)
    publish_plan(env)
    env.deployment_on("web", empty)
    [web] = env.pods_on(empty)
    instance = env.instance_of(empty)

    run = ConsolidateThread(idle_for_s=0, **_blocks(env))
    # The budget comes while the approval waits: the plan had room to move web, the drain
    # no longer has (a budget there at planning time keeps the node: test_gpu_consolidate).
    wait_for(lambda: any(m.get("blocks") for m in slack_fake.messages()), timeout=60,
             message="the approval request in Slack")
    policy = client.PolicyV1Api(env.sim.api)
    policy.create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget(
        "web", "default").status.expected_pods == 1, message="the budget's status")
    approve(slack_fake)
    state = run.result()
    assert state.is_completed(), state.message
    assert state.result()["outcomes"][empty] == "blocked"
    node = env.core().read_node(empty)
    assert not node.spec.unschedulable  # gpuops' cordon taken back
    assert SCALE_IN_RUN not in (node.metadata.annotations or {})
    assert env.pods_on(empty) == {web}
    assert instance in env.live_instances(L4_GROUP)
    assert env.asg(L4_GROUP)["DesiredCapacity"] == 3  # unchanged (the a100 node went)


# --- pure parts and bad input ---------------------------------------------------------------

def test_a_node_without_an_ec2_provider_id_is_refused_naming_the_field():
    from gpuops.tasks.actions.removable import instance_id

    assert instance_id({"metadata": {"name": "n"},
                        "spec": {"providerID": "aws:///us-east-1a/i-0abc"}}) == "i-0abc"
    with pytest.raises(ValueError, match=r"node 'n': spec.providerID 'gce://p/z/n' names no"):
        instance_id({"metadata": {"name": "n"}, "spec": {"providerID": "gce://p/z/n"}})


def test_a_capacity_plan_row_without_a_target_is_refused_naming_the_row():
    from gpuops.tasks.rebalance.consolidation import held_by_plan

    assert held_by_plan([{"pool": "l4", "target": 2}]) == {"l4": 2}
    with pytest.raises(ValueError, match=r"capacity-targets row 1: no integer `target`"):
        held_by_plan([{"pool": "l4", "target": 2}, {"pool": "h100", "target": "many"}])


def test_a_negative_idle_threshold_is_refused_before_anything_is_read(prefect_server):
    state = asyncio.run(gpu_consolidate(idle_for_s=-1, return_state=True))
    assert state.is_failed()
    with pytest.raises(ValueError, match=r"idle_for_s \(-1"):
        state.result()
