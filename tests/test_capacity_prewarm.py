"""Capacity pre-warm end to end: a real Prometheus back-filled with two weeks of vLLM request
counters, moto's server behind simcluster's node pools, a real Prefect server, the Slack
fake; plus the pure target rule and the Block's validation."""

from __future__ import annotations

import asyncio
import json
import subprocess
import textwrap
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from kubernetes import client
from moto.server import ThreadedMotoServer
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run
from pydantic import ValidationError
from typer.testing import CliRunner

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import AwsConnection, KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import LimitViolation, PrometheusQueryError, PrometheusUnavailable
from gpuops.deployments.cli import app
from gpuops.deployments.services import free_port
from gpuops.flows.capacity_prewarm import capacity_prewarm
from gpuops.tasks.actions.nodepools import PlaceholderCapacity
from gpuops.tasks.capacity.plan import CapacityPlan, NodePoolSpec
from gpuops.tasks.capacity.prewarm import PoolState, derive_targets, placeholder_pods, pool_usage
from gpuops.tasks.clients.aws import Aws, GpuBudget
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus
from tests import helpers
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(150)

CLUSTER = "prewarm"
NOW = datetime(2026, 3, 15, 10, 30, tzinfo=UTC)  # 10:00 is quiet, busy from 11:00 to 20:59
BUSY_HOURS = range(11, 21)
# requests/s: (quiet, busy). qwen: 3 rps per 4-GPU replica -> 1 / 3 H100 nodes;
# llama: 8 rps per 1-GPU replica -> 1 / 2 L4 nodes.
DEMAND = {"qwen-72b": (2.0, 13.5), "llama-3-8b": (6.0, 40.0)}

SCENARIO = textwrap.dedent(f"""\
    cluster: {{name: {CLUSTER}}}
    namespaces: [default]
    pools:
      - {{name: h100, instanceType: p5.48xlarge, gpuProduct: NVIDIA-H100-80GB-HBM3,
         gpusPerNode: 8, cpu: 192, memory: 2048Gi, minSize: 0, maxSize: 6, desiredSize: 1,
         provisioningLagSeconds: 240, zones: [us-east-1a], backing: eks,
         taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]}}
      - {{name: a100, instanceType: p4d.24xlarge, gpuProduct: NVIDIA-A100-SXM4-40GB,
         gpusPerNode: 8, cpu: 96, memory: 1152Gi, minSize: 0, maxSize: 4, desiredSize: 0,
         zones: [us-east-1a], backing: eks}}
      - {{name: l4, instanceType: g6.12xlarge, gpuProduct: NVIDIA-L4, gpusPerNode: 4,
         cpu: 48, memory: 192Gi, minSize: 1, maxSize: 6, desiredSize: 1,
         provisioningLagSeconds: 210, zones: [us-east-1a], backing: asg}}
      - {{name: cpu, instanceType: m6i.4xlarge, cpu: 16, memory: 64Gi, minSize: 1,
         maxSize: 3, desiredSize: 1, zones: [us-east-1a], backing: eks}}
    sim: {{aws_poll_seconds: 1.0}}
    """)


def config(prometheus_url: str, **overrides: Any) -> CapacityConfig:
    values: dict[str, Any] = {
        "pools": [
            {"name": "h100", "instance_type": "p5.48xlarge", "gpus_per_node": 8,
             "price_per_hour": 55.04, "max_size": 6, "lead_time_hours": 1},
            {"name": "a100", "instance_type": "p4d.24xlarge", "gpus_per_node": 8,
             "price_per_hour": 21.96, "max_size": 4, "lead_time_hours": 1},
            {"name": "l4", "instance_type": "g6.12xlarge", "gpus_per_node": 4,
             "price_per_hour": 4.6, "min_size": 1, "max_size": 6, "lead_time_hours": 1,
             "backing": "asg", "aws_name": f"{CLUSTER}-l4"},
        ],
        "models": [
            {"name": "qwen-72b", "gpus_per_replica": 4, "allowed_pools": ["h100"],
             "throughput_per_replica": 3 * 3600},
            {"name": "llama-3-8b", "gpus_per_replica": 1, "allowed_pools": ["l4"],
             "throughput_per_replica": 8 * 3600},
        ],
        "quotas": [{"family": "p5", "max_gpus": 48}],
        "prometheus_url": prometheus_url, "approval_cost_per_hour": 500.0,
        "time_limit_s": 20,
    }
    values.update(overrides)
    return CapacityConfig(**values)


# --- servers -----------------------------------------------------------------------------------

def openmetrics_history(now: datetime, days: int = 15) -> str:
    """Per-minute vLLM request counters: the same day every day, with a 3-hour scrape gap
    (qwen, 12 days ago) and a counter reset (llama, 10 days ago: the server restarted)."""
    lines = ["# HELP vllm:request_success Count of successfully processed requests.",
             "# TYPE vllm:request_success counter"]
    start = (now - timedelta(days=days)).replace(hour=0, minute=0)
    gap = (now - timedelta(days=12)).replace(hour=3, minute=0)
    reset = (now - timedelta(days=10)).replace(hour=5, minute=0)
    for model, (quiet, busy) in DEMAND.items():
        total, t = 0.0, start
        while t < now:
            total += (busy if t.hour in BUSY_HOURS else quiet) * 60
            t += timedelta(minutes=1)
            if model == "llama-3-8b" and t == reset:
                total = (busy if t.hour in BUSY_HOURS else quiet) * 60
            if model == "qwen-72b" and gap <= t < gap + timedelta(hours=3):
                continue
            lines.append(f'vllm:request_success_total{{model_name="{model}"}} {total} '
                         f"{int(t.timestamp())}")
    return "\n".join(lines + ["# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[str]:
    """A real Prometheus whose TSDB was back-filled with `promtool` (FACTS.md)."""
    root = tmp_path_factory.mktemp("prometheus")
    (root / "history.om").write_text(openmetrics_history(NOW))
    (root / "prometheus.yml").write_text("global: {}\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=336h", str(root / "history.om"), str(root / "data")],
                   check=True, capture_output=True, timeout=60)
    port = free_port()
    server = subprocess.Popen(
        ["prometheus", f"--config.file={root / 'prometheus.yml'}",
         f"--storage.tsdb.path={root / 'data'}", "--storage.tsdb.retention.time=3650d",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200,
                 timeout=20, message="Prometheus ready")
        yield url
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def boto(service: str, url: str):
    return boto3.client(service, endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@dataclass
class Env:
    sim: Any
    aws_url: str
    prometheus: str
    blocks: dict[str, str]

    def groups(self) -> dict[str, tuple[int, int, int]]:
        """Every node group and self-managed ASG in moto: (min, max, desired).

        The ASG behind each managed node group (``eks-<group>-...``, as EKS names it)
        is left out: its sizes are the node group's, listed once under the group."""
        eks, asg = boto("eks", self.aws_url), boto("autoscaling", self.aws_url)
        sizes = {}
        for name in eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"]:
            s = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=name)[
                "nodegroup"]["scalingConfig"]
            sizes[name] = (s["minSize"], s["maxSize"], s["desiredSize"])
        for g in asg.describe_auto_scaling_groups()["AutoScalingGroups"]:
            if g["AutoScalingGroupName"].startswith("eks-"):
                continue
            sizes[g["AutoScalingGroupName"]] = (g["MinSize"], g["MaxSize"],
                                                g["DesiredCapacity"])
        return sizes

    def nodes(self, pool: str) -> list:
        return client.CoreV1Api(self.sim.api).list_node(
            label_selector=f"gpuops.io/pool={pool}").items


def save_blocks(env_url: str, sim, prometheus_url: str, slack_url: str | None = None,
                **overrides: Any) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = {"config_block": f"capacity-{suffix}", "aws_block": f"aws-{suffix}",
             "cluster_block": f"cluster-{suffix}", "slack_block": f"slack-{suffix}",
             "policy_block": f"policy-{suffix}"}

    async def save() -> None:
        await config(prometheus_url, **overrides).save(names["config_block"])
        await AwsConnection(endpoint_url=env_url, access_key_id="testing",
                            secret_access_key="testing").save(names["aws_block"])
        await KubernetesCluster(cluster_name=CLUSTER, kubeconfig_path=str(sim.kubeconfig)
                                ).save(names["cluster_block"])
        await SlackConnection(bot_token="xoxb-test", signing_secret="s3cret",
                              base_url=slack_url or "http://127.0.0.1:9/api/"
                              ).save(names["slack_block"])
        await ApprovalPolicy(channel="#ops", timeout_s=120, poll_interval_s=1,
                             expiry_grace_s=60).save(names["policy_block"])

    asyncio.run(save())
    return names


@pytest.fixture
def env_factory(prefect_server, prometheus, moto_url, sim_factory, tmp_path):
    def make(slack_url: str | None = None, **overrides: Any) -> Env:
        urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset",
                                                      method="POST"), timeout=10).read()
        scenario = tmp_path / "prewarm.yaml"
        scenario.write_text(SCENARIO)
        sim = sim_factory(str(scenario), aws_endpoint=moto_url)
        env = Env(sim, moto_url, prometheus,
                  save_blocks(moto_url, sim, prometheus, slack_url, **overrides))
        wait_for(lambda: len(env.groups()) == 4, timeout=60,
                 message="node groups and the ASG in moto")
        return env
    return make


def run_flow(**params: Any) -> Any:
    return asyncio.run(capacity_prewarm(now=NOW, **params, return_state=True))


class FlowThread(helpers.FlowThread):
    """The flow in a thread, for runs that pause for approval."""

    def run_flow(self, **params: Any) -> Any:
        return run_flow(**params)


async def _artifacts(flow_run_id: uuid.UUID) -> dict[str, Any]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as c:
        found = await c.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {a.key or a.type: a for a in found}


# --- end to end --------------------------------------------------------------------------------

def test_applying_changes_exactly_the_planned_groups_and_nodes_arrive_after_the_lag(
        env_factory):
    env = env_factory()
    before = env.groups()
    h100_before = {n.metadata.name for n in env.nodes("h100")}
    state = run_flow(mode="apply", **env.blocks)
    assert state.is_completed(), state.message
    summary = state.result()
    # 10:00 is quiet, 11:00 busy; the lead time is 1 h, so the busy hour is requested now.
    assert summary["targets"] == {"h100": 3, "a100": 0, "l4": 2}
    assert summary["cost_change_per_hour"] == pytest.approx(2 * 55.04 + 4.6)
    after = env.groups()
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"h100", f"{CLUSTER}-l4"}
    assert after["h100"] == (3, 6, 3)  # minSize raised; desired follows since it was below
    assert after[f"{CLUSTER}-l4"] == (1, 6, 2)

    artifacts = asyncio.run(_artifacts(state.state_details.flow_run_id))
    assert {"capacity-plan", "capacity-plan-cost", "capacity-forecast",
            "capacity-prewarm-summary"} <= set(artifacts)
    assert artifacts["capacity-forecast"].data.startswith("data:image/png;base64,")
    plan_rows = {row["pool"]: row for row in json.loads(artifacts["capacity-plan"].data)}
    assert (plan_rows["h100"]["10:00"], plan_rows["h100"]["11:00"]) == (1, 3)

    def new_h100() -> list:
        return [n for n in env.nodes("h100") if n.metadata.name not in h100_before]

    fresh = wait_for(lambda: len(new_h100()) == 2 and new_h100(), message="2 pre-warmed nodes")
    assert all(next(c.status for c in n.status.conditions if c.type == "Ready") == "False"
               for n in fresh)
    wait_for(lambda: len(env.nodes("l4")) == 2, message="a second l4 node")
    env.sim.advance(245)
    env.sim.advance(80)
    wait_for(lambda: all(n.status.allocatable.get("nvidia.com/gpu") == "8" and
                         next(c.status for c in n.status.conditions if c.type == "Ready")
                         == "True" for n in new_h100()),
             message="pre-warmed nodes Ready with their GPUs after the provisioning lag")

    again = run_flow(mode="apply", **env.blocks)  # every target held now: acts once
    assert again.result()["changes"] == []
    assert env.groups() == after


def test_plan_capacity_dry_run_from_the_cli_reports_the_change_and_changes_nothing(
        env_factory, slack_fake):
    env = env_factory(slack_url=slack_fake.base_url, approval_cost_per_hour=1.0)
    before = env.groups()
    args = ["plan", "capacity", "--dry-run", "--now", NOW.isoformat()]
    for name, value in env.blocks.items():
        args += [f"--{name.replace('_', '-')}", value]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "would change 2 pool setting(s)" in result.output
    assert env.groups() == before
    assert slack_fake.messages() == []  # a dry run asks no one
    artifacts = asyncio.run(_artifacts(asyncio.run(_latest_run_id())))
    actions = json.loads(artifacts["table"].data)
    assert {row["outcome"] for row in actions} == {"dry-run"}
    assert CliRunner().invoke(app, ["plan", "capacity", "--dry-run", "--apply"]).exit_code == 2


def test_the_hourly_deployment_of_a_new_install_is_a_dry_run_that_changes_nothing(env_factory):
    from gpuops.deployments.serve import deployments

    hourly = next(d for d in deployments() if d.name == "hourly")
    assert hourly.parameters["mode"] == "dry-run"  # explicit: shown in the UI's run form
    env = env_factory(approval_cost_per_hour=1.0)  # an apply run would ask for approval
    before = env.groups()
    state = run_flow(**{**hourly.parameters, **env.blocks})
    assert state.is_completed(), state.message
    assert state.message.startswith("dry run: would change 2 pool setting(s)")
    assert state.result()["mode"] == "dry-run"
    assert env.groups() == before
    artifacts = asyncio.run(_artifacts(state.state_details.flow_run_id))
    summary = artifacts["capacity-prewarm-summary"]
    assert summary.description == "Capacity pre-warm (dry run): what and why"
    assert summary.data.startswith("# Capacity pre-warm (dry run)")
    assert {row["outcome"] for row in json.loads(artifacts["table"].data)} == {"dry-run"}


async def _latest_run_id() -> uuid.UUID:
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as c:
        runs = await c.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(
            any_=["capacity-prewarm"])), sort=FlowRunSort.START_TIME_DESC, limit=1)
    return runs[0].id


def _paused_run(slack_fake) -> str:
    message = wait_for(lambda: next((m for m in slack_fake.messages() if m.get("blocks")), None),
                       timeout=60, message="the approval request in Slack")
    assert "Capacity pre-warm: +114.68 $/h" in json.dumps(message["blocks"])
    value = next(e["value"] for b in message["blocks"] if b["type"] == "actions"
                 for e in b["elements"])
    run_id = json.loads(value)["flow_run_id"]

    async def paused() -> bool:
        async with get_client() as c:
            run = await c.read_flow_run(uuid.UUID(run_id))
            return bool(run.state and run.state.is_paused())
    wait_for(lambda: asyncio.run(paused()), timeout=60, message="the run to pause")
    return run_id


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "rejected"])
def test_a_change_above_the_cost_threshold_waits_for_approval(env_factory, slack_fake,
                                                               approved):
    env = env_factory(slack_url=slack_fake.base_url, approval_cost_per_hour=100.0)
    before = env.groups()
    run = FlowThread(mode="apply", **env.blocks)
    run_id = _paused_run(slack_fake)
    assert env.groups() == before  # nothing before the answer
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": approved, "approver": "ops@ui"})
    state = run.result()
    if approved:
        assert state.name == "Completed"
        assert env.groups()["h100"] == (3, 6, 3)
    else:
        assert state.name == "NotApproved" and "nothing was applied" in state.message
        assert env.groups() == before


def test_a_demand_query_without_data_fails_naming_the_model(env_factory):
    env = env_factory(models=[{"name": "ghost", "gpus_per_replica": 1, "allowed_pools": ["l4"],
                               "throughput_per_replica": 100}])
    before = env.groups()
    state = run_flow(**env.blocks)
    assert state.is_failed()
    assert "models['ghost'].demand_query" in state.message
    assert env.groups() == before


# --- AWS verbs: limits checked before AWS sees them ----------------------------------------------

def test_limits_are_checked_before_aws_is_called(env_factory):
    env = env_factory()
    before = env.groups()
    aws = Aws.from_connection(AwsConnection(endpoint_url=env.aws_url, access_key_id="testing",
                                            secret_access_key="testing"))
    with pytest.raises(LimitViolation) as err:
        aws.update_nodegroup_scaling(CLUSTER, "h100", min_size=0, max_size=6, desired_size=9)
    assert err.value.field == "scalingConfig.desiredSize" and "above maxSize 6" in str(err.value)
    with pytest.raises(LimitViolation, match=r"^scalingConfig.minSize: 5 is above maxSize 4"):
        aws.update_nodegroup_scaling(CLUSTER, "h100", min_size=5, max_size=4, desired_size=5)
    with pytest.raises(LimitViolation, match=r"^DesiredCapacity: 7 is above MaxSize 6"):
        aws.set_asg_desired_capacity(f"{CLUSTER}-l4", 7)
    with pytest.raises(LimitViolation, match=r"quotas\['p5'\].max_gpus"):
        aws.update_nodegroup_scaling(CLUSTER, "h100", min_size=4, max_size=6, desired_size=4,
                                     budget=GpuBudget("p5", 24, 8))
    assert env.groups() == before
    aws.set_asg_desired_capacity(f"{CLUSTER}-l4", 3)
    assert aws.describe_asg(f"{CLUSTER}-l4").desired_size == 3
    aws.put_warm_pool(f"{CLUSTER}-l4", min_size=2)
    assert aws.describe_warm_pool(f"{CLUSTER}-l4")["MinSize"] == 2


def test_the_prometheus_client_maps_errors(prometheus):
    with pytest.raises(PrometheusQueryError, match="sum\\(rate"):
        Prometheus(prometheus).query("sum(rate(x[5m])")
    with pytest.raises(PrometheusUnavailable):
        Prometheus(f"http://127.0.0.1:{free_port()}", timeout_s=2).query("up")
    # A range longer than 11,000 points is split into several requests, seamlessly.
    series = Prometheus(prometheus).range_one(
        'sum(rate(vllm:request_success_total{model_name="qwen-72b"}[5m]))',
        NOW - timedelta(days=9), NOW, timedelta(minutes=1))
    assert len(series) == 9 * 1440 + 1
    assert series.index.is_monotonic_increasing and not series.index.duplicated().any()


# --- placeholders (Karpenter-style pools) ------------------------------------------------------

def test_placeholder_capacity_holds_low_priority_pause_pods_on_the_pool(sim_factory, tmp_path):
    scenario = tmp_path / "static.yaml"
    scenario.write_text(textwrap.dedent("""\
        cluster: {name: karpenter}
        namespaces: [default]
        pools:
          - {name: gpu, instanceType: p5.48xlarge, gpuProduct: NVIDIA-H100-80GB-HBM3,
             gpusPerNode: 8, cpu: 192, memory: 2048Gi, minSize: 0, maxSize: 4,
             desiredSize: 2, zones: [us-east-1a]}
        """))
    sim = sim_factory(str(scenario))
    kube = Kube(sim.api, "karpenter")
    action = PlaceholderCapacity(kube, "gpu", "default", replicas=3, gpus_per_pod=4,
                                 node_selector="gpuops.io/pool=gpu")
    assert not action.holds()
    action.apply()
    assert action.holds()
    priority = client.SchedulingV1Api(sim.api).read_priority_class("gpuops-placeholder")
    assert (priority.value, priority.preemption_policy) == (-10, "Never")
    pods = wait_for(lambda: (p := client.CoreV1Api(sim.api).list_namespaced_pod(
        "default", label_selector="gpuops.io/placeholder=true").items) and len(p) == 3 and p,
        message="3 placeholder pods")
    assert {p.spec.priority_class_name for p in pods} == {"gpuops-placeholder"}
    assert {p.spec.containers[0].resources.limits["nvidia.com/gpu"] for p in pods} == {"4"}
    PlaceholderCapacity(kube, "gpu", "default", 1, 4, "gpuops.io/pool=gpu").apply()
    assert kube.get_deployment("default", "gpuops-placeholder-gpu")["spec"]["replicas"] == 1


# --- pure: targets, usage, Block validation ------------------------------------------------------

def _pool(name: str, lead: int, *, price: float = 10.0, min_size: int = 0,
          current: int = 1) -> NodePoolSpec:
    return NodePoolSpec(name, "p5.48xlarge", 8, "H100", price, min_size, 10, lead, "p5",
                        current)


def _plan(nodes: dict[str, tuple[int, ...]]) -> CapacityPlan:
    hours = len(next(iter(nodes.values())))
    return CapacityPlan(pools=tuple(nodes), models=(), hours=hours, nodes=nodes, replicas={},
                        shortfall={}, min_replica_shortfall={}, demand={}, cost=0.0,
                        objective=0.0, status="optimal", gap=0.0, solve_s=0.0,
                        integer_replicas=True)


def test_targets_request_the_lead_time_ahead_and_release_after_the_peak():
    plan = _plan({"slow": (1, 1, 4, 4, 1, 1), "fast": (1, 1, 4, 4, 1, 1)})
    pools = [_pool("slow", 2), _pool("fast", 0)]
    states = {"slow": PoolState("slow", 1), "fast": PoolState("fast", 1)}
    targets = {t.pool: t for t in derive_targets(plan, pools, states)}
    assert (targets["slow"].target, targets["slow"].window_hours) == (4, 3)  # 2 h ahead
    assert targets["fast"].target == 1  # ready within the hour: asks when the hour comes
    later = _plan({"slow": (4, 1, 1, 1), "fast": (4, 1, 1, 1)})
    states = {"slow": PoolState("slow", 4), "fast": PoolState("fast", 4)}
    after = {t.pool: t.target for t in derive_targets(later, pools, states)}
    assert after == {"slow": 4, "fast": 4}  # the peak hour is still in the window
    past = _plan({"slow": (1, 1, 1), "fast": (1, 1, 1)})
    assert {t.pool: t.target for t in derive_targets(past, pools, states)} == \
        {"slow": 1, "fast": 1}  # released once the peak has left the window


def test_targets_never_go_below_what_is_in_use_and_respect_aws_limits_and_quotas():
    plan = _plan({"a": (1, 1), "b": (5, 5)})
    pools = [_pool("a", 1), _pool("b", 1)]
    states = {"a": PoolState("a", 3, nodes_in_use=3), "b": PoolState("b", 1, aws_max=4)}
    targets = {t.pool: t for t in derive_targets(plan, pools, states)}
    assert targets["a"].target == 3 and "in use" in targets["a"].notes[0]
    assert targets["b"].target == 4 and "maxSize 4" in targets["b"].notes[0]
    from gpuops.tasks.capacity.plan import GpuQuota
    with pytest.raises(LimitViolation, match=r"^quotas\['p5'\].max_gpus: the targets need 56"):
        derive_targets(plan, pools, states, [GpuQuota("p5", 48)])


def test_pool_usage_counts_gpu_pods_but_not_placeholders_daemons_or_finished_pods():
    def pod(node: str, gpus: int, **meta: Any) -> dict:
        phase = meta.pop("phase", "Running")
        return {"metadata": {"name": "p", **meta}, "status": {"phase": phase},
                "spec": {"nodeName": node, "containers": [
                    {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    pods = [pod("n1", 2), pod("n2", 1), pod("n3", 8, labels={"gpuops.io/placeholder": "true"}),
            pod("n3", 1, ownerReferences=[{"kind": "DaemonSet"}]),
            pod("n4", 8, phase="Succeeded"), pod("other", 8)]
    assert pool_usage(["n1", "n2", "n3", "n4"], pods, 8) == (2, 3)
    assert placeholder_pods(3, 8, 3, 8) == 2  # 21 free GPUs: two whole-node placeholders
    assert placeholder_pods(1, 8, 12, 8) == 0


@pytest.mark.parametrize(("change", "field"), [
    ({"pools": [{"name": "h100", "instance_type": "p5.48xlarge", "gpus_per_node": 8,
                 "price_per_hour": 55.0, "min_size": 4, "max_size": 2}]},
     "pools['h100'].max_size: 2 is below min_size 4"),
    ({"pools": [{"name": "h100", "instance_type": "p5.48xlarge", "gpus_per_node": 8,
                 "price_per_hour": -1.0, "max_size": 2}]}, "pools.0.price_per_hour"),
    ({"models": [{"name": "m", "gpus_per_replica": 1, "allowed_pools": ["tpu"],
                  "throughput_per_replica": 1.0}]},
     "models['m'].allowed_pools: unknown pool 'tpu'"),
    ({"quotas": [{"family": "g5", "max_gpus": 8}]}, "quotas['g5'].family"),
    ({"models": [{"name": "m", "gpus_per_replica": 1, "allowed_pools": ["h100"],
                  "throughput_per_replica": 0}]}, "models.0.throughput_per_replica"),
])
def test_bad_block_values_give_errors_naming_the_field(change, field):
    with pytest.raises(ValidationError) as err:
        config("http://unused", **change)
    assert field in str(err.value)


def test_the_default_config_describes_the_embedded_cluster():
    default = CapacityConfig.from_settings()
    assert [p.name for p in default.pools] == ["h100", "l4"]
    assert default.models[0].query() == \
        'sum(rate(vllm:request_success_total{model_name="llama-3-8b"}[5m]))'

