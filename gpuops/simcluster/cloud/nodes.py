"""Node objects as an EKS GPU node's kubelet registers them, built from a pool.

Pure: no store, no clock. The node pool controller decides *when* a node registers, turns
Ready or gets its GPUs advertised; this module knows what each of those looks like on the Node
object (capacity/allocatable as the EKS bootstrap reserves it, GPU feature labels, the
identity of its EC2 instance).
"""

from __future__ import annotations

import hashlib
import random
import uuid
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from gpuops.common.quantity import format_cpu, parse_quantity

from ..core.gpus import GPU_MILLI_RESOURCE, GPU_RESOURCE, MILLI_PER_GPU, PRODUCT_LABEL
from ..core.nodes import HEALTHY_CONDITIONS, POOL_LABEL, TAINT_NOT_READY

if TYPE_CHECKING:
    from .nodepools import NodePool

Obj = dict[str, Any]

REGION = "us-east-1"
KUBELET_VERSION = "v1.33.5-eks-113cf36"
CONTAINER_RUNTIME = "containerd://1.7.27"
KERNEL_VERSION = "6.12.40-63.114.amzn2023.x86_64"
OS_IMAGE = "Amazon Linux 2023.8.20250818"

# gpu.product label -> (memory MiB as GPU feature discovery reports it, gpu.family)
GPU_PRODUCTS: dict[str, tuple[int, str]] = {
    "NVIDIA-H100-80GB-HBM3": (81559, "hopper"),
    "NVIDIA-H200": (143771, "hopper"),
    "NVIDIA-A100-SXM4-40GB": (40960, "ampere"),
    "NVIDIA-A100-SXM4-80GB": (81920, "ampere"),
    "NVIDIA-A10G": (23028, "ampere"),
    "NVIDIA-L4": (23034, "ada-lovelace"),
    "NVIDIA-L40S": (46068, "ada-lovelace"),
}

NOT_READY_MESSAGE = ("container runtime network not ready: NetworkReady=false "
                     "reason:NetworkPluginNotReady message:Network plugin returns error: cni "
                     "plugin not initialized")

@dataclass(frozen=True)
class NodeIdentity:
    """Who a new node is: its EC2 instance, zone and private address (its name follows)."""

    instance_id: str
    zone: str
    private_ip: str

    @property
    def name(self) -> str:
        return f"ip-{self.private_ip.replace('.', '-')}.ec2.internal"

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.instance_id}"


class NodeNamer:
    """Deterministic instance ids and private IPs (one /19 per zone), never reusing a live name."""

    def __init__(self, seed: str) -> None:
        self._rng = random.Random(seed)

    def next(self, zone: str, taken: Any, instance_id: str | None = None) -> NodeIdentity:
        """`taken(name) -> bool` says whether a node of that name exists."""
        block = (ord(zone[-1]) - ord("a")) % 6 * 32 if zone else 0
        instance = instance_id or "i-0" + "".join(self._rng.choice("0123456789abcdef")
                                                  for _ in range(16))
        while True:
            ip = f"10.0.{block + self._rng.randrange(32)}.{self._rng.randrange(1, 255)}"
            identity = NodeIdentity(instance, zone, ip)
            if not taken(identity.name):
                return identity


# --- resources ---------------------------------------------------------------------------------

def reserved_cpu_millis(cores: Fraction) -> int:
    """EKS bootstrap kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of the
    next two, 0.25% of the rest."""
    millis = Fraction(0)
    steps = ((1, Fraction(60)), (1, Fraction(10)), (2, Fraction(5)))
    left = cores
    for count, per_core in steps:
        take = min(left, Fraction(count))  # (Fractions on both sides: one type for mypy)
        millis += take * per_core
        left -= take
    millis += max(left, Fraction(0)) * Fraction(5, 2)
    return int(millis)


def node_resources(pool: NodePool, *, gpus_advertised: bool) -> tuple[Obj, Obj]:
    """(capacity, allocatable) as the kubelet reports them; `nvidia.com/gpu` (and its
    thousandths, `gpuops.io/gpu-milli`, for shared GPUs: core/gpus.py) only once the device
    plugin has registered."""
    cores = parse_quantity(pool.cpu)
    memory_ki = int(parse_quantity(pool.memory)) // 1024
    storage_ki = int(parse_quantity(pool.ephemeral_storage)) // 1024
    reserved_mem_ki = (11 * pool.max_pods + 255 + 100) * 1024  # kube-reserved + eviction-hard
    capacity: Obj = {
        "cpu": format_cpu(int(cores * 1000)), "memory": f"{memory_ki}Ki",
        "ephemeral-storage": f"{storage_ki}Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
        "pods": str(pool.max_pods),
    }
    allocatable: Obj = {
        "cpu": format_cpu(int(cores * 1000) - reserved_cpu_millis(cores)),
        "memory": f"{max(memory_ki - reserved_mem_ki, 0)}Ki",
        "ephemeral-storage": str(int(storage_ki * 1024 * 0.9) - 2**30),
        "hugepages-1Gi": "0", "hugepages-2Mi": "0", "pods": str(pool.max_pods),
    }
    if gpus_advertised:
        advertise_gpus({"capacity": capacity, "allocatable": allocatable}, pool)
    return capacity, allocatable


def gpu_feature_labels(pool: NodePool) -> dict[str, str]:
    """What GPU feature discovery labels a node with once the device plugin runs."""
    if not pool.gpus_per_node or not pool.gpu_product:
        return {}
    labels = {"nvidia.com/gpu.present": "true", PRODUCT_LABEL: pool.gpu_product,
              "nvidia.com/gpu.count": str(pool.gpus_per_node)}
    known = GPU_PRODUCTS.get(pool.gpu_product)
    if known:
        labels["nvidia.com/gpu.memory"] = str(known[0])
        labels["nvidia.com/gpu.family"] = known[1]
    return labels


# --- the Node object ---------------------------------------------------------------------------

def new_node(pool: NodePool, identity: NodeIdentity, now: str, *, nodegroup: str | None,
             ready: bool) -> Obj:
    """A node as it registers: Ready (and GPUs advertised) for nodes that exist when the
    scenario loads; NotReady with the not-ready taint for nodes still provisioning."""
    labels = {
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": identity.name,
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/instance-type": pool.instance_type,
        "node.kubernetes.io/instance-type": pool.instance_type,
        "topology.kubernetes.io/region": REGION, "topology.kubernetes.io/zone": identity.zone,
        "failure-domain.beta.kubernetes.io/region": REGION,
        "failure-domain.beta.kubernetes.io/zone": identity.zone,
        "topology.k8s.aws/zone-id": f"use1-az{(ord(identity.zone[-1]) - ord('a')) % 6 + 1}",
        POOL_LABEL: pool.name,
    }
    if nodegroup:
        labels.update({"eks.amazonaws.com/nodegroup": nodegroup,
                       "eks.amazonaws.com/capacityType": pool.capacity_type,
                       "eks.amazonaws.com/nodegroup-image": "ami-0f1b8e7a35e2b4c11"})
    labels.update(pool.labels)
    if ready:
        labels.update(gpu_feature_labels(pool))
    taints = [t.as_kubernetes() for t in pool.taints]
    if not ready:
        taints.append({"key": TAINT_NOT_READY, "effect": "NoSchedule"})
    capacity, allocatable = node_resources(pool, gpus_advertised=ready)
    conditions = [{"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated",
                   "message": "RouteController created a route",
                   "lastHeartbeatTime": now, "lastTransitionTime": now}]
    conditions += [{"type": t, "status": s, "reason": r, "message": m,
                    "lastHeartbeatTime": now, "lastTransitionTime": now}
                   for t, s, r, m in HEALTHY_CONDITIONS]
    conditions.append(ready_condition(ready, now))
    digest = hashlib.md5(identity.instance_id.encode()).hexdigest()
    system_uuid = f"ec2{digest[3:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:]}"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": identity.name, "labels": labels,
            "annotations": {"alpha.kubernetes.io/provided-node-ip": identity.private_ip,
                            "node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"providerID": identity.provider_id, "taints": taints},
        "status": {
            "capacity": capacity, "allocatable": allocatable, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": identity.private_ip},
                          {"type": "InternalDNS", "address": identity.name},
                          {"type": "Hostname", "address": identity.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": digest, "systemUUID": system_uuid,
                "bootID": str(uuid.UUID(hashlib.md5(system_uuid.encode()).hexdigest())),
                "kernelVersion": KERNEL_VERSION, "osImage": OS_IMAGE,
                "containerRuntimeVersion": CONTAINER_RUNTIME,
                "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux", "architecture": "amd64",
            },
        },
    }


def ready_condition(ready: bool, now: str) -> Obj:
    if ready:
        return {"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                "lastTransitionTime": now}
    return {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
            "message": NOT_READY_MESSAGE, "lastHeartbeatTime": now, "lastTransitionTime": now}



def advertise_gpus(status: Obj, pool: NodePool) -> None:
    if pool.gpus_per_node:
        for field in ("capacity", "allocatable"):
            resources = status.setdefault(field, {})
            resources[GPU_RESOURCE] = str(pool.gpus_per_node)
            resources[GPU_MILLI_RESOURCE] = str(pool.gpus_per_node * MILLI_PER_GPU)
