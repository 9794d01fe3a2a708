"""Node pools' AWS side in moto: an EKS cluster with a managed node group per `eks` pool, a
launch template and Auto Scaling group per `asg` pool, and reading back their desired sizes.

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
    from .nodepools import NodePoolController
    from .pools import NodePool

log = logging.getLogger("gpuops.simcluster.aws")

ACCOUNT = "123456789012"  # moto's default account
_TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE",
                  "PreferNoSchedule": "PREFER_NO_SCHEDULE"}


@dataclass(frozen=True)
class GroupSize:
    """What AWS wants a pool to have: a node count, and for an ASG its live instances."""

    desired: int
    instances: dict[str, str] | None = None  # ASG instance id -> availability zone


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

    def ensure_pool(self, pool: NodePool, current_nodes: int) -> None:
        """Create the pool's node group / ASG sized to the nodes it has now, or adopt it."""
        self._create_subnets([z for z in pool.zones if z not in self._subnets])
        subnets = [self._subnets[z] for z in pool.zones]
        name = pool.aws_group_name(self.cluster_name)
        desired = min(max(current_nodes, pool.min_size), pool.max_size)
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
            return
        try:
            self.ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
                "ImageId": "ami-12c6146b", "InstanceType": pool.instance_type})
        except ClientError as e:
            if "AlreadyExists" not in _code(e):
                raise
        try:
            self.autoscaling.create_auto_scaling_group(
                AutoScalingGroupName=name,
                LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
                MinSize=pool.min_size, MaxSize=pool.max_size, DesiredCapacity=desired,
                VPCZoneIdentifier=",".join(subnets),
                Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in (
                    ("gpuops.io/pool", pool.name),
                    (f"kubernetes.io/cluster/{self.cluster_name}", "owned"),
                    ("k8s.io/cluster-autoscaler/enabled", "true"))])
        except ClientError as e:
            if _code(e) != "AlreadyExists":
                raise
            log.info("adopting existing Auto Scaling group %s", name)

    # --- reading -------------------------------------------------------------------------------

    def read_size(self, pool: NodePool) -> GroupSize:
        name = pool.aws_group_name(self.cluster_name)
        if pool.backing == "eks":
            try:
                group = self.eks.describe_nodegroup(clusterName=self.cluster_name,
                                                    nodegroupName=name)["nodegroup"]
            except ClientError as e:
                if _code(e) == "ResourceNotFoundException":
                    raise NotFound(name) from e
                raise
            scaling = group.get("scalingConfig") or {}
            return GroupSize(effective_desired(int(scaling.get("desiredSize", 0)),
                                               int(scaling.get("minSize", 0)),
                                               int(scaling.get("maxSize", 0))))
        groups = self.autoscaling.describe_auto_scaling_groups(
            AutoScalingGroupNames=[name])["AutoScalingGroups"]
        if not groups:
            raise NotFound(name)
        group = groups[0]
        instances = {i["InstanceId"]: i["AvailabilityZone"] for i in group.get("Instances", [])
                     if i.get("LifecycleState", "InService") in ("InService", "Pending")}
        return GroupSize(effective_desired(int(group["DesiredCapacity"]), int(group["MinSize"]),
                                           int(group["MaxSize"])), instances)


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
                        count = len(self.pools.index.pool_nodes(runtime.pool.name))
                        await asyncio.to_thread(aws.ensure_pool, runtime.pool, count)
                        runtime.aws_created = True
                    try:
                        size = await asyncio.to_thread(aws.read_size, runtime.pool)
                    except NotFound:
                        log.warning("pool %s: its AWS group is gone; creating it again",
                                    runtime.pool.name)
                        runtime.aws_created = cluster_ready = False
                        continue
                    self.pools.apply_group_size(runtime, size)
            except (BotoCoreError, ClientError) as e:
                log.warning("node pools: AWS at %s answered %s; retrying", endpoint, e)
            await self.clock.sleep(self.interval, min_real=0.2)
