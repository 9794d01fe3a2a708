"""The Deployment controller: one ReplicaSet per pod template, rolled by strategy.

As kube's `pkg/controller/deployment`: claim ReplicaSets by selector; the new one is named
`<deployment>-<pod-template-hash>` with the hash label on its template and selector; a
RollingUpdate grows it within maxSurge and shrinks the old ones within maxUnavailable (both
read from ReplicaSet status, which `replicaset.py` keeps), Recreate scales the old ones to
zero and waits for their pods to go first; a size change mid-rollout scales proportionally;
`paused` only scales; old ReplicaSets beyond revisionHistoryLimit are deleted; status carries
the Available and Progressing conditions (ProgressDeadlineExceeded after
progressDeadlineSeconds without progress). The arithmetic lives in `rollout.py`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock
from ..core.ownership import OwnerIndex
from ..core.podstate import controller_ref, is_terminating, labels_of, new_controller_ref, phase
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.selectors import selector_from_spec
from ..core.store import Store
from ..core.workqueue import ControllerLoop
from .replicaset import SelectorsByNamespace, claim, compact_status
from .rollout import (
    DESIRED_REPLICAS,
    FAILED_RS_CREATE,
    FOUND_NEW_RS,
    HASH_LABEL,
    NEW_RS_CREATED,
    PAUSED,
    RESUMED,
    REVISION,
    TIMED_OUT,
    active,
    annotation_int,
    by_creation,
    calculate_status,
    copy_deployment_annotations,
    deployment_complete,
    equal_ignore_hash,
    find_active_or_latest,
    get_condition,
    has_progress_deadline,
    is_rolling,
    is_saturated,
    max_unavailable,
    new_condition,
    new_rs_new_replicas,
    pod_template_hash,
    progress_deadline_at,
    proportional_sizes,
    replicas,
    replicas_annotations,
    revision,
    rollout_status,
    set_condition,
    spec_total,
    status_of,
    status_total,
)

Obj = dict[str, Any]
COMPONENT = "deployment-controller"


class DeploymentController(ControllerLoop[tuple[str, str]]):
    name = COMPONENT

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 owners: OwnerIndex) -> None:
        super().__init__(store, clock)
        self.recorder = recorder
        self.index = owners
        self.d_type = self.store.type("deployments", "apps")
        self.rs_type = self.store.type("replicasets", "apps")
        self.pod_type = self.store.type("pods")
        self._selectors = SelectorsByNamespace()
        for d in self.store.list(self.d_type):
            self._on_deployment(self.d_type, "ADDED", d, None)
        self.store.add_listener(self._on_deployment, self.d_type)
        self.store.add_listener(self._on_replicaset, self.rs_type)
        self.store.add_listener(self._on_pod, self.pod_type)

    def _on_deployment(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        self._selectors.update(obj, event == "DELETED")
        if event != "DELETED":
            self.enqueue((obj["metadata"]["namespace"], obj["metadata"]["name"]))

    def _on_replicaset(self, _rt: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        namespace = obj["metadata"]["namespace"]
        ref, old_ref = controller_ref(obj), controller_ref(old)
        for r in (ref, old_ref):
            if r is not None and r.kind == "Deployment":
                self.enqueue((namespace, r.name))
        if ref is None and event != "DELETED":
            for name in self._selectors.matching(namespace, labels_of(obj)):
                self.enqueue((namespace, name))

    def _on_pod(self, _rt: ResourceType, event: str, pod: Obj, _old: Obj | None) -> None:
        """Recreate waits for the old pods to be gone: wake it when the last one goes."""
        if event != "DELETED":
            return
        ref = controller_ref(pod)
        if ref is None or ref.kind != "ReplicaSet":
            return
        namespace = pod["metadata"]["namespace"]
        rs = self.store.find(self.rs_type, namespace, ref.name)
        owner = controller_ref(rs)
        if owner is None or owner.kind != "Deployment":
            return
        d = self.store.find(self.d_type, namespace, owner.name)
        if d is not None and not is_rolling(d):
            self.enqueue((namespace, owner.name))

    # --- sync ----------------------------------------------------------------------------------

    def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        stored = self.store.find(self.d_type, namespace, name)
        if stored is None:
            return
        d = copy.deepcopy(stored)
        selector = d["spec"].get("selector")
        if not selector or not any(selector.values()):
            self._event(d, "SelectingAll", "This deployment is selecting all pods. A non-empty "
                        "selector is required.", "Warning")
            status = dict(d.get("status") or {})
            if status.get("observedGeneration", 0) < d["metadata"].get("generation", 1):
                status["observedGeneration"] = d["metadata"].get("generation", 1)
                self._write_status(d, status)
            return
        rss = claim(self.store, self.index, d, self.rs_type, selector_from_spec(selector))
        if is_terminating(d):
            self._sync_status_only(d, rss)
            return
        self._check_paused_conditions(d)
        if d["spec"].get("paused") or self._is_scaling_event(d, rss):
            self._sync_scale(d, rss)
        elif is_rolling(d):
            self._rollout_rolling(d, rss)
        else:
            self._rollout_recreate(d, rss)

    # --- new and old ReplicaSets ---------------------------------------------------------------

    def _split(self, d: Obj, rss: list[Obj]) -> tuple[Obj | None, list[Obj]]:
        template = d["spec"].get("template") or {}
        new_rs = next((rs for rs in by_creation(rss)
                       if equal_ignore_hash(rs["spec"].get("template") or {}, template)), None)
        return new_rs, [rs for rs in rss if rs is not new_rs]

    def _all_rss_and_sync_revision(self, d: Obj, rss: list[Obj], create: bool
                                   ) -> tuple[Obj | None, list[Obj]]:
        new_rs, old_rss = self._split(d, rss)
        new_revision = str(max((revision(rs) for rs in old_rss), default=0) + 1)
        if new_rs is not None:
            return self._sync_existing_new_rs(d, new_rs, new_revision), old_rss
        if not create:
            return None, old_rss
        return self._create_new_rs(d, old_rss, new_revision), old_rss

    def _sync_existing_new_rs(self, d: Obj, new_rs: Obj, new_revision: str) -> Obj:
        annotations = dict(new_rs["metadata"].get("annotations") or {})
        changed = copy_deployment_annotations(d, annotations)
        if revision(new_rs) < int(new_revision):
            annotations[REVISION] = new_revision
            changed = True
        min_ready = d["spec"].get("minReadySeconds", 0)
        if changed or new_rs["spec"].get("minReadySeconds", 0) != min_ready:
            def update(rs: Obj) -> None:
                rs["metadata"]["annotations"] = annotations
                rs["spec"]["minReadySeconds"] = min_ready
            return self.store.mutate(self.rs_type, d["metadata"]["namespace"],
                                     new_rs["metadata"]["name"], update)
        rs_revision = (new_rs["metadata"].get("annotations") or {}).get(REVISION)
        status = copy.deepcopy(d.get("status") or {})
        needs_status = False
        if has_progress_deadline(d) and get_condition(status, "Progressing") is None:
            set_condition(status, new_condition(
                "Progressing", "True", FOUND_NEW_RS,
                f'Found new replica set "{new_rs["metadata"]["name"]}"', self.clock.time()))
            needs_status = True
        self._set_revision(d, rs_revision)
        if needs_status:
            self._write_status(d, status)
        return new_rs

    def _create_new_rs(self, d: Obj, old_rss: list[Obj], new_revision: str) -> Obj | None:
        namespace = d["metadata"]["namespace"]
        status = copy.deepcopy(d.get("status") or {})
        template = copy.deepcopy(d["spec"].get("template") or {})
        template_hash = pod_template_hash(template, status.get("collisionCount"))
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = template_hash
        selector = copy.deepcopy(d["spec"]["selector"])
        selector.setdefault("matchLabels", {})[HASH_LABEL] = template_hash
        rs_name = f'{d["metadata"]["name"]}-{template_hash}'
        new_rs: Obj = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "namespace": namespace,
                         "labels": dict(template["metadata"]["labels"]),
                         "ownerReferences": [new_controller_ref(d)], "annotations": {}},
            "spec": {"replicas": 0, "minReadySeconds": d["spec"].get("minReadySeconds", 0),
                     "selector": selector, "template": template},
        }
        size = new_rs_new_replicas(d, old_rss + [new_rs], new_rs)
        new_rs["spec"]["replicas"] = size
        annotations = new_rs["metadata"]["annotations"]
        copy_deployment_annotations(d, annotations)
        annotations[REVISION] = new_revision
        annotations.update(replicas_annotations(d))
        now = self.clock.time()
        try:
            created = self.store.create(self.rs_type, new_rs, namespace)
        except errors.ApiError as e:
            if e.code == 409 and e.reason == "AlreadyExists":
                existing = self.store.find(self.rs_type, namespace, rs_name)
                ref = controller_ref(existing)
                if existing is not None and ref is not None and ref.uid == d["metadata"][
                        "uid"] and equal_ignore_hash(existing["spec"]["template"],
                                                     d["spec"]["template"]):
                    return existing
                status["collisionCount"] = status.get("collisionCount", 0) + 1
                self._write_status(d, status)
                return None
            message = f'Failed to create new replica set "{rs_name}": {e.message}'
            if has_progress_deadline(d):
                set_condition(status, new_condition("Progressing", "False", FAILED_RS_CREATE,
                                                    message, now))
                self._write_status(d, status)
            self._event(d, FAILED_RS_CREATE, message, "Warning")
            return None
        if size > 0:
            self._event(d, "ScalingReplicaSet",
                        f"Scaled up replica set {rs_name} from 0 to {size}")
        self._set_revision(d, new_revision)
        if has_progress_deadline(d):
            set_condition(status, new_condition("Progressing", "True", NEW_RS_CREATED,
                                                f'Created new replica set "{rs_name}"', now))
            self._write_status(d, status)
        return created

    def _set_revision(self, d: Obj, rev: str | None) -> None:
        if rev is None or (d["metadata"].get("annotations") or {}).get(REVISION) == rev:
            return
        d["metadata"].setdefault("annotations", {})[REVISION] = rev
        fresh = self.store.mutate(self.d_type, d["metadata"]["namespace"], d["metadata"]["name"],
                                  lambda o: o["metadata"].setdefault("annotations", {}).update(
                                      {REVISION: rev}))
        d["metadata"]["resourceVersion"] = fresh["metadata"]["resourceVersion"]

    # --- scaling -------------------------------------------------------------------------------

    def _scale_rs(self, d: Obj, rs: Obj, size: int) -> tuple[bool, Obj]:
        """`scaleReplicaSetAndRecordEvent`: set the size and the replicas annotations."""
        wanted = replicas_annotations(d)
        current = rs["metadata"].get("annotations") or {}
        size_changed = replicas(rs) != size
        if not size_changed and all(current.get(k) == v for k, v in wanted.items()):
            return False, rs
        old_size = replicas(rs)

        def update(o: Obj) -> None:
            o["spec"]["replicas"] = size
            o["metadata"].setdefault("annotations", {}).update(wanted)

        rs = self.store.mutate(self.rs_type, rs["metadata"]["namespace"], rs["metadata"]["name"],
                               update)
        if size_changed:
            direction = "up" if old_size < size else "down"
            self._event(d, "ScalingReplicaSet", f"Scaled {direction} replica set "
                        f"{rs['metadata']['name']} from {old_size} to {size}")
        return size_changed, rs

    def _is_scaling_event(self, d: Obj, rss: list[Obj]) -> bool:
        new_rs, old_rss = self._all_rss_and_sync_revision(d, rss, create=False)
        for rs in active(old_rss + [new_rs]):
            desired = annotation_int(rs, DESIRED_REPLICAS)
            if desired is not None and desired != replicas(d):
                return True
        return False

    def _scale(self, d: Obj, new_rs: Obj | None, old_rss: list[Obj]) -> None:
        only = find_active_or_latest(new_rs, old_rss)
        if only is not None:
            if replicas(only) != replicas(d):
                self._scale_rs(d, only, replicas(d))
            return
        if is_saturated(d, new_rs):
            for rs in active(old_rss):
                self._scale_rs(d, rs, 0)
            return
        if is_rolling(d):
            live = active(old_rss + [new_rs])
            sizes, _ = proportional_sizes(d, live)
            for rs in live:
                self._scale_rs(d, rs, sizes[rs["metadata"]["name"]])

    def _sync_scale(self, d: Obj, rss: list[Obj]) -> None:
        """`sync`: scale for a paused Deployment or a size change, no rollout."""
        new_rs, old_rss = self._all_rss_and_sync_revision(d, rss, create=False)
        self._scale(d, new_rs, old_rss)
        new_rs, old_rss = self._fresh(new_rs), self._fresh_all(old_rss)
        if d["spec"].get("paused"):
            self._cleanup(d, old_rss)
        self._sync_status(d, old_rss + [new_rs], new_rs)

    # --- strategies ----------------------------------------------------------------------------

    def _rollout_rolling(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, old_rss = self._all_rss_and_sync_revision(d, rss, create=True)
        if new_rs is None:
            return  # creation failed or collided; the status says why and a retry follows
        if self._reconcile_new_rs(d, old_rss + [new_rs], new_rs) or self._reconcile_old_rss(
                d, old_rss, new_rs):
            self._sync_rollout_status(d, self._fresh_all(old_rss), self._fresh(new_rs))
            return
        if deployment_complete(d, d.get("status") or {}):
            self._cleanup(d, old_rss)
        self._sync_rollout_status(d, self._fresh_all(old_rss), self._fresh(new_rs))

    def _reconcile_new_rs(self, d: Obj, all_rss: list[Obj], new_rs: Obj) -> bool:
        if replicas(new_rs) == replicas(d):
            return False
        if replicas(new_rs) > replicas(d):
            return self._scale_rs(d, new_rs, replicas(d))[0]
        return self._scale_rs(d, new_rs, new_rs_new_replicas(d, all_rss, new_rs))[0]

    def _reconcile_old_rss(self, d: Obj, old_rss: list[Obj], new_rs: Obj) -> bool:
        if spec_total(old_rss) == 0:
            return False
        all_count = spec_total(old_rss + [new_rs])
        min_available = replicas(d) - max_unavailable(d)
        new_unavailable = replicas(new_rs) - status_of(new_rs, "availableReplicas")
        max_scaled_down = all_count - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        cleaned = 0
        for rs in by_creation(active(old_rss)):  # unhealthy replicas go first
            if cleaned >= max_scaled_down:
                break
            unavailable = replicas(rs) - status_of(rs, "availableReplicas")
            if unavailable <= 0:
                continue
            down = min(max_scaled_down - cleaned, unavailable)
            self._scale_rs(d, rs, replicas(rs) - down)
            cleaned += down
        old_rss = self._fresh_all(old_rss)
        available = status_total(old_rss + [new_rs], "availableReplicas")
        scaled = 0
        if available > min_available:
            budget = available - min_available
            for rs in by_creation(old_rss):
                if scaled >= budget:
                    break
                if replicas(rs) == 0:
                    continue
                down = min(replicas(rs), budget - scaled)
                self._scale_rs(d, rs, replicas(rs) - down)
                scaled += down
        return cleaned + scaled > 0

    def _rollout_recreate(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, old_rss = self._all_rss_and_sync_revision(d, rss, create=False)
        scaled_down = False
        for rs in active(old_rss):
            scaled_down |= self._scale_rs(d, rs, 0)[0]
        if scaled_down or self._old_pods_running(new_rs, old_rss):
            self._sync_rollout_status(d, self._fresh_all(old_rss), self._fresh(new_rs))
            return
        if new_rs is None:
            new_rs, old_rss = self._all_rss_and_sync_revision(d, self._fresh_all(rss),
                                                              create=True)
            if new_rs is None:
                return
        if replicas(new_rs) != replicas(d):
            self._scale_rs(d, new_rs, replicas(d))
            self._sync_rollout_status(d, self._fresh_all(old_rss), self._fresh(new_rs))
            return
        if deployment_complete(d, d.get("status") or {}):
            self._cleanup(d, old_rss)
        self._sync_rollout_status(d, self._fresh_all(old_rss), self._fresh(new_rs))

    def _old_pods_running(self, new_rs: Obj | None, old_rss: list[Obj]) -> bool:
        if status_total(old_rss, "replicas") > 0:
            return True
        for rs in old_rss:
            for pod in self.index.controlled(rs["metadata"]["uid"], self.pod_type):
                if phase(pod) not in ("Failed", "Succeeded"):
                    return True
        return False

    def _cleanup(self, d: Obj, old_rss: list[Obj]) -> None:
        """Delete the oldest revisions beyond revisionHistoryLimit (only empty ones)."""
        limit = d["spec"].get("revisionHistoryLimit", 10)
        if limit is None:
            return
        alive = [rs for rs in old_rss if rs is not None and not is_terminating(rs)]
        excess = len(alive) - limit
        if excess <= 0:
            return
        for rs in sorted(alive, key=lambda r: (revision(r), r["metadata"]["name"]))[:excess]:
            if (status_of(rs, "replicas") != 0 or replicas(rs) != 0
                    or rs["metadata"].get("generation", 1) > status_of(rs, "observedGeneration")):
                continue
            self.store.delete(self.rs_type, rs["metadata"]["namespace"], rs["metadata"]["name"],
                              uid=rs["metadata"]["uid"])

    # --- status --------------------------------------------------------------------------------

    def _check_paused_conditions(self, d: Obj) -> None:
        """Record DeploymentPaused / DeploymentResumed in the Progressing condition."""
        if not has_progress_deadline(d):
            return
        status = copy.deepcopy(d.get("status") or {})
        cond = get_condition(status, "Progressing")
        if cond is not None and cond.get("reason") == TIMED_OUT:
            return
        paused_recorded = cond is not None and cond.get("reason") == PAUSED
        now = self.clock.time()
        if d["spec"].get("paused") and not paused_recorded:
            set_condition(status, new_condition("Progressing", "Unknown", PAUSED,
                                                "Deployment is paused", now))
        elif not d["spec"].get("paused") and paused_recorded:
            set_condition(status, new_condition("Progressing", "Unknown", RESUMED,
                                                "Deployment is resumed", now))
        else:
            return
        self._write_status(d, status)

    def _sync_status_only(self, d: Obj, rss: list[Obj]) -> None:
        new_rs, old_rss = self._all_rss_and_sync_revision(d, rss, create=False)
        self._sync_status(d, old_rss + [new_rs], new_rs)

    def _sync_status(self, d: Obj, all_rss: Sequence[Obj | None], new_rs: Obj | None) -> None:
        status = calculate_status(d, all_rss, new_rs, self.clock.time())
        self._write_status(d, status)

    def _sync_rollout_status(self, d: Obj, old_rss: list[Obj], new_rs: Obj | None) -> None:
        now = self.clock.time()
        status = rollout_status(d, old_rss + [new_rs], new_rs, now)
        self._write_status(d, status)
        at = progress_deadline_at(d, status)
        if at is not None and not deployment_complete(d, status):
            self.enqueue_at(at + 1, (d["metadata"]["namespace"], d["metadata"]["name"]))

    def _write_status(self, d: Obj, status: Obj) -> None:
        status = compact_status(status)
        if status == compact_status(d.get("status") or {}):
            return
        fresh = self.store.mutate(self.d_type, d["metadata"]["namespace"], d["metadata"]["name"],
                                  lambda o: o.__setitem__("status", copy.deepcopy(status)),
                                  subresource="status")
        d["status"] = copy.deepcopy(fresh.get("status") or {})
        d["metadata"]["resourceVersion"] = fresh["metadata"]["resourceVersion"]

    # --- helpers -------------------------------------------------------------------------------

    def _fresh(self, rs: Obj | None) -> Obj | None:
        if rs is None:
            return None
        current = self.store.find(self.rs_type, rs["metadata"]["namespace"],
                                  rs["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != rs["metadata"]["uid"]:
            return None
        return current

    def _fresh_all(self, rss: list[Obj]) -> list[Obj]:
        return [fresh for rs in rss if (fresh := self._fresh(rs)) is not None]

    def _event(self, d: Obj, reason: str, message: str, type: str = "Normal") -> None:
        self.recorder.record(d, reason, message, type=type, component=COMPONENT)
