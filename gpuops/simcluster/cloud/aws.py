"""Node pools' AWS side in moto: an EKS cluster with a managed node group per `eks` pool, a
launch template and Auto Scaling group per `asg` pool, and reading back their desired sizes.

Every pool's nodes are instances of an Auto Scaling group, as on AWS, so that
`TerminateInstanceInAutoScalingGroup` on a node's instance (its providerID) removes exactly
that node: the `asg` pool's own group, and for an `eks` pool the group behind its managed
node group (moto names one in `describe_nodegroup`'s `resources.autoScalingGroups` but does
not create it: this module does). The nodes a scenario starts with get an EC2 instance each
in their zone, attached to the group, and their providerID names it.

A managed node group's sizes drive its group as EKS's control plane does: a new desiredSize
(or minSize, which pre-warms: FACTS.md) is applied to the group; a bare decrease terminates
the instances the group's default termination policy picks (`termination.py`: zone balance,
then outdated launch templates, then the next billing hour, never what runs on them); a
change made on the group itself (a terminate with decrement) shows in the node group's
desiredSize. A self-managed `asg` pool's bare `SetDesiredCapacity` decrease is moto's to
carry out: it terminates the first unprotected instances of its list, not AWS's choice.

`AwsBacking` makes blocking boto3 calls; `AwsPoolSync`, the controller, runs each of them in a
thread (`asyncio.to_thread`) so the cluster's event loop never waits on AWS.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ..core.clock import VirtualClock
from .nodes import REGION

if TYPE_CHECKING:
    from .nodepools import NodePoolController, PoolRuntime
    from .pools import NodePool

log = logging.getLogger("gpuops.simcluster.aws")

ACCOUNT = "123456789012"  # moto's default account
_TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE",
                  "PreferNoSchedule": "PREFER_NO_SCHEDULE"}


@dataclass(frozen=True)
class GroupSize:
    """What AWS wants a pool to have: a node count, and its group's live instances."""

    desired: int
    instances: dict[str, str] | None = None  # ASG instance id -> availability zone
    protected: frozenset[str] = frozenset()  # instances protected from scale in
    group: str = ""  # the Auto Scaling group's name
    group_desired: int | None = None  # the group's own DesiredCapacity
    nodegroup: tuple[int, int, int] | None = None  # an EKS node group's (desired, min, max)


class NotFound(Exception):
    """The node group or ASG is gone (moto was reset or restarted): create it again."""


def effective_desired(desired: int, min_size: int, max_size: int) -> int:
    """The count a node group converges to. gpuops pre-warms real EKS node groups by raising
    minSize (FACTS.md), and an ASG never runs outside [min, max]."""
    return min(max(desired, min_size), max(max_size, min_size))


class AwsBacking:
    def __init__(self, endpoint: str, cluster_name: str) -> None:
        session = boto3.session.Session(aws_access_key_id="testing",
                                        aws_secret_access_key="testing", region_name=REGION)
        config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=3,
                        read_timeout=15)
        self.eks = session.client("eks", endpoint_url=endpoint, config=config)
        self.ec2 = session.client("ec2", endpoint_url=endpoint, config=config)
        self.autoscaling = session.client("autoscaling", endpoint_url=endpoint, config=config)
        self.cluster_name = cluster_name
        self._subnets: dict[str, str] = {}  # zone -> subnet id

    # --- creating ------------------------------------------------------------------------------

    def ensure_cluster(self, zones: list[str]) -> None:
        """The EKS cluster and its VPC subnets (adopted when they already exist)."""
        try:
            cluster = self.eks.describe_cluster(name=self.cluster_name)["cluster"]
            subnet_ids = cluster.get("resourcesVpcConfig", {}).get("subnetIds") or []
            if subnet_ids:
                subnets = self.ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]
                self._subnets = {s["AvailabilityZone"]: s["SubnetId"] for s in subnets}
        except ClientError as e:
            if _code(e) != "ResourceNotFoundException":
                raise
            self._subnets.clear()  # moto was reset: subnets we knew are gone too
        missing = [z for z in zones if z not in self._subnets]
        if missing:
            self._create_subnets(missing)
        if not self._cluster_exists():
            self.eks.create_cluster(
                name=self.cluster_name, version="1.33",
                roleArn=f"arn:aws:iam::{ACCOUNT}:role/{self.cluster_name}-eks-cluster",
                resourcesVpcConfig={"subnetIds": list(self._subnets.values())},
                tags={"gpuops.io/simcluster": "true"})

    def _cluster_exists(self) -> bool:
        try:
            self.eks.describe_cluster(name=self.cluster_name)
            return True
        except ClientError as e:
            if _code(e) == "ResourceNotFoundException":
                return False
            raise

    def _create_subnets(self, zones: list[str]) -> None:
        if not zones:
            return
        vpcs = self.ec2.describe_vpcs(Filters=[{"Name": "tag:gpuops.io/cluster",
                                                "Values": [self.cluster_name]}])["Vpcs"]
        if vpcs:
            vpc_id = vpcs[0]["VpcId"]
        else:
            vpc_id = self.ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=[{
                "ResourceType": "vpc", "Tags": [{"Key": "gpuops.io/cluster",
                                                 "Value": self.cluster_name}]}])["Vpc"]["VpcId"]
        existing = self.ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
        for subnet in existing["Subnets"]:
            self._subnets.setdefault(subnet["AvailabilityZone"], subnet["SubnetId"])
        for zone in zones:
            if zone in self._subnets:
                continue
            block = (ord(zone[-1]) - ord("a")) % 6 * 32
            subnet = self.ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{block}.0/19",
                                            AvailabilityZone=zone)["Subnet"]
            self._subnets[zone] = subnet["SubnetId"]

    def ensure_pool(self, pool: NodePool, nodes: list[tuple[str, str]]) -> dict[str, str]:
        """Create the pool's node group and its Auto Scaling group sized to `nodes` (name,
        zone), each node an instance of it; or adopt what exists. Returns node -> instance
        id for the nodes given instances (none when the group was adopted)."""
        self._create_subnets([z for z in pool.zones if z not in self._subnets])
        subnets = [self._subnets[z] for z in pool.zones]
        name = pool.aws_group_name(self.cluster_name)
        desired = min(max(len(nodes), pool.min_size), pool.max_size)
        tags = [("gpuops.io/pool", pool.name),
                (f"kubernetes.io/cluster/{self.cluster_name}", "owned"),
                ("k8s.io/cluster-autoscaler/enabled", "true")]
        if pool.backing == "eks":
            try:
                self.eks.create_nodegroup(
                    clusterName=self.cluster_name, nodegroupName=name,
                    # Always pass scalingConfig: moto shares one default dict otherwise.
                    scalingConfig={"minSize": pool.min_size, "maxSize": pool.max_size,
                                   "desiredSize": desired},
                    subnets=subnets, instanceTypes=[pool.instance_type],
                    nodeRole=f"arn:aws:iam::{ACCOUNT}:role/{self.cluster_name}-eks-node",
                    labels={"gpuops.io/pool": pool.name, **pool.labels},
                    taints=[{"key": t.key, **({"value": t.value} if t.value else {}),
                             "effect": _TAINT_EFFECTS[t.effect]} for t in pool.taints],
                    capacityType=pool.capacity_type,
                    amiType="AL2023_x86_64_NVIDIA" if pool.gpus_per_node else
                    "AL2023_x86_64_STANDARD",
                    tags={"gpuops.io/pool": pool.name})
            except ClientError as e:
                if _code(e) != "ResourceInUseException":
                    raise
                log.info("adopting existing EKS node group %s", name)
            group = self.nodegroup_asg(pool)
            template = f"eks-{self.cluster_name}-{name}"
            tags += [("eks:cluster-name", self.cluster_name), ("eks:nodegroup-name", name)]
        else:
            group = template = name
        try:
            self.ec2.create_launch_template(LaunchTemplateName=template, LaunchTemplateData={
                "ImageId": "ami-12c6146b", "InstanceType": pool.instance_type})
        except ClientError as e:
            if "AlreadyExists" not in _code(e):
                raise
        try:
            self.autoscaling.create_auto_scaling_group(
                AutoScalingGroupName=group,
                LaunchTemplate={"LaunchTemplateName": template, "Version": "$Latest"},
                MinSize=0, MaxSize=pool.max_size, DesiredCapacity=0,
                VPCZoneIdentifier=",".join(subnets),
                Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in tags])
        except ClientError as e:
            if _code(e) != "AlreadyExists":
                raise
            log.info("adopting existing Auto Scaling group %s", group)
            return {}
        adopted = {node: self._launch(pool, template, zone) for node, zone in nodes}
        if adopted:
            self.autoscaling.attach_instances(AutoScalingGroupName=group,
                                              InstanceIds=list(adopted.values()))
        resize = {"DesiredCapacity": desired} if desired != len(adopted) else {}
        self.autoscaling.update_auto_scaling_group(
            AutoScalingGroupName=group, MinSize=min(pool.min_size, desired), **resize)
        return adopted

    def _launch(self, pool: NodePool, template: str, zone: str) -> str:
        """An EC2 instance for a node that exists already, in its zone."""
        if zone not in self._subnets:
            self._create_subnets([zone])
        reservation = self.ec2.run_instances(
            LaunchTemplate={"LaunchTemplateName": template}, MinCount=1, MaxCount=1,
            InstanceType=pool.instance_type, Placement={"AvailabilityZone": zone},
            SubnetId=self._subnets[zone])
        return reservation["Instances"][0]["InstanceId"]

    def nodegroup_asg(self, pool: NodePool) -> str:
        """The Auto Scaling group EKS names for a managed node group."""
        group = self.eks.describe_nodegroup(clusterName=self.cluster_name,
                                            nodegroupName=pool.aws_group_name(
                                                self.cluster_name))["nodegroup"]
        groups = (group.get("resources") or {}).get("autoScalingGroups") or []
        return groups[0]["name"] if groups else f"eks-{group['nodegroupName']}"

    # --- changing ------------------------------------------------------------------------------

    def terminate(self, instance_id: str) -> None:
        """What a managed node group's scale-in does to the instance its group picks."""
        self.autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=True)

    def size_group(self, group: str, desired: int, min_size: int, max_size: int) -> None:
        self.autoscaling.update_auto_scaling_group(
            AutoScalingGroupName=group, MinSize=min(min_size, desired),
            MaxSize=max(max_size, desired), DesiredCapacity=desired)

    def follow_group(self, pool: NodePool, desired: int, min_size: int, max_size: int) -> None:
        """EKS shows a change made on the node group's Auto Scaling group."""
        self.eks.update_nodegroup_config(
            clusterName=self.cluster_name, nodegroupName=pool.aws_group_name(self.cluster_name),
            scalingConfig={"minSize": min(min_size, desired), "maxSize": max_size,
                           "desiredSize": desired})

    # --- reading -------------------------------------------------------------------------------

    def read_size(self, pool: NodePool) -> GroupSize:
        name = pool.aws_group_name(self.cluster_name)
        nodegroup = None
        if pool.backing == "eks":
            try:
                group = self.eks.describe_nodegroup(clusterName=self.cluster_name,
                                                    nodegroupName=name)["nodegroup"]
            except ClientError as e:
                if _code(e) == "ResourceNotFoundException":
                    raise NotFound(name) from e
                raise
            scaling = group.get("scalingConfig") or {}
            nodegroup = (int(scaling.get("desiredSize", 0)), int(scaling.get("minSize", 0)),
                         int(scaling.get("maxSize", 0)))
            groups = (group.get("resources") or {}).get("autoScalingGroups") or []
            name = groups[0]["name"] if groups else f"eks-{name}"
        found = self.autoscaling.describe_auto_scaling_groups(
            AutoScalingGroupNames=[name])["AutoScalingGroups"]
        if not found:
            raise NotFound(name)
        asg = found[0]
        live = [i for i in asg.get("Instances", [])
                if i.get("LifecycleState", "InService") in ("InService", "Pending")]
        instances = {i["InstanceId"]: i["AvailabilityZone"] for i in live}
        protected = frozenset(i["InstanceId"] for i in live if i.get("ProtectedFromScaleIn"))
        if nodegroup is not None:
            desired = effective_desired(*nodegroup)
        else:
            desired = effective_desired(int(asg["DesiredCapacity"]), int(asg["MinSize"]),
                                        int(asg["MaxSize"]))
        return GroupSize(desired, instances, protected, name, int(asg["DesiredCapacity"]),
                         nodegroup)


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class AwsPoolSync:
    """Creates the pools' node groups / ASGs in moto, then follows their desired sizes."""

    name = "nodepools-aws"

    def __init__(self, clock: VirtualClock, pools: NodePoolController, endpoint: str,
                 interval_s: float) -> None:
        self.clock = clock
        self.pools = pools
        self.endpoint = endpoint
        self.interval = interval_s

    async def run(self) -> None:
        endpoint = self.endpoint
        aws = await asyncio.to_thread(AwsBacking, endpoint, self.pools.pools.cluster_name)
        cluster_ready = False
        while True:
            backed = [r for r in self.pools.runtimes.values() if r.aws]
            try:
                if backed and not cluster_ready:
                    zones = sorted({z for r in backed for z in r.pool.zones})
                    await asyncio.to_thread(aws.ensure_cluster, zones)
                    cluster_ready = True
                for runtime in backed:
                    if not runtime.aws_created:
                        nodes = self.pools.nodes_and_zones(runtime)
                        adopted = await asyncio.to_thread(aws.ensure_pool, runtime.pool, nodes)
                        self.pools.adopt_instances(runtime, adopted)
                        if adopted:  # as created: only later changes are someone's to act on
                            count = len(adopted)
                            pool = runtime.pool
                            runtime.seen_nodegroup = (min(max(count, pool.min_size),
                                                          pool.max_size), pool.min_size,
                                                      pool.max_size)
                            runtime.seen_group_desired = runtime.seen_nodegroup[0]
                        runtime.aws_created = True
                    try:
                        size = await asyncio.to_thread(aws.read_size, runtime.pool)
                        if size.nodegroup is not None:
                            size = await self._drive_group(aws, runtime, size)
                    except NotFound:
                        log.warning("pool %s: its AWS group is gone; creating it again",
                                    runtime.pool.name)
                        runtime.aws_created = cluster_ready = False
                        continue
                    self.pools.apply_group_size(runtime, size)
            except (BotoCoreError, ClientError) as e:
                log.warning("node pools: AWS at %s answered %s; retrying", endpoint, e)
            await self.clock.sleep(self.interval, min_real=0.2)

    async def _drive_group(self, aws: AwsBacking, runtime: PoolRuntime,
                           size: GroupSize) -> GroupSize:
        """A managed node group and its Auto Scaling group, kept in step as EKS does."""
        assert size.nodegroup is not None and size.instances is not None
        if size.nodegroup != runtime.seen_nodegroup:  # the node group was changed
            runtime.seen_nodegroup = size.nodegroup
            extra = len(size.instances) - size.desired
            if extra > 0:
                for instance in self.pools.termination_victims(runtime, size, extra):
                    await asyncio.to_thread(aws.terminate, instance)
            _, low, high = size.nodegroup
            await asyncio.to_thread(aws.size_group, size.group, size.desired, low, high)
        elif size.group_desired != runtime.seen_group_desired and \
                size.group_desired != size.desired and size.group_desired is not None:
            _, low, high = size.nodegroup  # changed on the group: EKS shows it
            await asyncio.to_thread(aws.follow_group, runtime.pool, size.group_desired, low,
                                    high)
        else:
            runtime.seen_group_desired = size.group_desired
            return size
        size = await asyncio.to_thread(aws.read_size, runtime.pool)
        runtime.seen_nodegroup = size.nodegroup
        runtime.seen_group_desired = size.group_desired
        return size
