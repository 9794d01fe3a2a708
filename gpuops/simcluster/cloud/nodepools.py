"""Node pools: groups of identical nodes that grow and shrink the way EKS node groups do.

A pool's desired size comes from AWS when `aws_endpoint` is set and the pool is backed by an
EKS managed node group or an Auto Scaling group (in moto); otherwise it is static and changes
only through the `scale-pool` fault. The controller converges on it: a new node registers
NotReady at once, turns Ready after the pool's provisioning lag and advertises its GPUs
`gpuPluginDelaySeconds` later (the device plugin); scale-in cordons a node, deletes its pods
and removes it once they are gone. Which node goes on a bare decrease of the size is the Auto
Scaling group's default termination policy's choice (`termination.py`: zone balance first,
never how busy a node is), as on AWS; an instance terminated in AWS removes its own node.

The pools themselves are `pools.py`'s catalog (scenario loading adds to it); nodes carry their
pool in the `gpuops.io/pool` label.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..core import errors
from ..core.clock import VirtualClock, parse_rfc3339, rfc3339
from ..core.faults import FaultParams, FaultRegistry
from ..core.gpus import GPU_RESOURCE
from ..core.nodeindex import NodeIndex
from ..core.nodes import (
    POOL_LABEL,
    TAINT_NOT_READY,
    TAINT_UNSCHEDULABLE,
    add_taint,
    condition,
)
from ..core.nodewrites import remove_node, report_ready
from ..core.recorder import Recorder
from ..core.store import Store
from .fragmentation import FragmentParams, GpuFragmentation
from .nodes import advertise_gpus, gpu_feature_labels
from .pools import NodePool, NodePools
from .termination import Instance, termination_order

if TYPE_CHECKING:
    from .aws import GroupSize

log = logging.getLogger("gpuops.simcluster.nodepools")
Obj = dict[str, Any]


@dataclass(frozen=True)
class NodePoolsConfig:
    tick_seconds: float = 0.5  # virtual seconds between the controller's steps
    aws_endpoint: str | None = None  # moto's URL: pools backed by AWS follow their group
    aws_poll_seconds: float = 2.0  # virtual seconds between reads of the groups' sizes


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
    protected: frozenset[str] = frozenset()  # instances protected from scale in
    seen_nodegroup: tuple[int, int, int] | None = None  # an EKS node group's sizes, last read
    seen_group_desired: int | None = None  # its Auto Scaling group's, last read


class NodePoolController:
    name = "nodepools"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder, nodes: NodeIndex,
                 pools: NodePools, config: NodePoolsConfig) -> None:
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.index = nodes
        self.pools = pools
        self.config = config
        self.runtimes: dict[str, PoolRuntime] = {}
        self._timeline: list[tuple[float, int, str, str, str]] = []  # due, seq, action, node, uid
        self._seq = itertools.count()
        self.fragmentation = GpuFragmentation(store, nodes, pools.by_name)
        self._sync_pools()

    async def run(self) -> None:
        while True:
            self.step()
            await self.clock.sleep(self.config.tick_seconds, min_real=0.05)

    def step(self) -> None:
        now = self.clock.time()
        self._sync_pools()
        self._run_due(now)
        for runtime in self.runtimes.values():
            self._reconcile(runtime, now)
        self._progress_removals(now)
        self.fragmentation.step()

    def _sync_pools(self) -> None:
        """Pick up pools added since (a scenario loaded into the running cluster)."""
        for name, pool in self.pools.by_name.items():
            if name not in self.runtimes:
                aws = bool(self.config.aws_endpoint) and pool.backing != "none"
                self.runtimes[name] = PoolRuntime(pool, aws, None if aws else pool.desired_size)

    def apply_group_size(self, runtime: PoolRuntime, size: GroupSize) -> None:
        runtime.desired = size.desired
        runtime.protected = size.protected
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
            for name in self._scale_in_victims(runtime, live, len(live) - runtime.desired):
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
        node = self.pools.register_node(pool, ready=False, zone=zone, instance_id=instance)
        live.append(node["metadata"]["name"])
        self._at(now + pool.provisioning_lag_seconds, "ready", node)
        log.info("pool %s: provisioning node %s", pool.name, node["metadata"]["name"])

    def _scale_in_victims(self, runtime: PoolRuntime, names: list[str], count: int) -> list[str]:
        """The nodes a bare decrease of the group by `count` terminates: the default
        termination policy over their instances (not the emptiest, as AWS does not know)."""
        instances = []
        for name in names:
            node = self._node(name)
            instance = _instance_of(node) or name
            zone = (node["metadata"].get("labels") or {}).get("topology.kubernetes.io/zone", "")
            created = node["metadata"].get("creationTimestamp")
            instances.append(Instance(name, instance, zone,
                                      parse_rfc3339(created) if created else 0.0,
                                      instance in runtime.protected))
        return termination_order(instances, count, self.clock.time())

    def termination_victims(self, runtime: PoolRuntime, size: GroupSize, count: int
                            ) -> list[str]:
        """The instances of a managed node group's Auto Scaling group its default termination
        policy picks for a scale-in by `count` (instances without a node yet count as just
        launched)."""
        nodes = {_instance_of(self._node(n)): self._node(n)
                 for n in self.index.pool_nodes(runtime.pool.name)}
        now = self.clock.time()
        instances = []
        for instance, zone in sorted((size.instances or {}).items()):
            created = (nodes.get(instance) or {}).get("metadata", {}).get("creationTimestamp")
            instances.append(Instance(instance, instance, zone,
                                      parse_rfc3339(created) if created else now,
                                      instance in size.protected))
        return termination_order(instances, count, now)

    def nodes_and_zones(self, runtime: PoolRuntime) -> list[tuple[str, str]]:
        """The pool's nodes with their zones, for their group to give each an instance."""
        out = []
        for name in sorted(self.index.pool_nodes(runtime.pool.name)):
            labels = self._node(name)["metadata"].get("labels") or {}
            out.append((name, labels.get("topology.kubernetes.io/zone")
                        or runtime.pool.zones[0]))
        return out

    def adopt_instances(self, runtime: PoolRuntime, adopted: dict[str, str]) -> None:
        """The pool's nodes are the instances AWS now has for them: their providerID says so
        (the nodes registered before AWS was reachable)."""
        for name, instance in adopted.items():
            if self.store.find(self.index.nodes_type, None, name) is None:
                continue

            def point(node: Obj, instance: str = instance) -> None:
                zone = (node["metadata"].get("labels") or {}).get(
                    "topology.kubernetes.io/zone", runtime.pool.zones[0])
                node.setdefault("spec", {})["providerID"] = f"aws:///{zone}/{instance}"

            self.store.mutate(self.index.nodes_type, None, name, point)
        if adopted:
            runtime.preexisting = set()  # every instance found at the first read has a node
            # Known from now: one terminated before the first read of the group still
            # removes its own node, not whichever the scale-in policy would pick.
            runtime.known_instances |= set(adopted.values())

    def _start_removal(self, runtime: PoolRuntime, name: str, now: float) -> None:
        if name in runtime.removing or self.store.find(self.index.nodes_type, None, name) is None:
            return

        def cordon(node: Obj) -> None:
            spec = node.setdefault("spec", {})
            spec["unschedulable"] = True
            add_taint(spec, TAINT_UNSCHEDULABLE, "NoSchedule")

        node = self.store.mutate(self.index.nodes_type, None, name, cordon)
        self.recorder.record(node, "NodeNotSchedulable",
                             f"Node {name} status is now: NodeNotSchedulable",
                             component="kubelet", host=name)
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
                remove_node(self.store, self.recorder, self.index, name)
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
            pool = self.pools.by_name.get(
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
        node = report_ready(self.store, self.recorder, self.index, name,
                            rfc3339(self.clock.now()), TAINT_NOT_READY)
        if pool.gpus_per_node:
            self._at(due + pool.gpu_plugin_delay_seconds, "gpus", node)

    def _advertise_gpus(self, node: Obj, pool: NodePool) -> None:
        name = node["metadata"]["name"]
        if GPU_RESOURCE in ((node.get("status") or {}).get("allocatable") or {}):
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

    def register_faults(self, faults: FaultRegistry) -> None:
        faults.register("scale-pool", self.scale_pool,
                        "resize a pool that is not following AWS", params=ScalePoolParams,
                        target="a node pool (or params.pool)")
        faults.register("gpu-fragmentation", self.fragmentation.inject,
                        "strand GPUs in a pool: small GPU pods of Deployments leave 1-3 GPUs "
                        "free on every node, then a Job asking for a whole node stays Pending "
                        "although the free GPUs in total would hold it; moving the pods of one "
                        "node (the answer's `repack`) fixes it", params=FragmentParams,
                        target="a node pool (or params.pool; none: the first that works)")

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
                f"{pool.aws_group_name(self.pools.cluster_name)!r} in AWS: change "
                "its size there (`update_nodegroup_config` / `set_desired_capacity`)")
        before, runtime.desired = runtime.desired, size
        self._reconcile(runtime, self.clock.time())
        return {"pool": pool.name, "from": before, "to": size}

class ScalePoolParams(FaultParams):
    pool: str | None = Field(None, min_length=1, description="the pool (default: the target)")
    size: int = Field(ge=0, le=10_000, description="nodes wanted, up to the pool's maxSize")


def _instance_of(node: Obj) -> str:
    return ((node.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1]


def _daemon_pod(pod: Obj) -> bool:
    return any(ref.get("kind") == "DaemonSet"
               for ref in pod["metadata"].get("ownerReferences") or [])
