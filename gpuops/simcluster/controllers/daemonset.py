"""The DaemonSet controller: one pod of the template on every node that should run it.

As kube's `pkg/controller/daemon` since DaemonSet pods go through the default scheduler:
- a node should run the pod when the template selects it (nodeSelector, required node
  affinity) and tolerates its NoSchedule and NoExecute taints; a pod already there keeps
  running unless a NoExecute taint is not tolerated or the node stops matching
  (`NodeShouldRunDaemonPod`);
- each pod is created unbound, its required node affinity replaced by one term
  `matchFields metadata.name In [node]`, so the scheduler places it on that node and nowhere
  else, with the tolerations the controller adds to every daemon pod: not-ready and
  unreachable NoExecute (no tolerationSeconds: never evicted for a node problem),
  disk/memory/pid-pressure and unschedulable NoSchedule (a cordoned node keeps and gets its
  daemon pods), network-unavailable NoSchedule for hostNetwork pods;
- a deleted pod is created again, a failed one deleted and replaced, surplus pods on a node
  deleted (the oldest stays), pods on nodes that stopped matching deleted, unscheduled pods
  of a node that is gone deleted (scheduled ones go with their node);
- RollingUpdate replaces pods of an old template (label `controller-revision-hash`) while at
  most maxUnavailable pods are unavailable, old unavailable pods first; OnDelete waits;
- status: desiredNumberScheduled, currentNumberScheduled, numberMisscheduled, numberReady,
  numberAvailable (minReadySeconds), numberUnavailable, updatedNumberScheduled,
  observedGeneration.
A drain through the Eviction API is the client's to skip for these pods (kubectl drain
`--ignore-daemonsets`); nothing here stops it.
"""

from __future__ import annotations

import copy
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock
from ..core.intstr import scaled_value
from ..core.nodeaffinity import selects_node, untolerated_taints
from ..core.ownership import OwnerIndex
from ..core.podstate import (
    available_at,
    controller_ref,
    creation_time,
    is_active,
    is_ready,
    is_terminal,
    is_terminating,
)
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.selectors import selector_from_spec
from ..core.store import Store
from ..core.workqueue import ControllerLoop
from .podcontrol import PodControl, pod_from_template
from .replicaset import claim, compact_status
from .rollout import pod_template_hash

Obj = dict[str, Any]
COMPONENT = "daemonset-controller"
REVISION_HASH_LABEL = "controller-revision-hash"
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
BURST_PODS = 500  # creates or deletes in one sync, as the controller's slow-start batches

DAEMON_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION = {"key": "node.kubernetes.io/network-unavailable",
                           "operator": "Exists", "effect": "NoSchedule"}


def with_daemon_tolerations(spec: Obj) -> None:
    """`AddOrUpdateDaemonPodTolerations` on a spec copy: a toleration of the same key and
    effect is replaced, others are kept."""
    wanted = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append(HOST_NETWORK_TOLERATION)
    tolerations = [t for t in spec.get("tolerations") or []
                   if not any(t.get("key") == w["key"] and t.get("effect") == w["effect"]
                              for w in wanted)]
    spec["tolerations"] = tolerations + [dict(w) for w in wanted]


def pin_to_node(spec: Obj, node: str) -> None:
    """`ReplaceDaemonSetPodNodeNameNodeAffinity`: required node affinity becomes the node."""
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def target_node(pod: Obj) -> str | None:
    """The node a daemon pod is for: its nodeName, else its matchFields term."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or ():
        for req in term.get("matchFields") or ():
            if (req.get("key") == "metadata.name" and req.get("operator") == "In"
                    and len(req.get("values") or ()) == 1):
                return req["values"][0]
    return None


def should_run(template_spec: Obj, node: Obj) -> tuple[bool, bool]:
    """(should run a new pod there, should keep a running one) for a spec that already has
    the daemon tolerations."""
    if not selects_node(template_spec, node):
        return False, False
    if untolerated_taints(template_spec, node, ("NoExecute",)):
        return False, False
    return not untolerated_taints(template_spec, node, ("NoSchedule",)), True


class DaemonSetController(ControllerLoop[tuple[str, str]]):
    name = COMPONENT

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 owners: OwnerIndex) -> None:
        super().__init__(store, clock)
        self.index = owners
        self.ds_type = store.type("daemonsets", "apps")
        self.pod_type = store.type("pods")
        self.node_type = store.type("nodes")
        self.pod_control = PodControl(store, recorder, COMPONENT)
        self.recorder = recorder
        self._keys: set[tuple[str, str]] = set()
        for ds in store.list(self.ds_type):
            self._on_daemonset(self.ds_type, "ADDED", ds, None)
        store.add_listener(self._on_daemonset, self.ds_type)
        store.add_listener(self._on_pod, self.pod_type)
        store.add_listener(self._on_node, self.node_type)

    # --- what to sync --------------------------------------------------------------------------

    def _on_daemonset(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if event == "DELETED":
            self._keys.discard(key)
            return
        self._keys.add(key)
        self.enqueue(key)

    def _on_pod(self, _rt: ResourceType, _event: str, obj: Obj, old: Obj | None) -> None:
        for ref in (controller_ref(obj), controller_ref(old)):
            if ref is not None and ref.kind == "DaemonSet":
                self.enqueue((obj["metadata"]["namespace"], ref.name))

    def _on_node(self, _rt: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        """A node added, gone, or with other labels or taints: every DaemonSet looks again
        (a heartbeat changes neither)."""
        if event == "MODIFIED" and old is not None and _placement_fields(obj) == \
                _placement_fields(old):
            return
        for key in self._keys:
            self.enqueue(key)

    # --- sync ----------------------------------------------------------------------------------

    def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        ds = self.store.find(self.ds_type, namespace, name)
        if ds is None:
            return
        selector = selector_from_spec(ds["spec"].get("selector"))
        pods = [p for p in claim(self.store, self.index, ds, self.pod_type, selector)
                if not (is_terminal(p) and is_terminating(p))]
        template = self._template(ds)
        nodes = {n["metadata"]["name"]: n for n in self.store.list(self.node_type)}
        by_node: dict[str, list[Obj]] = {}
        for pod in sorted(pods, key=lambda p: (creation_time(p), p["metadata"]["name"])):
            by_node.setdefault(target_node(pod) or "", []).append(pod)
        if not is_terminating(ds):
            self._manage(ds, template, nodes, by_node)
            if (ds["spec"].get("updateStrategy") or {}).get("type") == "RollingUpdate":
                self._rolling_update(ds, template, nodes, by_node)
        status = self._status(ds, template, nodes, by_node)
        if status != ds.get("status"):
            self.store.mutate(self.ds_type, namespace, name,
                              lambda o: o.__setitem__("status", status), subresource="status")
        self._requeue_for_availability(ds, by_node)

    def _template(self, ds: Obj) -> Obj:
        template = copy.deepcopy(ds["spec"].get("template") or {})
        with_daemon_tolerations(template.setdefault("spec", {}))
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        labels[REVISION_HASH_LABEL] = pod_template_hash(ds["spec"].get("template") or {})
        labels[TEMPLATE_GENERATION_LABEL] = str(ds["metadata"].get("generation", 1))
        return template

    def _manage(self, ds: Obj, template: Obj, nodes: dict[str, Obj],
                by_node: dict[str, list[Obj]]) -> None:
        create: list[str] = []
        delete: list[Obj] = []
        for name, node in sorted(nodes.items()):
            run, keep = should_run(template["spec"], node)
            here = by_node.get(name, [])
            if run and not here:
                create.append(name)
            elif keep:
                live = [p for p in here if not is_terminating(p)]
                failed = [p for p in live if is_terminal(p)]
                for pod in failed:
                    self.pod_control.event(
                        ds, "FailedDaemonPod", f"Found failed daemon pod "
                        f"{pod['metadata']['namespace']}/{pod['metadata']['name']} on node "
                        f"{name}, will try to kill it", type="Warning")
                delete += failed
                running = [p for p in live if not is_terminal(p)]
                delete += running[1:]  # the oldest stays
            else:
                delete += [p for p in here if not is_terminating(p)]
        for name, here in by_node.items():
            if name not in nodes:  # unscheduled pods of a node that is gone
                delete += [p for p in here if not is_terminating(p)
                           and not (p.get("spec") or {}).get("nodeName")]
        for name in create[:BURST_PODS]:
            pod = pod_from_template(template, ds)
            pin_to_node(pod["spec"], name)
            try:
                self.pod_control.create(ds, pod)
            except errors.ApiError:
                break  # slow start: the next sync tries again
        self._delete(ds, delete)

    def _delete(self, ds: Obj, pods: list[Obj]) -> None:
        for pod in pods[:BURST_PODS]:
            try:
                self.pod_control.delete(ds, pod)
            except errors.ApiError as e:
                if e.code != 404:
                    raise

    def _rolling_update(self, ds: Obj, template: Obj, nodes: dict[str, Obj],
                        by_node: dict[str, list[Obj]]) -> None:
        """Replace old-template pods within maxUnavailable (maxSurge 0): kube's
        `rollingUpdate`, deleting; `_manage` creates the new pod on the next sync."""
        spec = ds["spec"]
        current = template["metadata"]["labels"][REVISION_HASH_LABEL]
        now, min_ready = self.clock.time(), spec.get("minReadySeconds", 0) or 0
        desired = [n for n, node in sorted(nodes.items()) if should_run(template["spec"], node)[0]]
        raw = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get(
            "maxUnavailable", 1)
        try:
            max_unavailable = scaled_value(raw, len(desired), round_up=True)
        except ValueError:
            max_unavailable = 1
        max_unavailable = max(max_unavailable, 1)
        unavailable = 0
        replace: list[Obj] = []
        candidates: list[Obj] = []
        for name in desired:
            live = [p for p in by_node.get(name, []) if is_active(p)]
            new = [p for p in live if _revision(p) == current]
            old = [p for p in live if _revision(p) != current]
            if len(live) > 1 or not live:
                unavailable += 1  # missing or doubled: `_manage` sorts it out
            elif new:
                if not _available(new[0], min_ready, now):
                    unavailable += 1
            elif not _available(old[0], min_ready, now):
                replace.append(old[0])
            elif unavailable < max_unavailable:
                candidates.append(old[0])
        room = max(max_unavailable - unavailable, 0)
        self._delete(ds, replace + candidates[:room])

    def _status(self, ds: Obj, template: Obj, nodes: dict[str, Obj],
                by_node: dict[str, list[Obj]]) -> Obj:
        current = template["metadata"]["labels"][REVISION_HASH_LABEL]
        now, min_ready = self.clock.time(), ds["spec"].get("minReadySeconds", 0) or 0
        desired = scheduled = misscheduled = ready = available = updated = 0
        for name, node in nodes.items():
            live = [p for p in by_node.get(name, []) if is_active(p)]
            if should_run(template["spec"], node)[0]:
                desired += 1
                if live:
                    scheduled += 1
                    oldest = live[0]
                    if is_ready(oldest):
                        ready += 1
                        if _available(oldest, min_ready, now):
                            available += 1
                    if _revision(oldest) == current:
                        updated += 1
            elif live:
                misscheduled += 1
        status = {"currentNumberScheduled": scheduled, "numberMisscheduled": misscheduled,
                  "desiredNumberScheduled": desired, "numberReady": ready,
                  "observedGeneration": ds["metadata"].get("generation", 1),
                  "updatedNumberScheduled": updated, "numberAvailable": available,
                  "numberUnavailable": desired - available}
        return compact_status(status, keep=("currentNumberScheduled", "numberMisscheduled",
                                            "desiredNumberScheduled", "numberReady"))

    def _requeue_for_availability(self, ds: Obj, by_node: dict[str, list[Obj]]) -> None:
        min_ready = ds["spec"].get("minReadySeconds", 0) or 0
        if not min_ready:
            return
        now = self.clock.time()
        due = [at for pods in by_node.values() for p in pods
               if (at := available_at(p, min_ready)) is not None and at > now]
        if due:
            meta = ds["metadata"]
            self.enqueue_at(min(due), (meta["namespace"], meta["name"]))


def _revision(pod: Obj) -> str:
    return (pod["metadata"].get("labels") or {}).get(REVISION_HASH_LABEL, "")


def _available(pod: Obj, min_ready: int, now: float) -> bool:
    at = available_at(pod, min_ready)
    return at is not None and at <= now


def _placement_fields(node: Obj) -> tuple[Any, ...]:
    return (node["metadata"].get("labels"), (node.get("spec") or {}).get("taints"))
