"""The LeaderWorkerSet controller (kubernetes-sigs/lws, `leaderworkerset.x-k8s.io/v1`): groups
of pods as the unit of replication, for models too large for one node.

`spec.replicas` groups of `spec.leaderWorkerTemplate.size` pods: a leader `<lws>-<group>` (from
`leaderTemplate`, else `workerTemplate`) and size-1 workers `<lws>-<group>-<index>` (from
`workerTemplate`), each asking its template's GPUs. The real controller makes a leader
StatefulSet and one worker StatefulSet per leader; simcluster makes the pods directly with the
same ownership shape (leaders controlled by the LeaderWorkerSet, workers by their leader, so
the garbage collector removes a group with its leader) and the same names, labels
(`leaderworkerset.sigs.k8s.io/name`, `group-index`, `worker-index`, `group-key`,
`template-revision-hash`), annotations (`size`, `leader-name`) and environment
(`LWS_LEADER_ADDRESS`, `LWS_GROUP_SIZE`, `LWS_WORKER_INDEX`).

- `startupPolicy`: LeaderCreated (default) makes the workers with the leader; LeaderReady
  once the leader is Ready.
- `restartPolicy` RecreateGroupOnPodRestart (default): a failed pod takes its whole group
  down and the group is made again; None replaces only that pod.
- `rolloutStrategy` RollingUpdate: a group whose revision is not the template's is recreated,
  from the highest group down, while fewer than `maxUnavailable` (default 1) groups are
  not ready.
- Status: `replicas` (groups that exist), `readyReplicas` (groups whose every pod is Running
  and Ready), `updatedReplicas` (groups of the current revision), `hpaPodSelector`, and the
  `Available` / `Progressing` conditions.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock, rfc3339
from ..core.ownership import OwnerIndex
from ..core.podstate import (
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
from .rollout import pod_template_hash

Obj = dict[str, Any]
GROUP = "leaderworkerset.x-k8s.io"
P = "leaderworkerset.sigs.k8s.io/"
NAME_LABEL = P + "name"
GROUP_INDEX = P + "group-index"
WORKER_INDEX = P + "worker-index"
GROUP_KEY = P + "group-key"
REVISION = P + "template-revision-hash"
SIZE = P + "size"
LEADER_NAME = P + "leader-name"


def group_size(lws: Obj) -> int:
    size = ((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size", 1)
    return size if isinstance(size, int) and size >= 1 else 1


def templates(lws: Obj) -> tuple[Obj, Obj]:
    """(leader template, worker template): the leader's is the worker's when not given."""
    lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    worker = lwt.get("workerTemplate") or {}
    return lwt.get("leaderTemplate") or worker, worker


def revision_of(lws: Obj) -> str:
    lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    return pod_template_hash({k: lwt.get(k) for k in ("leaderTemplate", "workerTemplate",
                                                      "size")})


def _group_key(namespace: str, leader: str) -> str:
    return hashlib.sha1(f"{namespace}/{leader}".encode()).hexdigest()


def _int_or_percent(value: Any, total: int, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return total * int(value[:-1]) // 100
    return default


class LeaderWorkerSetController(ControllerLoop[tuple[str, str]]):
    name = "leaderworkerset-controller"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 owners: OwnerIndex) -> None:
        super().__init__(store, clock)
        self.index = owners
        self.lws_type = store.type("leaderworkersets", GROUP)
        self.pod_type = store.type("pods")
        self.pod_control = PodControl(store, recorder, "lws-controller")
        for lws in store.list(self.lws_type):
            self._on_lws(self.lws_type, "ADDED", lws, None)
        store.add_listener(self._on_lws, self.lws_type)
        store.add_listener(self._on_pod, self.pod_type)

    def _on_lws(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        if event != "DELETED":
            self.enqueue((obj["metadata"]["namespace"], obj["metadata"]["name"]))

    def _on_pod(self, _rt: ResourceType, _event: str, obj: Obj, old: Obj | None) -> None:
        name = labels_of(obj).get(NAME_LABEL) or (labels_of(old).get(NAME_LABEL) if old else None)
        if name:
            self.enqueue((obj["metadata"]["namespace"], name))

    # --- the groups ----------------------------------------------------------------------------

    def _groups(self, lws: Obj) -> dict[int, tuple[Obj, dict[int, Obj]]]:
        """group index -> (leader, worker index -> worker)."""
        found: dict[int, tuple[Obj, dict[int, Obj]]] = {}
        for leader in self.index.controlled(lws["metadata"]["uid"], self.pod_type):
            text = labels_of(leader).get(GROUP_INDEX, "")
            if not text.isdigit():
                continue
            workers: dict[int, Obj] = {}
            for pod in self.index.controlled(leader["metadata"]["uid"], self.pod_type):
                w = labels_of(pod).get(WORKER_INDEX, "")
                if w.isdigit():
                    workers[int(w)] = pod
            found[int(text)] = (leader, workers)
        return found

    def _group_ready(self, lws: Obj, leader: Obj, workers: dict[int, Obj]) -> bool:
        pods = [leader, *(workers.get(i) for i in range(1, group_size(lws)))]
        return all(p is not None and phase(p) == "Running" and is_ready(p)
                   and not is_terminating(p) for p in pods)

    def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        lws = self.store.find(self.lws_type, namespace, name)
        if lws is None:
            return
        revision = revision_of(lws)
        if not is_terminating(lws):
            self._update(lws, revision)
        self._write_status(lws, revision)

    def _update(self, lws: Obj, revision: str) -> None:
        spec = lws.get("spec") or {}
        want = spec.get("replicas", 1)
        want = want if isinstance(want, int) and want >= 0 else 1
        size = group_size(lws)
        lwt = spec.get("leaderWorkerTemplate") or {}
        recreate = (lwt.get("restartPolicy") or "RecreateGroupOnPodRestart") != "None"
        leader_ready_first = spec.get("startupPolicy") == "LeaderReady"
        groups = self._groups(lws)
        for index in range(want):
            group = groups.get(index)
            if group is None:
                self._create_leader(lws, index, revision)
                continue
            leader, workers = group
            if is_terminating(leader):
                continue
            failed = [p for p in (leader, *workers.values())
                      if is_terminal(p) and not is_terminating(p)]
            if failed and (recreate or leader in failed):
                self._delete_group(lws, leader, workers)
                continue
            for pod in failed:
                self._delete(lws, pod)
            if leader_ready_first and not (phase(leader) == "Running" and is_ready(leader)):
                continue
            for w in range(1, size):
                if w not in workers or workers[w] in failed:
                    self._create_worker(lws, leader, index, w)
            for w, pod in workers.items():
                if w >= size and not is_terminating(pod):
                    self._delete(lws, pod)
        for index, (leader, workers) in groups.items():
            if index >= want and not is_terminating(leader):
                self._delete_group(lws, leader, workers)
        self._roll(lws, revision, want, groups)

    def _roll(self, lws: Obj, revision: str, want: int,
              groups: dict[int, tuple[Obj, dict[int, Obj]]]) -> None:
        strategy = (lws.get("spec") or {}).get("rolloutStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        config = strategy.get("rollingUpdateConfiguration") or {}
        max_unavailable = max(1, _int_or_percent(config.get("maxUnavailable"), want, 1))
        live = {i: g for i, g in groups.items() if i < want}
        unavailable = sum(1 for i in range(want) if i not in live
                          or not self._group_ready(lws, *live[i]))
        for index in sorted(live, reverse=True):
            leader, workers = live[index]
            if labels_of(leader).get(REVISION) == revision or is_terminating(leader):
                continue
            if unavailable >= max_unavailable and self._group_ready(lws, leader, workers):
                return
            if self._group_ready(lws, leader, workers):
                unavailable += 1
            self._delete_group(lws, leader, workers)

    def _pod(self, lws: Obj, template: Obj, owner: Obj, name: str, index: int, worker: int,
             revision: str, leader: str) -> Obj:
        pod = pod_from_template(template, owner, name=name)
        meta = pod["metadata"]
        lws_name = lws["metadata"]["name"]
        namespace = lws["metadata"]["namespace"]
        size = group_size(lws)
        meta["labels"].update({NAME_LABEL: lws_name, GROUP_INDEX: str(index),
                               WORKER_INDEX: str(worker), REVISION: revision,
                               GROUP_KEY: _group_key(namespace, leader)})
        meta.setdefault("annotations", {})[SIZE] = str(size)
        if worker:
            meta["annotations"][LEADER_NAME] = leader
        pod["spec"]["hostname"] = name
        pod["spec"]["subdomain"] = lws_name
        env = [{"name": "LWS_LEADER_ADDRESS", "value": f"{leader}.{lws_name}.{namespace}"},
               {"name": "LWS_GROUP_SIZE", "value": str(size)},
               {"name": "LWS_WORKER_INDEX", "value": str(worker)}]
        for container in pod["spec"].get("containers") or ():
            given = {e.get("name") for e in container.get("env") or ()}
            container["env"] = list(container.get("env") or ()) + [
                copy.deepcopy(e) for e in env if e["name"] not in given]
        return pod

    def _create_leader(self, lws: Obj, index: int, revision: str) -> None:
        name = f"{lws['metadata']['name']}-{index}"
        leader_template, _ = templates(lws)
        self._create(lws, self._pod(lws, leader_template, lws, name, index, 0, revision, name))

    def _create_worker(self, lws: Obj, leader: Obj, index: int, worker: int) -> None:
        leader_name = leader["metadata"]["name"]
        _, worker_template = templates(lws)
        revision = labels_of(leader).get(REVISION) or revision_of(lws)
        owner = {**leader, "apiVersion": "v1", "kind": "Pod"}
        self._create(lws, self._pod(lws, worker_template, owner, f"{leader_name}-{worker}",
                                    index, worker, revision, leader_name))

    def _create(self, lws: Obj, pod: Obj) -> None:
        try:
            self.pod_control.create(lws, pod)
        except errors.ApiError as e:
            if e.code != 409:
                raise

    def _delete(self, lws: Obj, pod: Obj) -> None:
        self.pod_control.delete(lws, pod)

    def _delete_group(self, lws: Obj, leader: Obj, workers: dict[int, Obj]) -> None:
        for pod in workers.values():
            if not is_terminating(pod):
                self._delete(lws, pod)
        self._delete(lws, leader)

    # --- status --------------------------------------------------------------------------------

    def _write_status(self, lws: Obj, revision: str) -> None:
        want = (lws.get("spec") or {}).get("replicas", 1)
        groups = self._groups(lws)
        live = {i: g for i, g in groups.items() if not is_terminating(g[0])}
        ready = sum(1 for g in live.values() if self._group_ready(lws, *g))
        updated = sum(1 for leader, _ in live.values()
                      if labels_of(leader).get(REVISION) == revision)
        name = lws["metadata"]["name"]
        old = lws.get("status") or {}
        available = ready >= want and updated >= want
        conditions = [
            self._condition(old, "Available", available,
                            "AllGroupsReady" if available else "GroupsNotReady",
                            "All replicas are ready" if available else
                            f"{ready} of {want} replicas are ready"),
            self._condition(old, "Progressing", not available,
                            "GroupsProgressing" if not available else "Ready",
                            "Replicas are progressing" if not available else
                            "All replicas are ready")]
        status: Obj = {"replicas": len(live), "readyReplicas": ready,
                       "updatedReplicas": updated,
                       "hpaPodSelector": f"{NAME_LABEL}={name},{WORKER_INDEX}=0",
                       "conditions": conditions}
        if status != old:
            self.store.mutate(self.lws_type, lws["metadata"]["namespace"], name,
                              lambda o: o.__setitem__("status", status), subresource="status")

    def _condition(self, old: Obj, ctype: str, ok: bool, reason: str, message: str) -> Obj:
        status = "True" if ok else "False"
        before = next((c for c in old.get("conditions") or () if c.get("type") == ctype), None)
        since = before["lastTransitionTime"] if before and before.get("status") == status \
            and before.get("lastTransitionTime") else rfc3339(self.clock.now())
        return {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": since}
