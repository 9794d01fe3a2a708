"""Cluster changes as safe actions (desired states with a postcondition), for `perform`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuops.common.errors import KubeNotFound
from gpuops.common.events import k8s_resource
from gpuops.tasks.actions import SafeAction
from gpuops.tasks.kube import Kube


@dataclass
class CordonNode(SafeAction):
    kube: Kube
    node: str
    kind = "cordon"

    @property
    def target(self) -> str:
        return f"node/{self.node}"

    def describe(self) -> str:
        return f"cordon node {self.node}"

    def holds(self) -> bool:
        return bool(self.kube.get_node(self.node).get("spec", {}).get("unschedulable"))

    def apply(self) -> None:
        self.kube.set_unschedulable(self.node, True)

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Node", None, self.node)


@dataclass
class UncordonNode(CordonNode):
    kind = "uncordon"

    def describe(self) -> str:
        return f"uncordon node {self.node}"

    def holds(self) -> bool:
        return not super().holds()

    def apply(self) -> None:
        self.kube.set_unschedulable(self.node, False)


@dataclass
class EvictPod(SafeAction):
    """Evict one pod instance (by uid) through the Eviction API, so PDBs are honoured.

    The desired state is "that instance is gone or terminating": a replacement pod with the
    same name (StatefulSet) is a different uid and does not count."""

    kube: Kube
    namespace: str
    name: str
    uid: str
    node: str = ""
    kind = "evict"

    @property
    def target(self) -> str:
        # Evictions lock the node they drain: one disruptive flow per node.
        return f"node/{self.node}" if self.node else f"pod/{self.namespace}/{self.name}"

    def describe(self) -> str:
        where = f" from node {self.node}" if self.node else ""
        return f"evict pod {self.namespace}/{self.name}{where}"

    def holds(self) -> bool:
        try:
            pod = self.kube.get_pod(self.namespace, self.name)
        except KubeNotFound:
            return True
        return pod["metadata"]["uid"] != self.uid or bool(
            pod["metadata"].get("deletionTimestamp"))

    def apply(self) -> None:
        try:
            self.kube.evict_pod(self.namespace, self.name, uid=self.uid)
        except KubeNotFound:
            return  # already gone: the desired state holds

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Pod", self.namespace, self.name)

    def details(self) -> dict[str, Any]:
        return {"uid": self.uid, "node": self.node}
