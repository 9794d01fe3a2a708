"""Steering the scheduler as safe actions: taint a node, let a pod tolerate it, nominate a pod.

These are how a flow makes kube-scheduler put pods where a plan says without binding them
itself (a rebalance, flows/gpu_rebalance.py): a temporary `NoSchedule` taint keeps other pods
(and evicted pods' replacements) off the nodes the plan frees; the pods meant for those
nodes get the matching toleration (Kubernetes lets a pod's tolerations be added to, never
removed or changed) and `status.nominatedNodeName` (KEP-5278 opens it to components other
than the scheduler: the scheduler tries the nominated node first and holds its room
against pods of equal or lower priority).

Every change is temporary, so each records on the object who made it (`record`: the
annotations to set, e.g. the flow run's id and an expiry) in the same write, and the undo
actions remove both. A crashed run thus leaves objects that say what to undo.

The tolerations cannot be undone (the API refuses); they are harmless once the taint is
gone, because each tolerates only its own run's taint value (`Equal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuops.common.errors import KubeNotFound
from gpuops.common.events import k8s_resource
from gpuops.tasks.actions.perform import SafeAction
from gpuops.tasks.clients.kube import Kube

Obj = dict[str, Any]


def _has_annotations(obj: Obj, record: Mapping[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("annotations") or {}
    return all(have.get(k) == v for k, v in record.items())


def _lacks_annotations(obj: Obj, keys: tuple[str, ...]) -> bool:
    have = (obj.get("metadata") or {}).get("annotations") or {}
    return not any(k in have for k in keys)


@dataclass
class TaintNode(SafeAction):
    """Node `node` has the taint `key=value:effect` and the `record` annotations."""

    kube: Kube
    node: str
    key: str
    value: str
    effect: str = "NoSchedule"
    record: Mapping[str, str] = field(default_factory=dict)
    kind = "taint"

    @property
    def target(self) -> str:
        return f"node/{self.node}"

    def describe(self) -> str:
        return f"taint node {self.node} {self.key}={self.value}:{self.effect}"

    def _ours(self, taint: Obj) -> bool:
        return taint.get("key") == self.key and taint.get("effect", "NoSchedule") == self.effect

    def holds(self) -> bool:
        node = self.kube.get_node(self.node)
        return any(self._ours(t) and (t.get("value") or "") == self.value
                   for t in (node.get("spec") or {}).get("taints") or []) and \
            _has_annotations(node, self.record)

    def apply(self) -> None:
        node = self.kube.get_node(self.node)
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if not self._ours(t)]
        taints.append({"key": self.key, "value": self.value, "effect": self.effect})
        # resourceVersion: a concurrent taint change is a 409, retried on a fresh read.
        self.kube.merge_patch_node(self.node, {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "annotations": dict(self.record)},
            "spec": {"taints": taints}})

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Node", None, self.node)


@dataclass
class UntaintNode(SafeAction):
    """Node `node` has no taint `key=value` and none of the `record_keys` annotations (a
    taint of the same key with another value, another run's, is left alone). A node that
    is gone holds no taint."""

    kube: Kube
    node: str
    key: str
    value: str
    record_keys: tuple[str, ...] = ()
    kind = "untaint"

    @property
    def target(self) -> str:
        return f"node/{self.node}"

    def describe(self) -> str:
        return f"remove taint {self.key}={self.value} from node {self.node}"

    def _ours(self, taint: Obj) -> bool:
        return taint.get("key") == self.key and (taint.get("value") or "") == self.value

    def holds(self) -> bool:
        try:
            node = self.kube.get_node(self.node)
        except KubeNotFound:
            return True
        return not any(self._ours(t) for t in (node.get("spec") or {}).get("taints") or []) \
            and _lacks_annotations(node, self.record_keys)

    def apply(self) -> None:
        try:
            node = self.kube.get_node(self.node)
        except KubeNotFound:
            return
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if not self._ours(t)]
        self.kube.merge_patch_node(self.node, {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                         "annotations": dict.fromkeys(self.record_keys)},
            "spec": {"taints": taints}})

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Node", None, self.node)


@dataclass
class _PodAction(SafeAction):
    kube: Kube
    namespace: str
    name: str
    uid: str
    node: str  # the node the change is about: its slot is the lock

    @property
    def target(self) -> str:
        return f"node/{self.node}"

    def _pod(self) -> Obj:
        """The pod instance (by uid); KubeNotFound when it is gone or replaced."""
        pod = self.kube.get_pod(self.namespace, self.name)
        if pod["metadata"].get("uid") != self.uid:
            raise KubeNotFound(f"pod {self.namespace}/{self.name} (uid {self.uid}) is gone; "
                               "a pod of that name is another instance", status=404)
        return pod

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Pod", self.namespace, self.name)

    def details(self) -> dict[str, Any]:
        return {"uid": self.uid, "node": self.node}


@dataclass
class AddToleration(_PodAction):
    """Pod instance `uid` tolerates `toleration` and has the `record` annotations. A pod
    that is gone makes the action fail (KubeNotFound): it cannot hold."""

    toleration: Mapping[str, str] = field(default_factory=dict)
    record: Mapping[str, str] = field(default_factory=dict)
    kind = "tolerate"

    def describe(self) -> str:
        t = self.toleration
        return (f"let pod {self.namespace}/{self.name} tolerate {t.get('key')}="
                f"{t.get('value', '')}:{t.get('effect', '')}")

    def _has(self, pod: Obj) -> bool:
        return any(all(t.get(k) == v for k, v in self.toleration.items())
                   for t in (pod.get("spec") or {}).get("tolerations") or [])

    def holds(self) -> bool:
        pod = self._pod()
        return self._has(pod) and _has_annotations(pod, self.record)

    def apply(self) -> None:
        pod = self._pod()
        patch: Obj = {"metadata": {"uid": self.uid, "annotations": dict(self.record)}}
        if not self._has(pod):
            # The whole list (tolerations merge as a list): the existing ones unchanged,
            # ours added, which is the only change the API allows.
            patch["metadata"]["resourceVersion"] = pod["metadata"]["resourceVersion"]
            patch["spec"] = {"tolerations": [*((pod.get("spec") or {}).get("tolerations")
                                                or []), dict(self.toleration)]}
        self.kube.patch_pod(self.namespace, self.name, patch)


@dataclass
class NominatePod(_PodAction):
    """Pending pod instance `uid` is nominated to `node` (`status.nominatedNodeName`), or
    already bound there; the `record` annotations are set first."""

    record: Mapping[str, str] = field(default_factory=dict)
    kind = "nominate"

    def describe(self) -> str:
        return f"nominate pod {self.namespace}/{self.name} to node {self.node}"

    def holds(self) -> bool:
        pod = self._pod()
        if (pod.get("spec") or {}).get("nodeName") == self.node:
            return True
        return (pod.get("status") or {}).get("nominatedNodeName") == self.node and \
            _has_annotations(pod, self.record)

    def apply(self) -> None:
        self._pod()
        self.kube.patch_pod(self.namespace, self.name, {"metadata": {
            "uid": self.uid, "annotations": dict(self.record)}})
        self.kube.patch_pod_status(self.namespace, self.name,
                                   {"status": {"nominatedNodeName": self.node}})


@dataclass
class ClearNomination(_PodAction):
    """Pod instance `uid` is not (or no longer) nominated to `node` by us and carries none
    of the `record_keys` annotations. A pod that is gone holds nothing; a nomination to
    another node (the scheduler's own, after a preemption) is left alone."""

    record_keys: tuple[str, ...] = ()
    kind = "clear-nomination"

    def describe(self) -> str:
        return f"clear the nomination of pod {self.namespace}/{self.name} to node {self.node}"

    def _current(self) -> Obj | None:
        try:
            return self._pod()
        except KubeNotFound:
            return None

    def holds(self) -> bool:
        pod = self._current()
        if pod is None:
            return True
        return (pod.get("status") or {}).get("nominatedNodeName") != self.node and \
            _lacks_annotations(pod, self.record_keys)

    def apply(self) -> None:
        pod = self._current()
        if pod is None:
            return
        if (pod.get("status") or {}).get("nominatedNodeName") == self.node and \
                not (pod.get("spec") or {}).get("nodeName"):
            self.kube.patch_pod_status(self.namespace, self.name,
                                       {"status": {"nominatedNodeName": None}})
        if not _lacks_annotations(pod, self.record_keys):
            self.kube.patch_pod(self.namespace, self.name, {"metadata": {
                "uid": self.uid, "annotations": dict.fromkeys(self.record_keys)}})
