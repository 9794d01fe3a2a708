"""The node pools a cluster has, as a scenario declares them, and how their nodes register.

`NodePools` is the one catalog of pools: scenario loading adds to it (at startup or into a
running cluster), the node pool controller converges each on its size. Nodes carry their pool
in the `gpuops.io/pool` label and are named like EC2 instances, deterministically from the
cluster's name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from gpuops.common.quantity import parse_quantity

from ..core.clock import VirtualClock, rfc3339
from ..core.recorder import Recorder
from ..core.specmodel import SpecModel
from ..core.store import Store
from .nodes import NodeNamer, new_node

Obj = dict[str, Any]
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


def _quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PydanticCustomError("quantity", "must be a Kubernetes quantity such as 192, "
                                  "'500m' or '2048Gi'")
    parse_quantity(value)  # raises ValueError naming the text
    return str(value)


Quantity = Annotated[str, BeforeValidator(_quantity)]


class Taint(SpecModel):
    key: str = Field(min_length=1)
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    def as_kubernetes(self) -> Obj:
        return {"key": self.key, **({"value": self.value} if self.value else {}),
                "effect": self.effect}


class NodePool(SpecModel):
    """One pool as a scenario file declares it (camelCase keys)."""

    name: str = Field(pattern=DNS_LABEL)
    instance_type: str
    gpu_product: str | None = None  # the nvidia.com/gpu.product label, e.g. NVIDIA-L4
    gpus_per_node: int = Field(0, ge=0)
    cpu: Quantity
    memory: Quantity
    ephemeral_storage: Quantity = "100Gi"
    max_pods: int = Field(110, ge=1)
    min_size: int = Field(0, ge=0)
    max_size: int = Field(ge=0)
    desired_size: int = Field(ge=0)
    provisioning_lag_seconds: float = Field(240, ge=0)
    gpu_plugin_delay_seconds: float = Field(75, ge=0)
    price_per_hour: float = Field(0, ge=0)
    taints: list[Taint] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    backing: Literal["eks", "asg", "none"] = "none"
    zones: list[str] = Field(default=["us-east-1a", "us-east-1b", "us-east-1c"], min_length=1)
    capacity_type: Literal["ON_DEMAND", "SPOT"] = "ON_DEMAND"
    aws_name: str | None = None  # node group / ASG name; default below

    @model_validator(mode="after")
    def _sizes_and_gpus(self) -> NodePool:
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(f"desiredSize {self.desired_size} must be between minSize "
                             f"{self.min_size} and maxSize {self.max_size}")
        if self.gpus_per_node and not self.gpu_product:
            raise ValueError("gpuProduct is required when gpusPerNode > 0 (the "
                             "nvidia.com/gpu.product label, e.g. `NVIDIA-H100-80GB-HBM3`)")
        return self

    def aws_group_name(self, cluster_name: str) -> str:
        """The EKS node group (named as the pool) or ASG (account-wide: prefixed) name."""
        if self.aws_name:
            return self.aws_name
        return self.name if self.backing != "asg" else f"{cluster_name}-{self.name}"


class NodePools:
    """Pools by name, and the registration of their nodes."""

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 cluster_name: str) -> None:
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.cluster_name = cluster_name
        self.by_name: dict[str, NodePool] = {}
        self._namer = NodeNamer(cluster_name)
        self._nodes = store.type("nodes")

    def register_node(self, pool: NodePool, *, ready: bool, zone: str | None = None,
                      instance_id: str | None = None) -> Obj:
        """Create a pool's Node: Ready with GPUs (present when the scenario loads) or NotReady
        (just provisioned, with the kubelet's registration events)."""
        store, nodes = self.store, self._nodes
        identity = self._namer.next(zone or pool.zones[0],
                                    lambda n: store.find(nodes, None, n) is not None, instance_id)
        nodegroup = pool.aws_group_name(self.cluster_name) if pool.backing == "eks" else None
        node = store.create(nodes, new_node(pool, identity, rfc3339(self.clock.now()),
                                            nodegroup=nodegroup, ready=ready))
        if not ready:
            self.recorder.record(node, "Starting", "Starting kubelet.", component="kubelet",
                                 host=identity.name)
            self.recorder.record(node, "RegisteredNode", f"Node {identity.name} event: "
                                 f"Registered Node {identity.name} in Controller",
                                 component="node-controller")
        return node
