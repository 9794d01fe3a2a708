"""Node pools: groups of identical nodes that grow and shrink the way EKS node groups do.

A pool's desired size comes from AWS when `aws_endpoint` is set and the pool is backed by an
EKS managed node group or an Auto Scaling group (in moto); otherwise it is static and changes
only through the `scale-pool` fault. The controller converges on it: a new node registers
NotReady at once, turns Ready after the pool's provisioning lag and advertises its GPUs
`gpuPluginDelaySeconds` later (the device plugin); scale-in cordons a node (cordoned, then
emptiest, then youngest first), deletes its pods and removes it once they are gone.

`cluster.config.extra["pools"]` maps pool names to their `NodePool` for other components
(metrics, scenario loading); nodes carry the pool in the `gpuops.io/pool` label.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from gpuops.common.quantity import parse_quantity

from ..controllers.nodelifecycle import NodeLifecycleController, remove_node, report_ready
from ..core import errors
from ..core.clock import parse_rfc3339, rfc3339
from ..core.faults import FaultParams
from ..core.nodeindex import NodeIndex
from ..core.nodes import (
    GPU,
    POOL_LABEL,
    TAINT_NOT_READY,
    TAINT_UNSCHEDULABLE,
    NodeNamer,
    add_taint,
    advertise_gpus,
    condition,
    gpu_feature_labels,
    holds_resources,
    is_ready,
    new_node,
    pod_gpu_request,
)
from ..core.recorder import record_event

if TYPE_CHECKING:
    from ..cluster import Controller, SimCluster
    from .aws import GroupSize

log = logging.getLogger("gpuops.simcluster.nodepools")
Obj = dict[str, Any]
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


def _quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PydanticCustomError("quantity", "must be a Kubernetes quantity such as 192, "
                                  "'500m' or '2048Gi'")
    parse_quantity(value)  # raises ValueError naming the text
    return str(value)


Quantity = Annotated[str, BeforeValidator(_quantity)]


class SpecModel(BaseModel):
    """Scenario sections: camelCase keys, unknown keys rejected, immutable once loaded."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)


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
    taints: list[Taint] = []
    labels: dict[str, str] = {}
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


def pools_of(cluster: SimCluster) -> dict[str, NodePool]:
    return cluster.config.extra.setdefault("pools", {})


_namers: weakref.WeakKeyDictionary[SimCluster, NodeNamer] = weakref.WeakKeyDictionary()


def register_node(cluster: SimCluster, pool: NodePool, *, ready: bool,
                  zone: str | None = None, instance_id: str | None = None) -> Obj:
    """Create a pool's Node: Ready with GPUs (present when the scenario loads) or NotReady
    (just provisioned, with the kubelet's registration events)."""
    store = cluster.store
    nodes = store.type("nodes")
    namer = _namers.setdefault(cluster, NodeNamer(cluster.config.cluster_name))
    identity = namer.next(zone or pool.zones[0], lambda n: store.find(nodes, None, n) is not None,
                          instance_id)
    nodegroup = pool.aws_group_name(cluster.config.cluster_name) if pool.backing == "eks" \
        else None
    node = store.create(nodes, new_node(pool, identity, rfc3339(cluster.clock.now()),
                                        nodegroup=nodegroup, ready=ready))
    if not ready:
        record_event(cluster, node, "Starting", "Starting kubelet.", component="kubelet",
                     host=identity.name)
        record_event(cluster, node, "RegisteredNode", f"Node {identity.name} event: Registered "
                     f"Node {identity.name} in Controller", component="node-controller")
    return node


def free_gpus(node: Obj, pods: list[Obj]) -> int:
    allocatable = int(parse_quantity(((node.get("status") or {}).get("allocatable") or {}).get(
        GPU, 0)))
    return allocatable - sum(pod_gpu_request(p) for p in pods if holds_resources(p))


@dataclass
class PoolRuntime:
    pool: NodePool
    aws: bool  # True: the size comes from AWS
    desired: int | None  # None until AWS has answered
    removing: dict[str, float] = field(default_factory=dict)  # node -> force-removal time
    instances: dict[str, str] = field(default_factory=dict)  # live ASG instance -> zone
    known_instances: set[str] = field(default_factory=set)
    gone_instances: set[str] = field(default_factory=set)  # terminated: remove their nodes
    # ASG instances found at the first sync stand for the nodes the scenario created: new
    # nodes take only instances launched later.
    preexisting: set[str] | None = None
    aws_created: bool = False


class NodePoolController:
    name = "nodepools"

    def __init__(self, cluster: SimCluster, index: NodeIndex) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.index = index
        self.runtimes: dict[str, PoolRuntime] = {}
        self._timeline: list[tuple[float, int, str, str, str]] = []  # due, seq, action, node, uid
        self._seq = itertools.count()
        self.tick_seconds = float(cluster.config.extra.get("nodepool_tick_seconds", 0.5))
        self._sync_pools()

    async def run(self) -> None:
        while True:
            self.step()
            await self.cluster.clock.sleep(self.tick_seconds, min_real=0.05)

    def step(self) -> None:
        now = self.cluster.clock.time()
        self._sync_pools()
        self._run_due(now)
        for runtime in self.runtimes.values():
            self._reconcile(runtime, now)
        self._progress_removals(now)

    def _sync_pools(self) -> None:
        """Pick up pools added since (a scenario loaded into the running cluster)."""
        for name, pool in pools_of(self.cluster).items():
            if name not in self.runtimes:
                aws = bool(self.cluster.config.aws_endpoint) and pool.backing != "none"
                self.runtimes[name] = PoolRuntime(pool, aws, None if aws else pool.desired_size)

    def apply_group_size(self, runtime: PoolRuntime, size: GroupSize) -> None:
        runtime.desired = size.desired
        if size.instances is not None:
            if runtime.preexisting is None:
                runtime.preexisting = set(size.instances)
            runtime.gone_instances |= runtime.known_instances - set(size.instances)
            runtime.known_instances = set(size.instances)
            runtime.instances = dict(size.instances)

    # --- converging on the desired size --------------------------------------------------------

    def _reconcile(self, runtime: PoolRuntime, now: float) -> None:
        if runtime.desired is None:
            return
        names = self.index.pool_nodes(runtime.pool.name)
        if runtime.gone_instances:
            for name in list(names):
                if _instance_of(self._node(name)) in runtime.gone_instances:
                    self._start_removal(runtime, name, now)
            runtime.gone_instances.clear()
        live = [n for n in names if n not in runtime.removing]
        if len(live) < runtime.desired:
            for _ in range(runtime.desired - len(live)):
                self._provision(runtime, live, now)
        elif len(live) > runtime.desired:
            for name in self._scale_in_order(live)[: len(live) - runtime.desired]:
                self._start_removal(runtime, name, now)

    def _provision(self, runtime: PoolRuntime, live: list[str], now: float) -> None:
        pool = runtime.pool
        zone, instance = None, None
        claimed = {_instance_of(self._node(n)) for n in live}
        unclaimed = [i for i in runtime.instances
                     if i not in claimed and i not in (runtime.preexisting or ())]
        if unclaimed:
            instance = unclaimed[0]
            zone = runtime.instances[instance]
        else:
            per_zone = {z: 0 for z in pool.zones}
            for name in live:
                node_zone = (self._node(name)["metadata"].get("labels") or {}).get(
                    "topology.kubernetes.io/zone")
                if node_zone in per_zone:
                    per_zone[node_zone] += 1
            zone = min(pool.zones, key=lambda z: per_zone[z])
        node = register_node(self.cluster, pool, ready=False, zone=zone, instance_id=instance)
        live.append(node["metadata"]["name"])
        self._at(now + pool.provisioning_lag_seconds, "ready", node)
        log.info("pool %s: provisioning node %s", pool.name, node["metadata"]["name"])

    def _scale_in_order(self, names: list[str]) -> list[str]:
        """Cordoned nodes first, then the emptiest, then the youngest."""
        def key(name: str) -> tuple[bool, int, float]:
            node = self._node(name)
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            created = node["metadata"].get("creationTimestamp")
            return (not cordoned, self.index.pod_count(name),
                    -parse_rfc3339(created) if created else 0.0)
        return sorted(names, key=key)

    def _start_removal(self, runtime: PoolRuntime, name: str, now: float) -> None:
        if name in runtime.removing or self.store.find(self.index.nodes_type, None, name) is None:
            return

        def cordon(node: Obj) -> None:
            spec = node.setdefault("spec", {})
            spec["unschedulable"] = True
            add_taint(spec, TAINT_UNSCHEDULABLE, "NoSchedule")

        node = self.store.mutate(self.index.nodes_type, None, name, cordon)
        record_event(self.cluster, node, "NodeNotSchedulable",
                     f"Node {name} status is now: NodeNotSchedulable", component="kubelet",
                     host=name)
        grace = 0
        for pod in self.index.pods_on(name):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or _daemon_pod(pod):
                continue
            grace = max(grace, int((pod.get("spec") or {}).get(
                "terminationGracePeriodSeconds", 30)))
            self.store.delete(self.index.pods_type, meta["namespace"], meta["name"])
        runtime.removing[name] = now + grace + 5
        log.info("pool %s: removing node %s", runtime.pool.name, name)

    def _progress_removals(self, now: float) -> None:
        for runtime in self.runtimes.values():
            for name, deadline in list(runtime.removing.items()):
                if self.store.find(self.index.nodes_type, None, name) is None:
                    del runtime.removing[name]
                    continue
                busy = [p for p in self.index.pods_on(name) if not _daemon_pod(p)]
                if busy and now < deadline:
                    continue
                remove_node(self.cluster, self.index, name)
                del runtime.removing[name]

    # --- provisioning timeline -----------------------------------------------------------------

    def _at(self, due: float, action: str, node: Obj) -> None:
        heapq.heappush(self._timeline, (due, next(self._seq), action, node["metadata"]["name"],
                                        node["metadata"]["uid"]))

    def _run_due(self, now: float) -> None:
        while self._timeline and self._timeline[0][0] <= now:
            due, _, action, name, uid = heapq.heappop(self._timeline)
            node = self.store.find(self.index.nodes_type, None, name)
            if node is None or node["metadata"]["uid"] != uid:
                continue
            pool = pools_of(self.cluster).get(
                (node["metadata"].get("labels") or {}).get(POOL_LABEL, ""))
            if pool is None:
                continue
            if action == "ready":
                self._become_ready(node, pool, due)
            elif action == "gpus":
                self._advertise_gpus(node, pool)

    def _become_ready(self, node: Obj, pool: NodePool, due: float) -> None:
        ready = condition(node, "Ready")
        if ready is None or ready.get("reason") != "KubeletNotReady":
            return  # a fault changed it meanwhile: leave it to the fault's recovery
        name = node["metadata"]["name"]
        node = report_ready(self.cluster, self.index, name, rfc3339(self.cluster.clock.now()),
                            TAINT_NOT_READY)
        if pool.gpus_per_node:
            self._at(due + pool.gpu_plugin_delay_seconds, "gpus", node)

    def _advertise_gpus(self, node: Obj, pool: NodePool) -> None:
        name = node["metadata"]["name"]
        if GPU in ((node.get("status") or {}).get("allocatable") or {}):
            return
        self.store.mutate(self.index.nodes_type, None, name,
                          lambda n: advertise_gpus(n.setdefault("status", {}), pool),
                          subresource="status")
        self.store.mutate(self.index.nodes_type, None, name,
                          lambda n: n["metadata"].setdefault("labels", {}).update(
                              gpu_feature_labels(pool)))

    def _node(self, name: str) -> Obj:
        return self.store.find(self.index.nodes_type, None, name) or {"metadata": {"name": name}}

    # --- faults --------------------------------------------------------------------------------

    def register_faults(self) -> None:
        faults = self.cluster.faults
        faults.register("scale-pool", self.scale_pool,
                        "resize a pool that is not following AWS", params=ScalePoolParams,
                        target="a node pool (or params.pool)")
        faults.register("gpu-fragmentation", self.fragment_gpus,
                        "place 1-GPU filler pods on every node of a pool so none keeps all its "
                        "GPUs free", params=FragmentParams, target="a node pool (or params.pool)")

    def _runtime(self, target: str | None, params: dict[str, Any]) -> PoolRuntime:
        name = params.get("pool") or target
        self._sync_pools()
        if name not in self.runtimes:
            raise errors.bad_request(f"unknown pool {name!r}; pools: "
                                     f"{', '.join(sorted(self.runtimes)) or 'none'}")
        return self.runtimes[name]

    def scale_pool(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        runtime = self._runtime(target, params)
        pool = runtime.pool
        size = params["size"]
        if size > pool.max_size:
            raise errors.bad_request(f"params.size must be an integer from 0 to the pool's "
                                     f"maxSize {pool.max_size}, got {size!r}")
        if runtime.aws:
            what = "EKS node group" if pool.backing == "eks" else "Auto Scaling group"
            raise errors.bad_request(
                f"pool {pool.name!r} follows its {what} "
                f"{pool.aws_group_name(self.cluster.config.cluster_name)!r} in AWS: change "
                "its size there (`update_nodegroup_config` / `set_desired_capacity`)")
        before, runtime.desired = runtime.desired, size
        self._reconcile(runtime, self.cluster.clock.time())
        return {"pool": pool.name, "from": before, "to": size}

    def fragment_gpus(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        runtime = self._runtime(target, params)
        per_node, namespace = params["podsPerNode"], params["namespace"]
        from ..core.admission import admit_create

        created, free_after = [], {}
        for name in sorted(self.index.pool_nodes(runtime.pool.name)):
            node = self._node(name)
            if not is_ready(node) or (node.get("spec") or {}).get("unschedulable"):
                continue
            free = free_gpus(node, self.index.pods_on(name))
            count = min(per_node, free)
            for _ in range(count):
                body = admit_create(self.cluster, self.index.pods_type,
                                    _filler_pod(runtime.pool, name, params), namespace)
                pod = self.store.create(self.index.pods_type, body, namespace)
                created.append(pod["metadata"]["name"])
            free_after[name] = free - count
        return {"pool": runtime.pool.name, "pods": created, "freeGpus": free_after}


class ScalePoolParams(FaultParams):
    pool: str | None = Field(None, min_length=1, description="the pool (default: the target)")
    size: int = Field(ge=0, le=10_000, description="nodes wanted, up to the pool's maxSize")


class FragmentParams(FaultParams):
    pool: str | None = Field(None, min_length=1, description="the pool (default: the target)")
    podsPerNode: int = Field(1, ge=1, le=64, validation_alias=AliasChoices(
        "podsPerNode", "pods_per_node"), description="1-GPU filler pods per node")
    namespace: str = Field("default", min_length=1, description="where the filler pods go")
    priorityClassName: str | None = Field(None, min_length=1,
                                          description="the filler pods' PriorityClass")


def _filler_pod(pool: NodePool, node: str, params: dict[str, Any]) -> Obj:
    spec: Obj = {
        "nodeName": node, "restartPolicy": "Always",
        "containers": [{
            "name": "filler", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
            "command": ["sleep", "infinity"],
            "resources": {"requests": {"cpu": "1", "memory": "4Gi", GPU: "1"},
                          "limits": {"memory": "4Gi", GPU: "1"}}}],
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
    }
    if params.get("priorityClassName"):
        spec["priorityClassName"] = params["priorityClassName"]
    return {"metadata": {"generateName": f"gpu-filler-{pool.name}-",
                         "labels": {"app": "gpu-filler", "gpuops.io/filler": "true",
                                    POOL_LABEL: pool.name}},
            "spec": spec}


def _instance_of(node: Obj) -> str:
    return ((node.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1]


def _daemon_pod(pod: Obj) -> bool:
    return any(ref.get("kind") == "DaemonSet"
               for ref in pod["metadata"].get("ownerReferences") or [])


def build(cluster: SimCluster) -> list[Controller]:
    index = NodeIndex(cluster.store)
    pools = NodePoolController(cluster, index)
    lifecycle = NodeLifecycleController(cluster, index)
    pools.register_faults()
    lifecycle.register_faults()
    controllers: list[Controller] = [pools, lifecycle]
    if cluster.config.aws_endpoint:
        from .aws import AwsPoolSync  # boto3 is imported only when AWS backs pools

        controllers.append(AwsPoolSync(cluster, pools))
    return controllers
