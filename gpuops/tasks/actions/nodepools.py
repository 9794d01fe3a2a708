"""Node pool sizes as safe actions (desired states with a postcondition), for `perform`.

Why these three: an EKS managed node group under cluster-autoscaler must be pre-warmed by
raising `minSize` — setting `desiredSize` directly fights the autoscaler, which puts it
back — and released by lowering it again; a plain Auto Scaling group is sized by its
desired capacity; a Karpenter cluster has no group to size, so capacity is reserved by
low-priority pause pods that real pods preempt (priority -10: cluster-autoscaler still
scales up for them, it ignores only pods *below* -10). All target `nodepool/<name>`, so one
flow at a time changes a pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuops.common.annotations import PLACEHOLDER_LABEL
from gpuops.common.errors import KubeNotFound, LimitViolation
from gpuops.common.events import k8s_resource
from gpuops.common.podfacts import GPU
from gpuops.tasks.actions.perform import SafeAction
from gpuops.tasks.clients.aws import Aws, GpuBudget
from gpuops.tasks.clients.kube import Kube

PLACEHOLDER_PRIORITY = -10


def pool_target(pool: str) -> str:
    """The slot every change to a node pool holds, whichever module makes it: one flow at a
    time changes a pool."""
    return f"nodepool/{pool}"


def pool_resource(cluster_name: str, pool: str) -> dict[str, str]:
    """The event resource of a change to a node pool, `k8s.<cluster>.nodepool._.<pool>`."""
    return k8s_resource(cluster_name, "NodePool", None, pool)


@dataclass
class SetNodeGroupMinSize(SafeAction):
    """EKS managed node group: minSize = `min_size` (and desiredSize raised to it if below,
    since EKS requires min <= desired). desiredSize is otherwise left to the autoscaler."""

    aws: Aws
    cluster: str
    nodegroup: str
    pool: str
    min_size: int
    budget: GpuBudget | None = None
    cluster_name: str = ""  # the gpuops cluster, for the event resource
    kind = "nodegroup-min-size"

    @property
    def target(self) -> str:
        return pool_target(self.pool)

    def resource(self) -> dict[str, str]:
        return pool_resource(self.cluster_name, self.pool)

    def describe(self) -> str:
        return (f"set EKS node group {self.nodegroup} minSize to {self.min_size} "
                f"(pool {self.pool})")

    def holds(self) -> bool:
        group = self.aws.describe_nodegroup(self.cluster, self.nodegroup)
        return group.min_size == self.min_size and group.desired_size >= self.min_size

    def apply(self) -> None:
        group = self.aws.describe_nodegroup(self.cluster, self.nodegroup)
        if self.min_size > group.max_size:
            raise LimitViolation(f"{self.min_size} is above the node group's maxSize "
                                 f"{group.max_size} ({self.nodegroup!r})",
                                 field="scalingConfig.minSize")
        desired = max(group.desired_size, self.min_size)
        self.aws.update_nodegroup_scaling(
            self.cluster, self.nodegroup, min_size=self.min_size, max_size=group.max_size,
            desired_size=desired,
            budget=self.budget if desired > group.desired_size else None)

    def details(self) -> dict[str, Any]:
        return {"nodegroup": self.nodegroup, "min_size": self.min_size}


@dataclass
class SetAsgDesiredCapacity(SafeAction):
    """Auto Scaling group: DesiredCapacity = `desired`, within its MinSize/MaxSize."""

    aws: Aws
    group: str
    pool: str
    desired: int
    budget: GpuBudget | None = None
    cluster_name: str = ""  # the gpuops cluster, for the event resource
    kind = "asg-desired-capacity"

    @property
    def target(self) -> str:
        return pool_target(self.pool)

    def resource(self) -> dict[str, str]:
        return pool_resource(self.cluster_name, self.pool)

    def describe(self) -> str:
        return f"set Auto Scaling group {self.group} desired capacity to {self.desired} " \
               f"(pool {self.pool})"

    def holds(self) -> bool:
        return self.aws.describe_asg(self.group).desired_size == self.desired

    def apply(self) -> None:
        self.aws.set_asg_desired_capacity(self.group, self.desired, budget=self.budget)

    def details(self) -> dict[str, Any]:
        return {"group": self.group, "desired": self.desired}


@dataclass
class SetAsgWarmPool(SafeAction):
    """Auto Scaling group: a warm pool of `min_size` stopped, pre-initialised instances."""

    aws: Aws
    group: str
    pool: str
    min_size: int
    cluster_name: str = ""  # the gpuops cluster, for the event resource
    kind = "asg-warm-pool"

    @property
    def target(self) -> str:
        return pool_target(self.pool)

    def resource(self) -> dict[str, str]:
        return pool_resource(self.cluster_name, self.pool)

    def describe(self) -> str:
        return f"keep {self.min_size} warm (stopped) instance(s) in {self.group}'s warm pool"

    def holds(self) -> bool:
        config = self.aws.describe_warm_pool(self.group)
        return config is not None and int(config.get("MinSize", -1)) == self.min_size

    def apply(self) -> None:
        self.aws.put_warm_pool(self.group, min_size=self.min_size)


def _selector_labels(selector: str) -> dict[str, str]:
    """`a=b,c=d` -> a nodeSelector; only equality terms can be one."""
    labels = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, sep, value = term.partition("=")
        if not sep or key.endswith("!") or not key:
            raise LimitViolation(f"{selector!r}: placeholder pods need equality terms "
                                 "(`key=value`) to land on the pool", field="node_selector")
        labels[key.strip().rstrip("=")] = value.strip().lstrip("=")
    return labels


@dataclass
class PlaceholderCapacity(SafeAction):
    """A Deployment of `replicas` pause pods, each requesting `gpus_per_pod` GPUs on the
    pool's nodes, at the placeholder priority (-10) and never preempting anything."""

    kube: Kube
    pool: str
    namespace: str
    replicas: int
    gpus_per_pod: int
    node_selector: str
    priority_class: str = "gpuops-placeholder"
    image: str = "registry.k8s.io/pause:3.10"
    tolerations: list[dict[str, Any]] = field(default_factory=lambda: [
        {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}])
    kind = "placeholder-capacity"

    @property
    def name(self) -> str:
        return f"gpuops-placeholder-{self.pool}"

    @property
    def target(self) -> str:
        return pool_target(self.pool)

    def resource(self) -> dict[str, str]:
        return pool_resource(self.kube.cluster_name, self.pool)

    def describe(self) -> str:
        return (f"hold {self.replicas} placeholder pod(s) x {self.gpus_per_pod} GPU(s) on pool "
                f"{self.pool} ({self.namespace}/{self.name})")

    def holds(self) -> bool:
        try:
            current = self.kube.get_deployment(self.namespace, self.name)
        except KubeNotFound:
            return self.replicas == 0
        spec = current.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or {}
        container = (pod.get("containers") or [{}])[0]
        gpus = ((container.get("resources") or {}).get("limits") or {}).get(GPU)
        return (spec.get("replicas") == self.replicas and str(gpus) == str(self.gpus_per_pod)
                and pod.get("priorityClassName") == self.priority_class)

    def apply(self) -> None:
        self._ensure_priority_class()
        body = self._deployment()
        try:
            self.kube.get_deployment(self.namespace, self.name)
        except KubeNotFound:
            self.kube.create_deployment(self.namespace, body)
            return
        self.kube.patch_deployment(self.namespace, self.name, {"spec": body["spec"]})

    def _ensure_priority_class(self) -> None:
        try:
            existing = self.kube.get_priority_class(self.priority_class)
        except KubeNotFound:
            self.kube.create_priority_class({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": self.priority_class}, "value": PLACEHOLDER_PRIORITY,
                "preemptionPolicy": "Never", "globalDefault": False,
                "description": "gpuops capacity placeholders: preempted first, yet "
                               "cluster-autoscaler scales up for them (cutoff -10)."})
            return
        if int(existing.get("value", 0)) < PLACEHOLDER_PRIORITY:
            raise LimitViolation(
                f"PriorityClass {self.priority_class!r} has value {existing.get('value')}; "
                f"cluster-autoscaler ignores pods below {PLACEHOLDER_PRIORITY}, so "
                f"placeholders would add no capacity: use value {PLACEHOLDER_PRIORITY}",
                field="placeholder.priority_class")

    def _deployment(self) -> dict[str, Any]:
        labels = {"app.kubernetes.io/name": "gpuops-placeholder", "gpuops.io/pool": self.pool,
                  PLACEHOLDER_LABEL: "true"}
        gpus = str(self.gpus_per_pod)
        return {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": labels},
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"gpuops.io/pool": self.pool,
                                             PLACEHOLDER_LABEL: "true"}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "priorityClassName": self.priority_class,
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": _selector_labels(self.node_selector),
                        "tolerations": self.tolerations,
                        "containers": [{
                            "name": "pause", "image": self.image,
                            "resources": {"requests": {GPU: gpus, "cpu": "10m",
                                                       "memory": "16Mi"},
                                          "limits": {GPU: gpus, "memory": "16Mi"}}}],
                    }}}}

    def details(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "gpus_per_pod": self.gpus_per_pod}
