"""The StatefulSet controller: pods with stable names `<set>-<ordinal>`, made in order.

As kube's `stateful_set_control.go`: OrderedReady creates ordinal i only once 0..i-1 are
Running and Ready (and available for minReadySeconds), scales down from the highest ordinal
one at a time, replaces failed pods; Parallel does all at once. A RollingUpdate deletes, from
the highest ordinal down to `partition`, one pod whose `controller-revision-hash` is not the
update revision, and waits for its replacement to be healthy before the next. Pods get
`statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`, hostname and subdomain.
ControllerRevision objects are not written; revisions are `<set>-<hash of the template>`.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock
from ..core.ownership import OwnerIndex
from ..core.podstate import (
    available_at,
    controller_ref,
    is_ready,
    is_terminal,
    is_terminating,
    labels_of,
    phase,
)
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.store import Store
from ..core.workqueue import ControllerLoop
from .podcontrol import PodControl, pod_from_template
from .replicaset import compact_status
from .rollout import pod_template_hash

Obj = dict[str, Any]
REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


def ordinal_of(set_name: str, pod_name: str) -> int | None:
    m = re.fullmatch(re.escape(set_name) + r"-(\d+)", pod_name)
    return int(m.group(1)) if m else None


def update_revision_name(sts: Obj) -> str:
    collisions = (sts.get("status") or {}).get("collisionCount") or 0
    return f'{sts["metadata"]["name"]}-{pod_template_hash(sts["spec"].get("template") or {}, collisions)}'


class StatefulSetController(ControllerLoop[tuple[str, str]]):
    name = "statefulset-controller"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 owners: OwnerIndex) -> None:
        super().__init__(store, clock)
        self.index = owners
        self.sts_type = self.store.type("statefulsets", "apps")
        self.pod_type = self.store.type("pods")
        self.pod_control = PodControl(store, recorder, "statefulset-controller")
        self._templates: dict[str, dict[str, Obj]] = {}  # set uid -> revision -> template
        for sts in self.store.list(self.sts_type):
            self._on_statefulset(self.sts_type, "ADDED", sts, None)
        self.store.add_listener(self._on_statefulset, self.sts_type)
        self.store.add_listener(self._on_pod, self.pod_type)

    def _on_statefulset(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        if event == "DELETED":
            self._templates.pop(obj["metadata"]["uid"], None)
        else:
            self.enqueue((obj["metadata"]["namespace"], obj["metadata"]["name"]))

    def _on_pod(self, _rt: ResourceType, _event: str, obj: Obj, old: Obj | None) -> None:
        for ref in (controller_ref(obj), controller_ref(old)):
            if ref is not None and ref.kind == "StatefulSet":
                self.enqueue((obj["metadata"]["namespace"], ref.name))

    # --- sync ----------------------------------------------------------------------------------

    def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        sts = self.store.find(self.sts_type, namespace, name)
        if sts is None:
            return
        spec = sts["spec"]
        update_rev = update_revision_name(sts)
        known = self._templates.setdefault(sts["metadata"]["uid"], {})
        known[update_rev] = copy.deepcopy(spec.get("template") or {})
        current_rev = (sts.get("status") or {}).get("currentRevision") or update_rev
        now = self.clock.time()
        if not is_terminating(sts):
            self._update(sts, current_rev, update_rev, now)
        self._write_status(sts, current_rev, update_rev, now)

    def _pods_by_ordinal(self, sts: Obj) -> tuple[dict[int, Obj], int]:
        name = sts["metadata"]["name"]
        pods: dict[int, Obj] = {}
        for pod in self.index.controlled(sts["metadata"]["uid"], self.pod_type):
            ordinal = ordinal_of(name, pod["metadata"]["name"])
            if ordinal is not None:
                pods[ordinal] = pod
        start = ((sts["spec"].get("ordinals") or {}).get("start")) or 0
        return pods, start

    def _update(self, sts: Obj, current_rev: str, update_rev: str, now: float) -> None:
        spec = sts["spec"]
        want = spec.get("replicas", 1)
        monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        min_ready = spec.get("minReadySeconds", 0) or 0
        pods, start = self._pods_by_ordinal(sts)
        strategy = spec.get("updateStrategy") or {"type": "RollingUpdate"}
        partition = ((strategy.get("rollingUpdate") or {}).get("partition")) or 0
        key = (sts["metadata"]["namespace"], sts["metadata"]["name"])

        def healthy(pod: Obj) -> bool:
            at = available_at(pod, min_ready)
            if at is not None and at > now:
                self.enqueue_at(at, key)
            return (phase(pod) == "Running" and is_ready(pod) and at is not None and at <= now
                    and not is_terminating(pod))

        for ordinal in range(start, start + want):
            pod = pods.get(ordinal)
            if pod is not None and is_terminal(pod) and not is_terminating(pod):
                self._delete(sts, pod)  # a failed or finished member is replaced
                if monotonic:
                    return
                continue
            if pod is None:
                rev = update_rev
                if strategy.get("type", "RollingUpdate") == "RollingUpdate" and (
                        ordinal - start) < partition:
                    rev = current_rev
                self._create(sts, ordinal, rev, update_rev)
                if monotonic:
                    return
                continue
            if is_terminating(pod) and monotonic:
                return
            if monotonic and not healthy(pod):
                return
        condemned = sorted((o for o in pods if not start <= o < start + want), reverse=True)
        first_unhealthy = next((pods[o] for o in sorted(pods) if not healthy(pods[o])), None)
        for ordinal in condemned:
            pod = pods[ordinal]
            if is_terminating(pod):
                if monotonic:
                    return
                continue
            if monotonic and not healthy(pod) and pod is not first_unhealthy:
                return
            self._delete(sts, pod)
            if monotonic:
                return
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return  # OnDelete: pods pick up the new template only when someone deletes them
        for ordinal in range(start + want - 1, start + partition - 1, -1):
            pod = pods.get(ordinal)
            if pod is None:
                return
            if labels_of(pod).get(REVISION_LABEL) != update_rev and not is_terminating(pod):
                self._delete(sts, pod)
                return
            if not healthy(pod):
                return

    def _create(self, sts: Obj, ordinal: int, revision: str, update_rev: str) -> None:
        name = f'{sts["metadata"]["name"]}-{ordinal}'
        templates = self._templates.get(sts["metadata"]["uid"], {})
        template = templates.get(revision) or templates.get(update_rev) or {}
        if revision not in templates:
            revision = update_rev
        pod = pod_from_template(template, sts, name=name)
        labels = pod["metadata"]["labels"]
        labels[REVISION_LABEL] = revision
        labels[POD_NAME_LABEL] = name
        labels[POD_INDEX_LABEL] = str(ordinal)
        pod["spec"]["hostname"] = name
        if sts["spec"].get("serviceName"):
            pod["spec"]["subdomain"] = sts["spec"]["serviceName"]
        set_name = sts["metadata"]["name"]
        try:
            self.pod_control.create(
                sts, pod, created_message=f"create Pod {{name}} in StatefulSet {set_name} "
                "successful", failed_message=f"create Pod {name} in StatefulSet {set_name} "
                "failed error: {error}")
        except errors.ApiError as e:
            if e.code != 409:
                raise

    def _delete(self, sts: Obj, pod: Obj) -> None:
        self.pod_control.delete(sts, pod, deleted_message=(
            f"delete Pod {{name}} in StatefulSet {sts['metadata']['name']} successful"))

    # --- status --------------------------------------------------------------------------------

    def _write_status(self, sts: Obj, current_rev: str, update_rev: str, now: float) -> None:
        spec = sts["spec"]
        min_ready = spec.get("minReadySeconds", 0) or 0
        pods, _ = self._pods_by_ordinal(sts)
        counts = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0,
                  "currentReplicas": 0, "updatedReplicas": 0}
        for pod in pods.values():
            if phase(pod):
                counts["replicas"] += 1
            if phase(pod) == "Running" and is_ready(pod):
                counts["readyReplicas"] += 1
                at = available_at(pod, min_ready)
                if at is not None and at <= now:
                    counts["availableReplicas"] += 1
            if phase(pod) and not is_terminating(pod):
                revision = labels_of(pod).get(REVISION_LABEL)
                if revision == current_rev:
                    counts["currentReplicas"] += 1
                if revision == update_rev:
                    counts["updatedReplicas"] += 1
        old = sts.get("status") or {}
        status: Obj = {"observedGeneration": sts["metadata"].get("generation", 1), **counts,
                       "currentRevision": current_rev, "updateRevision": update_rev,
                       "collisionCount": old.get("collisionCount", 0)}
        strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
        if (strategy == "RollingUpdate" and status["updatedReplicas"] == status["replicas"]
                and status["readyReplicas"] == status["replicas"]):
            status["currentReplicas"] = status["updatedReplicas"]
            status["currentRevision"] = update_rev
        status = compact_status(status, keep=("replicas", "availableReplicas",
                                              "collisionCount"))
        if status != old:
            self.store.mutate(self.sts_type, sts["metadata"]["namespace"],
                              sts["metadata"]["name"], lambda o: o.__setitem__("status", status),
                              subresource="status")
