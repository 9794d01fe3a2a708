"""What the GPU rebalance planner reads: nodes, running pods, pending pods, disruption budgets.

Plain frozen dataclasses, built by whoever knows the cluster (the flow from Kubernetes
objects, the bench from the Alibaba trace, tests by hand), validated here so that every bad
field is named before anything is computed.

GPUs are counted in milli-GPU per device, as the Alibaba trace and its simulator do: a pod
asks for `gpu_count` devices with `gpu_milli` of each (1000 = a whole GPU; a shared pod asks
for one device and less than 1000). A running pod records which devices of its node it holds
(`gpu_ids`), because fragmentation is a matter of which device has how much left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuops.common.errors import ConfigError
from gpuops.common.nodefit import requirement_matches, tolerates

MILLI = 1000  # milli-GPU in one GPU

# Owner kinds that recreate a pod evicted by the planner (DaemonSet pods are recreated on the
# same node only, so they never move).
CONTROLLER_KINDS = frozenset({"ReplicaSet", "StatefulSet", "Job", "ReplicationController"})

SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if self.effect not in TAINT_EFFECTS:
            raise ConfigError("taint.effect", f"{self.effect!r} is not one of "
                              f"{sorted(TAINT_EFFECTS)}")


@dataclass(frozen=True)
class Toleration:
    """As in Kubernetes: an empty key with `Exists` tolerates every taint; an empty effect
    matches every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def __post_init__(self) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise ConfigError("toleration.operator", f"{self.operator!r} is not Equal or Exists")

    def tolerates(self, taint: Taint) -> bool:
        return tolerates(self.key, self.operator, self.value, self.effect, taint.key,
                         taint.value, taint.effect)


@dataclass(frozen=True)
class Requirement:
    """One node-selector requirement of a required node-affinity term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in SELECTOR_OPERATORS:
            raise ConfigError("requirement.operator", f"{self.operator!r} is not one of "
                              f"{sorted(SELECTOR_OPERATORS)}")

    def matches(self, labels: Mapping[str, str]) -> bool:
        return requirement_matches(self.key, self.operator, self.values, labels)


@dataclass(frozen=True)
class Node:
    """A node's allocatable resources; `gpus` devices of model `gpu_model`, 1000 milli each."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    cordoned: bool = False

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "memory_mib", "gpus"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"node {self.name!r}: {name}",
                                  f"must be an integer >= 0, got {value!r}")
        if not self.name:
            raise ConfigError("node.name", "must not be empty")


@dataclass(frozen=True)
class Pod:
    """A running (`node` set) or pending (`node` None) pod, with what the planner must respect.

    `owner_kind` None means a bare pod: nothing would recreate it, so it is never moved.
    `pdb` names the PodDisruptionBudget that selects it. `move_cost` None means the
    `gpuops.io/move-cost` annotation, else the planner's default.
    """

    name: str
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0  # per device; 0 with gpu_count > 0 means whole GPUs (1000)
    gpu_models: frozenset[str] = frozenset()  # allowed GPU models; empty = any
    priority: int = 0
    owner_kind: str | None = "ReplicaSet"
    pdb: str | None = None
    node: str | None = None
    gpu_ids: tuple[int, ...] = ()
    namespace: str = "default"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # required node affinity: OR of terms, each an AND of requirements
    affinity: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    move_cost: float | None = None
    local_storage: bool = False  # an emptyDir / hostPath volume: moving loses its data

    def __post_init__(self) -> None:
        where = f"pod {self.key!r}"
        for name in ("cpu_milli", "memory_mib", "gpu_count", "gpu_milli"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}: {name}", f"must be an integer >= 0, got {value!r}")
        if self.gpu_count and self.gpu_milli == 0:
            object.__setattr__(self, "gpu_milli", MILLI)
        if self.gpu_milli > MILLI:
            raise ConfigError(f"{where}: gpu_milli",
                              f"is per GPU and at most {MILLI}, got {self.gpu_milli}")
        if self.gpu_milli and not self.gpu_count:
            raise ConfigError(f"{where}: gpu_count", "must be >= 1 when gpu_milli is set")
        if self.gpu_count > 1 and self.gpu_milli < MILLI:
            raise ConfigError(f"{where}: gpu_milli",
                              "a pod asking for several GPUs takes whole ones (1000)")
        if self.node is not None and self.gpu_count and len(self.gpu_ids) != self.gpu_count:
            raise ConfigError(f"{where}: gpu_ids", f"a running pod holding {self.gpu_count} "
                              f"GPU(s) must name as many devices, got {list(self.gpu_ids)}")
        if len(set(self.gpu_ids)) != len(self.gpu_ids):
            raise ConfigError(f"{where}: gpu_ids", f"repeats a device: {list(self.gpu_ids)}")
        if self.move_cost is not None and not self.move_cost >= 0:
            raise ConfigError(f"{where}: move_cost", f"must be >= 0, got {self.move_cost!r}")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gpu_total_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def shape(self) -> tuple[int, int, int]:
        """(cpu_milli, gpu_count, gpu_milli): what the FGD measure tells pods apart by."""
        return (self.cpu_milli, self.gpu_count, self.gpu_milli)


@dataclass(frozen=True)
class Pdb:
    """A PodDisruptionBudget by name and how many more disruptions it allows right now."""

    name: str
    disruptions_allowed: int

    def __post_init__(self) -> None:
        if self.disruptions_allowed < 0:
            raise ConfigError(f"pdb {self.name!r}: disruptions_allowed",
                              f"must be >= 0, got {self.disruptions_allowed}")


@dataclass(frozen=True)
class Cluster:
    """Nodes, the pods running on them and the pods waiting, as one consistent picture."""

    nodes: tuple[Node, ...]
    running: tuple[Pod, ...] = ()
    pending: tuple[Pod, ...] = ()
    pdbs: tuple[Pdb, ...] = ()

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ConfigError("nodes", "node names repeat")
        by_name = {n.name: n for n in self.nodes}
        keys = [p.key for p in self.running + self.pending]
        if len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            raise ConfigError("pods", f"pod names repeat: {dup[:5]}")
        pdb_names = {b.name for b in self.pdbs}
        used: dict[tuple[str, int], int] = {}
        for pod in self.running:
            if pod.node not in by_name:
                raise ConfigError(f"pod {pod.key!r}: node", f"{pod.node!r} is not a node")
            node = by_name[pod.node]
            for gid in pod.gpu_ids:
                if not 0 <= gid < node.gpus:
                    raise ConfigError(f"pod {pod.key!r}: gpu_ids", f"device {gid} is not one "
                                      f"of node {node.name!r}'s {node.gpus} GPU(s)")
                used[(node.name, gid)] = used.get((node.name, gid), 0) + pod.gpu_milli
                if used[(node.name, gid)] > MILLI:
                    raise ConfigError(f"pod {pod.key!r}: gpu_ids", f"device {gid} of node "
                                      f"{node.name!r} is given more than {MILLI} milli-GPU")
        for pod in self.running + self.pending:
            if pod.pdb is not None and pod.pdb not in pdb_names:
                raise ConfigError(f"pod {pod.key!r}: pdb", f"{pod.pdb!r} is not a listed PDB")
        for pod in self.pending:
            if pod.node is not None:
                raise ConfigError(f"pod {pod.key!r}: node", "a pending pod has no node")
