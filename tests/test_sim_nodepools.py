"""Node pools as a client and AWS see them: node groups and ASGs in moto drive the node count,
new nodes go NotReady -> Ready -> GPUs allocatable on the virtual clock, scale-in drains and
removes nodes, and the node faults (NotReady, shutdown, GPU fragmentation, resize) behave as
on a real cluster."""

from __future__ import annotations

import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from kubernetes import client
from moto.server import ThreadedMotoServer

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)

CLUSTER = "simtest"
SCENARIO = textwrap.dedent(f"""\
    cluster: {{name: {CLUSTER}}}
    namespaces: [default]
    pools:
      - name: gpu
        instanceType: p5.48xlarge
        gpuProduct: NVIDIA-H100-80GB-HBM3
        gpusPerNode: 8
        cpu: 192
        memory: 2048Gi
        minSize: 0
        maxSize: 4
        desiredSize: {{gpu_size}}
        provisioningLagSeconds: 240
        taints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]
        backing: eks
      - name: l4
        instanceType: g6.12xlarge
        gpuProduct: NVIDIA-L4
        gpusPerNode: 4
        cpu: 48
        memory: 192Gi
        minSize: 0
        maxSize: 4
        desiredSize: 1
        zones: [us-east-1a]
        backing: asg
    sim: {{aws_poll_seconds: 1.0}}
    """)


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url: str) -> str:
    """moto's URL, its state reset for this test."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset",
                                                  method="POST"), timeout=10).read()
    return moto_url


def boto(service: str, url: str):
    return boto3.client(service, endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def write_scenario(tmp_path: Path, gpu_size: int = 1, zones: str | None = None) -> str:
    path = tmp_path / "pools.yaml"
    text = SCENARIO.replace("{gpu_size}", str(gpu_size))
    if zones:
        text = text.replace("    backing: eks\n", f"    zones: {zones}\n    backing: eks\n")
    path.write_text(text)
    return str(path)


def node_group_asg(url: str) -> str:
    group = boto("eks", url).describe_nodegroup(clusterName=CLUSTER,
                                                nodegroupName="gpu")["nodegroup"]
    return group["resources"]["autoScalingGroups"][0]["name"]


def asg_instances(url: str) -> set[str]:
    """The instances of the Auto Scaling group behind the `gpu` managed node group."""
    groups = boto("autoscaling", url).describe_auto_scaling_groups(
        AutoScalingGroupNames=[node_group_asg(url)])["AutoScalingGroups"]
    return {i["InstanceId"] for i in groups[0]["Instances"]} if groups else set()


def node_instances(sim, pool: str) -> set[str]:
    return {n.spec.provider_id.rsplit("/", 1)[-1] for n in pool_nodes(sim.api, pool)}


def pool_nodes(api: client.ApiClient, pool: str) -> list:
    return client.CoreV1Api(api).list_node(label_selector=f"gpuops.io/pool={pool}").items


def ready(node) -> tuple[str, str]:
    cond = next(c for c in node.status.conditions if c.type == "Ready")
    return cond.status, cond.reason


def taint_keys(node) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in node.spec.taints or []}


def gpu_pod(name: str, node: str | None = None, gpus: int = 1, **spec) -> dict:
    return {"metadata": {"name": name},
            "spec": {"nodeName": node,
                     "containers": [{"name": "main", "image": "busybox:1.36",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     **spec}}


def free_gpus(api: client.ApiClient, node) -> int:
    pods = client.CoreV1Api(api).list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node.metadata.name}").items
    used = sum(int((c.resources.limits or {}).get("nvidia.com/gpu", 0))
               for p in pods if p.status.phase not in ("Succeeded", "Failed")
               for c in p.spec.containers)
    return int(node.status.allocatable.get("nvidia.com/gpu", 0)) - used


# --- AWS-backed pools --------------------------------------------------------------------------

def test_pools_create_their_eks_node_group_and_auto_scaling_group_in_moto(sim_factory, aws,
                                                                         tmp_path):
    sim = sim_factory(write_scenario(tmp_path, gpu_size=2), aws_endpoint=aws)
    eks = boto("eks", aws)
    group = wait_for(lambda: eks.describe_nodegroup(clusterName=CLUSTER,
                                                    nodegroupName="gpu")["nodegroup"],
                     message="the gpu node group")
    assert group["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 2}
    assert group["instanceTypes"] == ["p5.48xlarge"]
    asg = boto("autoscaling", aws)
    # the node is the group's instance: simcluster attaches its node's instance to the group
    # and lets go of the one moto launched for the new group, so wait until they agree
    groups = wait_for(lambda: (g := asg.describe_auto_scaling_groups(
        AutoScalingGroupNames=[f"{CLUSTER}-l4"])["AutoScalingGroups"]) and g[0]["Instances"]
        and {i["InstanceId"] for i in g[0]["Instances"]} == node_instances(sim, "l4") and g,
        timeout=60, message="the l4 ASG with exactly its node's instance")
    assert groups[0]["DesiredCapacity"] == 1
    assert len(groups[0]["Instances"]) == len(pool_nodes(sim.api, "l4")) == 1


def test_scaling_a_node_group_out_adds_nodes_notready_then_ready_then_with_gpus(
        sim_factory, aws, tmp_path):
    sim = sim_factory(write_scenario(tmp_path), aws_endpoint=aws)
    eks = boto("eks", aws)
    wait_for(lambda: eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="gpu"),
             message="the gpu node group")
    original = {n.metadata.name for n in pool_nodes(sim.api, "gpu")}
    eks.update_nodegroup_config(clusterName=CLUSTER, nodegroupName="gpu",
                                scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 3})

    def new_nodes() -> list:
        return [n for n in pool_nodes(sim.api, "gpu") if n.metadata.name not in original]

    fresh = wait_for(lambda: len(new_nodes()) == 2 and new_nodes(), message="2 new nodes")
    for node in fresh:
        assert ready(node) == ("False", "KubeletNotReady")
        assert ("node.kubernetes.io/not-ready", "NoSchedule") in taint_keys(node)
        assert "nvidia.com/gpu" not in node.status.allocatable
        assert node.metadata.labels["eks.amazonaws.com/nodegroup"] == "gpu"

    sim.advance(245)
    fresh = wait_for(lambda: all(ready(n)[0] == "True" for n in new_nodes()) and new_nodes(),
                     message="new nodes Ready after the provisioning lag")
    for node in fresh:
        assert ("node.kubernetes.io/not-ready", "NoSchedule") not in taint_keys(node)
        assert "nvidia.com/gpu" not in node.status.allocatable  # device plugin not up yet

    sim.advance(80)
    fresh = wait_for(lambda: all("nvidia.com/gpu" in n.status.allocatable
                                 for n in new_nodes()) and new_nodes(),
                     message="GPUs allocatable ~75 s after Ready")
    assert {n.status.allocatable["nvidia.com/gpu"] for n in fresh} == {"8"}
    assert {n.metadata.labels["nvidia.com/gpu.product"] for n in fresh} == {
        "NVIDIA-H100-80GB-HBM3"}


def test_raising_min_size_prewarms_nodes_as_on_real_eks(sim_factory, aws, tmp_path):
    sim = sim_factory(write_scenario(tmp_path), aws_endpoint=aws)
    eks = boto("eks", aws)
    wait_for(lambda: eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="gpu"),
             message="the gpu node group")
    eks.update_nodegroup_config(clusterName=CLUSTER, nodegroupName="gpu",
                                scalingConfig={"minSize": 3, "maxSize": 4, "desiredSize": 1})
    wait_for(lambda: len(pool_nodes(sim.api, "gpu")) == 3, message="3 gpu nodes")


def test_a_bare_node_group_decrease_removes_the_node_aws_picks_even_a_busy_one(sim_factory, aws,
                                                                             tmp_path):
    """AWS's default termination policy balances zones first and never asks what runs on a
    node: lowering desiredSize can take a busy GPU node and keep an empty one."""
    sim = sim_factory(write_scenario(tmp_path, gpu_size=3, zones="[us-east-1a, us-east-1b]"),
                      aws_endpoint=aws)
    v1 = client.CoreV1Api(sim.api)
    eks = boto("eks", aws)
    wait_for(lambda: eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName="gpu"),
             timeout=30, message="the gpu node group")
    by_zone: dict[str, list[str]] = {}
    for node in pool_nodes(sim.api, "gpu"):
        by_zone.setdefault(node.metadata.labels["topology.kubernetes.io/zone"], []).append(
            node.metadata.name)
    crowded = max(by_zone, key=lambda z: len(by_zone[z]))
    assert sorted(len(names) for names in by_zone.values()) == [1, 2]
    for i, name in enumerate(by_zone[crowded]):  # both nodes of the crowded zone are busy
        v1.create_namespaced_pod("default", gpu_pod(f"busy-{i}", name))

    eks.update_nodegroup_config(clusterName=CLUSTER, nodegroupName="gpu",
                                scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 2})
    cordoned = wait_for(lambda: [n for n in pool_nodes(sim.api, "gpu") if n.spec.unschedulable],
                        message="a node cordoned for scale-in")
    victim = cordoned[0].metadata.name
    assert victim in by_zone[crowded]  # zone balance: a busy node goes, the empty one stays
    sim.advance(40)  # past the pods' termination grace period
    wait_for(lambda: victim not in {n.metadata.name for n in pool_nodes(sim.api, "gpu")},
             message="the busy node removed")
    assert len(pool_nodes(sim.api, "gpu")) == 2
    assert len(asg_instances(aws)) == 2
    left = [p.metadata.name for p in v1.list_namespaced_pod("default").items
            if p.metadata.deletion_timestamp is None]
    assert len(left) == 1  # one of the two busy pods went with its node


def test_terminating_a_nodes_instance_with_decrement_removes_exactly_that_node(sim_factory, aws,
                                                                             tmp_path):
    """What cluster-autoscaler does, on the Auto Scaling group behind a managed node group:
    the chosen node goes, the others stay, and the node group shows the new size."""
    sim = sim_factory(write_scenario(tmp_path, gpu_size=3, zones="[us-east-1a, us-east-1b]"),
                      aws_endpoint=aws)
    eks = boto("eks", aws)
    wait_for(lambda: asg_instances(aws) == node_instances(sim, "gpu"), timeout=30,
             message="the gpu nodes as instances of the node group's Auto Scaling group")
    nodes = {n.metadata.name: n.spec.provider_id.rsplit("/", 1)[-1]
             for n in pool_nodes(sim.api, "gpu")}
    chosen = max(nodes)
    boto("autoscaling", aws).terminate_instance_in_auto_scaling_group(
        InstanceId=nodes[chosen], ShouldDecrementDesiredCapacity=True)
    wait_for(lambda: {n.metadata.name for n in pool_nodes(sim.api, "gpu")} == set(nodes) - {
        chosen}, timeout=60, message="exactly the chosen node removed")
    group = wait_for(lambda: (g := eks.describe_nodegroup(
        clusterName=CLUSTER, nodegroupName="gpu")["nodegroup"])["scalingConfig"][
        "desiredSize"] == 2 and g, message="the node group's desiredSize following its group")
    assert group["scalingConfig"]["desiredSize"] == 2
    sim.advance(30)
    assert {n.metadata.name for n in pool_nodes(sim.api, "gpu")} == set(nodes) - {chosen}


def test_a_bare_decrease_spares_instances_protected_from_scale_in(sim_factory, aws, tmp_path):
    sim = sim_factory(write_scenario(tmp_path, gpu_size=3, zones="[us-east-1a, us-east-1b]"),
                      aws_endpoint=aws)
    eks = boto("eks", aws)
    wait_for(lambda: asg_instances(aws) == node_instances(sim, "gpu"), timeout=30,
             message="the gpu nodes as instances of the node group's Auto Scaling group")
    by_zone: dict[str, list[str]] = {}
    for node in pool_nodes(sim.api, "gpu"):
        by_zone.setdefault(node.metadata.labels["topology.kubernetes.io/zone"], []).append(
            node.spec.provider_id.rsplit("/", 1)[-1])
    crowded = max(by_zone, key=lambda z: len(by_zone[z]))
    [lone] = next(ids for zone, ids in by_zone.items() if zone != crowded)
    boto("autoscaling", aws).set_instance_protection(
        InstanceIds=by_zone[crowded], AutoScalingGroupName=node_group_asg(aws),
        ProtectedFromScaleIn=True)
    eks.update_nodegroup_config(clusterName=CLUSTER, nodegroupName="gpu",
                                scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 2})
    wait_for(lambda: lone not in node_instances(sim, "gpu"),
             message="the only unprotected instance's node removed")
    assert node_instances(sim, "gpu") == set(by_zone[crowded])


def test_an_asg_pool_follows_its_instances(sim_factory, aws, tmp_path):
    sim = sim_factory(write_scenario(tmp_path), aws_endpoint=aws)
    v1 = client.CoreV1Api(sim.api)
    asg = boto("autoscaling", aws)
    name = f"{CLUSTER}-l4"
    def group_instances() -> set[str]:
        groups = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
        return {i["InstanceId"] for i in groups["AutoScalingGroups"][0]["Instances"]}

    # The group and the pool agree first (moto's own first instance may still be being
    # replaced by the adopted node's: seen on a loaded machine).
    wait_for(lambda: (ids := group_instances()) and ids == node_instances(sim, "l4"),
             message="the l4 ASG holding exactly its node's instance")
    before = {n.metadata.name for n in pool_nodes(sim.api, "l4")}
    asg.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=2)
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    instances = {i["InstanceId"] for i in group["Instances"]}
    new = wait_for(lambda: [n for n in pool_nodes(sim.api, "l4")
                            if n.metadata.name not in before], message="a new l4 node")[0]
    instance = new.spec.provider_id.rsplit("/", 1)[-1]
    assert instance in instances  # the node is the instance the ASG launched

    asg.terminate_instance_in_auto_scaling_group(InstanceId=instance,
                                                 ShouldDecrementDesiredCapacity=True)
    wait_for(lambda: {n.metadata.name for n in pool_nodes(sim.api, "l4")} == before,
             message="the terminated instance's node removed")

    # The scenario's own node is an instance of the group too: terminating it removes it.
    [first] = before
    instance = v1.read_node(first).spec.provider_id.rsplit("/", 1)[-1]
    asg.terminate_instance_in_auto_scaling_group(InstanceId=instance,
                                                 ShouldDecrementDesiredCapacity=True)
    wait_for(lambda: not pool_nodes(sim.api, "l4"), message="the scenario's node removed")
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    assert (group["DesiredCapacity"], group["Instances"]) == (0, [])


# --- static pools and node faults --------------------------------------------------------------

def test_scale_pool_resizes_a_static_pool_and_refuses_an_aws_backed_one(sim_factory, aws,
                                                                       tmp_path):
    sim = sim_factory(write_scenario(tmp_path))
    result = sim.fault("scale-pool", pool="gpu", size=3)
    assert (result["from"], result["to"]) == (1, 3)
    nodes = pool_nodes(sim.api, "gpu")
    assert sorted(ready(n)[0] for n in nodes) == ["False", "False", "True"]
    sim.advance(330)
    wait_for(lambda: all("nvidia.com/gpu" in n.status.allocatable
                         for n in pool_nodes(sim.api, "gpu")), message="3 nodes with GPUs")
    with pytest.raises(urllib.error.HTTPError) as err:
        sim.fault("scale-pool", pool="gpu", size=9)
    assert err.value.code == 400

    backed = sim_factory(write_scenario(tmp_path), aws_endpoint=aws)
    with pytest.raises(urllib.error.HTTPError) as err:
        backed.fault("scale-pool", pool="gpu", size=2)
    assert "follows its EKS node group 'gpu' in AWS" in err.value.read().decode()


def test_node_notready_marks_it_unknown_and_evicts_its_pods_after_their_tolerations(
        sim_factory, tmp_path):
    sim = sim_factory(write_scenario(tmp_path))
    v1 = client.CoreV1Api(sim.api)
    node = pool_nodes(sim.api, "gpu")[0].metadata.name
    v1.create_namespaced_pod("default", gpu_pod("default-tolerations", node))
    v1.create_namespaced_pod("default", gpu_pod("short-toleration", node, tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 30}]))
    v1.create_namespaced_pod("default", gpu_pod("tolerates-forever", node, tolerations=[
        {"operator": "Exists"}]))

    sim.fault("node-notready", node)
    status = v1.read_node(node)
    cond = next(c for c in status.status.conditions if c.type == "Ready")
    assert (cond.status, cond.reason, cond.message) == (
        "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    unreachable = [t for t in status.spec.taints if t.key == "node.kubernetes.io/unreachable"]
    assert {t.effect for t in unreachable} == {"NoExecute", "NoSchedule"}
    assert all(t.time_added for t in unreachable if t.effect == "NoExecute")
    pod_ready = next(c for c in v1.read_namespaced_pod("default-tolerations", "default")
                     .status.conditions if c.type == "Ready")
    assert pod_ready.status == "False"

    def evicted(name: str) -> bool:
        pods = {p.metadata.name: p for p in v1.list_namespaced_pod("default").items}
        return name not in pods or pods[name].metadata.deletion_timestamp is not None

    sim.advance(60)
    wait_for(lambda: evicted("short-toleration"), message="the 30 s toleration expired")
    assert not evicted("default-tolerations")
    sim.advance(260)
    wait_for(lambda: evicted("default-tolerations"), message="the default 300 s expired")
    assert not evicted("tolerates-forever")
    events = [e for e in v1.list_namespaced_event("default").items
              if e.reason == "TaintManagerEviction"]
    assert {e.involved_object.name for e in events} == {"short-toleration",
                                                        "default-tolerations"}
    assert events[0].message.startswith("Marking for deletion Pod default/")

    sim.fault("node-ready", node)
    back = v1.read_node(node)
    assert ready(back) == ("True", "KubeletReady")
    assert not any(t.key == "node.kubernetes.io/unreachable" for t in back.spec.taints or [])


def test_node_shutdown_deletes_the_node_and_its_pods_and_the_pool_replaces_it(sim_factory,
                                                                              tmp_path):
    sim = sim_factory(write_scenario(tmp_path))
    v1 = client.CoreV1Api(sim.api)
    node = pool_nodes(sim.api, "gpu")[0].metadata.name
    v1.create_namespaced_pod("default", gpu_pod("on-doomed-node", node))
    result = sim.fault("node-shutdown", node)
    assert result["podsDeleted"] == ["default/on-doomed-node"]
    assert v1.list_namespaced_pod("default").items == []
    replacement = wait_for(lambda: pool_nodes(sim.api, "gpu"), message="a replacement node")
    assert replacement[0].metadata.name != node
    assert ready(replacement[0]) == ("False", "KubeletNotReady")


def test_an_instance_terminated_before_the_first_read_removes_its_own_node(tmp_path):
    """The race CI met: a node's instance is terminated (with decrement) after the pool's
    nodes were adopted as instances but before the group was first read. That node goes,
    not the one a bare decrease's termination policy would pick."""
    from gpuops.simcluster.cloud.aws import GroupSize
    from gpuops.simcluster.cloud.nodepools import NodePoolController
    from gpuops.simcluster.cluster import SimCluster
    from gpuops.simcluster.config import SimConfig
    from gpuops.simcluster.scenario import parse_scenario, scenario_text

    path = write_scenario(tmp_path, gpu_size=3, zones="[us-east-1a, us-east-1b]")
    cluster = SimCluster(SimConfig(scenario=path, aws_endpoint="http://127.0.0.1:9"))
    cluster.assemble(parse_scenario(*scenario_text(path)))
    [pools] = [c for c in cluster.controllers if isinstance(c, NodePoolController)]
    runtime = pools.runtimes["gpu"]
    nodes_type = cluster.store.type("nodes")
    names = sorted(n["metadata"]["name"] for n in cluster.store.list(nodes_type)
                   if n["metadata"]["labels"].get("gpuops.io/pool") == "gpu")
    zones = {n: cluster.store.find(nodes_type, None, n)["metadata"]["labels"][
        "topology.kubernetes.io/zone"] for n in names}
    instances = {name: f"i-{k}" for k, name in enumerate(names)}
    pools.adopt_instances(runtime, instances)
    # The termination policy would pick a node in the crowded zone; terminate the other.
    crowded = max(set(zones.values()), key=list(zones.values()).count)
    [chosen] = [n for n in names if zones[n] != crowded]
    left = {instances[n]: zones[n] for n in names if n != chosen}
    pools.apply_group_size(runtime, GroupSize(desired=2, instances=left))
    pools.step()

    def going(name: str) -> bool:
        node = cluster.store.find(nodes_type, None, name)
        return node is None or bool(node["spec"].get("unschedulable"))

    assert {n for n in names if going(n)} == {chosen}
