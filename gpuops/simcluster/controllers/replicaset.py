"""The ReplicaSet controller: keep `spec.replicas` pods of the template running, report status.

As kube's `replica_set.go`: claim the pods that match the selector (adopt orphans, release
pods whose labels no longer match), create missing pods from the template (at most 500 per
sync) or delete the surplus in `ActivePodsWithRanks` order, then write replicas /
fullyLabeledReplicas / readyReplicas / availableReplicas (minReadySeconds) / observedGeneration
and the `ReplicaFailure` condition when a create or delete was refused.
"""

from __future__ import annotations

import copy
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock, rfc3339
from ..core.ownership import OwnerIndex
from ..core.podstate import (
    available_at,
    controller_ref,
    is_active,
    is_ready,
    is_terminating,
    labels_of,
    new_controller_ref,
    without_owner,
)
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.selectors import Requirement, labels_match, selector_from_spec
from ..core.store import Store
from ..core.workqueue import ControllerLoop
from .podcontrol import PodControl, pod_from_template
from .podranking import rank_for_deletion

Obj = dict[str, Any]
BURST_REPLICAS = 500  # kube's --replicaset burst: most pods created or deleted in one sync


def compact_status(status: Obj, *, keep: tuple[str, ...] = ()) -> Obj:
    """Drop zero/empty fields the API omits (`omitempty`), keeping the required ones."""
    return {k: v for k, v in status.items() if k in keep or v not in (0, None, [], {})}


class SelectorsByNamespace:
    """The selectors of one kind's objects per namespace, to find who may adopt an orphan."""

    def __init__(self) -> None:
        self._by_ns: dict[str, dict[str, list[Requirement]]] = {}

    def update(self, obj: Obj, deleted: bool) -> bool:
        """Track `obj`'s selector; True when it is new or changed."""
        meta = obj["metadata"]
        bucket = self._by_ns.setdefault(meta.get("namespace", ""), {})
        if deleted:
            bucket.pop(meta["name"], None)
            return False
        reqs = selector_from_spec((obj.get("spec") or {}).get("selector"))
        changed = bucket.get(meta["name"]) != reqs
        bucket[meta["name"]] = reqs
        return changed

    def matching(self, namespace: str, labels: dict[str, str]) -> list[str]:
        return [name for name, reqs in self._by_ns.get(namespace, {}).items()
                if reqs and labels_match(reqs, labels)]


def claim(store: Store, index: OwnerIndex, owner: Obj, rt: ResourceType,
          selector: list[Requirement], *, adopt: bool = True) -> list[Obj]:
    """`ControllerRefManager.Claim`: the owner's objects of type `rt` after adopting matching
    orphans (when `adopt`: an orphan may match) and releasing owned objects whose labels
    stopped matching."""
    meta = owner["metadata"]
    uid, namespace = meta["uid"], meta["namespace"]
    deleting = is_terminating(owner)
    claimed = []
    for obj in index.controlled(uid, rt):
        if labels_match(selector, labels_of(obj)):
            claimed.append(obj)
        elif not deleting and not is_terminating(obj):
            store.mutate(rt, namespace, obj["metadata"]["name"],
                         lambda o: without_owner(o, uid))
    if deleting or not selector or not adopt:
        return claimed
    for obj in list(index.orphans(rt, namespace)):
        if is_terminating(obj) or not labels_match(selector, labels_of(obj)):
            continue
        ref = new_controller_ref(owner)

        def adopt_by(o: Obj, ref: Obj = ref) -> None:  # (a def: mypy types no lambda default)
            o["metadata"].setdefault("ownerReferences", []).append(ref)

        claimed.append(store.mutate(rt, namespace, obj["metadata"]["name"], adopt_by))
    return claimed


class ReplicaSetController(ControllerLoop[tuple[str, str]]):
    name = "replicaset-controller"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 owners: OwnerIndex) -> None:
        super().__init__(store, clock)
        self.index = owners
        self.rs_type = self.store.type("replicasets", "apps")
        self.pod_type = self.store.type("pods")
        self.pod_control = PodControl(store, recorder, "replicaset-controller")
        self._selectors = SelectorsByNamespace()
        self._may_adopt: set[tuple[str, str]] = set()  # an orphan pod may match these
        for rs in self.store.list(self.rs_type):
            self._on_replicaset(self.rs_type, "ADDED", rs, None)
        self.store.add_listener(self._on_replicaset, self.rs_type)
        self.store.add_listener(self._on_pod, self.pod_type)

    def _on_replicaset(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if self._selectors.update(obj, event == "DELETED"):
            self._may_adopt.add(key)
        if event != "DELETED":
            self.enqueue(key)

    def _on_pod(self, _rt: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        namespace = obj["metadata"]["namespace"]
        ref, old_ref = controller_ref(obj), controller_ref(old)
        for r in (ref, old_ref):
            if r is not None and r.kind == "ReplicaSet":
                self.enqueue((namespace, r.name))
        if ref is None and event != "DELETED" and (
                old is None or old_ref is not None or labels_of(old) != labels_of(obj)):
            for name in self._selectors.matching(namespace, labels_of(obj)):
                self._may_adopt.add((namespace, name))
                self.enqueue((namespace, name))

    # --- sync ----------------------------------------------------------------------------------

    def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        rs = self.store.find(self.rs_type, namespace, name)
        if rs is None:
            self._may_adopt.discard(key)
            return
        selector = selector_from_spec(rs["spec"].get("selector"))
        adopt = key in self._may_adopt
        self._may_adopt.discard(key)
        pods = claim(self.store, self.index, rs, self.pod_type, selector, adopt=adopt)
        active = [p for p in pods if is_active(p)]
        error: errors.ApiError | None = None
        if not is_terminating(rs):
            error = self._manage_replicas(rs, active)
        now = self.clock.time()
        status = self._status(rs, active, error, now)
        if status != rs.get("status"):
            rs = self.store.mutate(self.rs_type, namespace, name,
                                   lambda o: o.__setitem__("status", status),
                                   subresource="status")
        self._requeue_for_availability(rs, active, now)

    def _manage_replicas(self, rs: Obj, active: list[Obj]) -> errors.ApiError | None:
        want = rs["spec"].get("replicas", 1)
        diff = len(active) - want
        if diff < 0:
            template = rs["spec"].get("template") or {}
            for _ in range(min(-diff, BURST_REPLICAS)):
                try:
                    self.pod_control.create(rs, pod_from_template(template, rs))
                except errors.ApiError as e:
                    return e  # kube's slow start: stop at the first refusal
        elif diff > 0:
            related = self._related_pods(rs, active)
            victims = rank_for_deletion(active, related, now=self.clock.time())
            for pod in victims[:min(diff, BURST_REPLICAS)]:
                try:
                    self.pod_control.delete(rs, pod)
                except errors.ApiError as e:
                    return e
        return None

    def _related_pods(self, rs: Obj, active: list[Obj]) -> list[Obj]:
        """The pods of every ReplicaSet of the same Deployment (for the doubled-up rank)."""
        owner = controller_ref(rs)
        if owner is None:
            return active
        related: list[Obj] = []
        for sibling in self.index.controlled(owner.uid, self.rs_type):
            related.extend(self.index.controlled(sibling["metadata"]["uid"], self.pod_type))
        return related

    def _status(self, rs: Obj, active: list[Obj], error: errors.ApiError | None,
                now: float) -> Obj:
        spec = rs["spec"]
        min_ready = spec.get("minReadySeconds", 0) or 0
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        fully_labeled = ready = available = 0
        for pod in active:
            labels = labels_of(pod)
            if all(labels.get(k) == v for k, v in template_labels.items()):
                fully_labeled += 1
            if is_ready(pod):
                ready += 1
                at = available_at(pod, min_ready)
                if at is not None and at <= now:
                    available += 1
        old = rs.get("status") or {}
        conditions = [c for c in old.get("conditions") or () if c.get("type") != "ReplicaFailure"]
        failure = next((c for c in old.get("conditions") or ()
                        if c.get("type") == "ReplicaFailure"), None)
        if error is not None:
            if failure is None:
                diff = len(active) - spec.get("replicas", 1)
                failure = {"type": "ReplicaFailure", "status": "True",
                           "lastTransitionTime": rfc3339(now),
                           "reason": "FailedCreate" if diff < 0 else "FailedDelete",
                           "message": error.message}
            conditions.append(failure)
        status = {"replicas": len(active), "fullyLabeledReplicas": fully_labeled,
                  "readyReplicas": ready, "availableReplicas": available,
                  "observedGeneration": rs["metadata"].get("generation", 1),
                  "conditions": copy.deepcopy(conditions)}
        return compact_status(status, keep=("replicas",))

    def _requeue_for_availability(self, rs: Obj, active: list[Obj], now: float) -> None:
        """Wake when the next Ready pod has been Ready for minReadySeconds."""
        min_ready = rs["spec"].get("minReadySeconds", 0) or 0
        if not min_ready:
            return
        pending = [at for p in active if (at := available_at(p, min_ready)) is not None
                   and at > now]
        if pending:
            meta = rs["metadata"]
            self.enqueue_at(min(pending), (meta["namespace"], meta["name"]))
