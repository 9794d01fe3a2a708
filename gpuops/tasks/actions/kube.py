"""Cluster changes as safe actions (desired states with a postcondition), for `perform`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect.runtime import flow_run as runtime_flow_run

from gpuops.common.annotations import EVICTED_BY, EVICTED_BY_FLOW, EVICTED_BY_RUN, EVICTION_MARKS
from gpuops.common.errors import KubeNotFound, KubeTooManyRequests
from gpuops.common.events import k8s_resource
from gpuops.tasks.actions.perform import SafeAction
from gpuops.tasks.clients.kube import Kube


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
    same name (StatefulSet) is a different uid and does not count.

    The pod is first annotated with the flow run doing it (`gpuops.io/evicted-by`, its name
    and flow): the restart diagnosis then reports the pod's end as planned and names the run,
    instead of reading the pod's last crash as the cause. An eviction refused (a disruption
    budget) takes the annotation off again: the pod stays, and so must not the claim."""

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
            # `uid` in the patch: a same-named replacement is refused, not annotated.
            self.kube.patch_pod(self.namespace, self.name, {"metadata": {
                "uid": self.uid, "annotations": _eviction_marks()}})
            self.kube.evict_pod(self.namespace, self.name, uid=self.uid)
        except KubeNotFound:
            return  # already gone: the desired state holds
        except KubeTooManyRequests:
            self._unmark()
            raise

    def _unmark(self) -> None:
        try:
            self.kube.patch_pod(self.namespace, self.name, {"metadata": {
                "uid": self.uid, "annotations": dict.fromkeys(EVICTION_MARKS)}})
        except KubeNotFound:
            pass

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Pod", self.namespace, self.name)

    def details(self) -> dict[str, Any]:
        return {"uid": self.uid, "node": self.node}


def _eviction_marks() -> dict[str, str]:
    """What an eviction records on the pod: the flow run doing it (id, name, flow)."""
    marks = {EVICTED_BY: str(runtime_flow_run.id or "no-flow-run"),
             EVICTED_BY_RUN: str(runtime_flow_run.name or ""),
             EVICTED_BY_FLOW: str(runtime_flow_run.flow_name or "")}
    return {k: v for k, v in marks.items() if v}
