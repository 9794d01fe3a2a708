"""Node lifecycle: what happens to a node's pods when the node stops being healthy.

- The taint manager (kube-controller-manager's taint-eviction-controller): a pod on a node
  with a NoExecute taint it does not tolerate is deleted at once, or after its
  tolerationSeconds (300 s for not-ready/unreachable by default), with a
  `TaintManagerEviction` event. It acts on any NoExecute taint, injected or set by a client.
- Faults: `node-notready` (the kubelet stops posting status: conditions Unknown, the
  unreachable taints, its pods marked not Ready), `node-ready` (it posts again) and
  `node-shutdown` (the instance is gone: its pods and the Node object are deleted, as pod GC
  and the cloud node controller do).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock, parse_rfc3339, rfc3339
from ..core.faults import FaultRegistry
from ..core.nodeindex import NodeIndex, PodKey
from ..core.nodes import (
    TAINT_NOT_READY,
    TAINT_UNREACHABLE,
    add_taint,
    holds_resources,
    mark_unknown,
    no_execute_grace,
    remove_taints,
)
from ..core.nodewrites import remove_node, report_ready
from ..core.recorder import Recorder
from ..core.store import Store

Obj = dict[str, Any]


@dataclass(frozen=True)
class NodeLifecycleConfig:
    tick_seconds: float = 0.5  # virtual seconds between the taint manager's looks


class NodeLifecycleController:
    name = "node-lifecycle"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder, nodes: NodeIndex,
                 config: NodeLifecycleConfig) -> None:
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.index = nodes
        # pod -> (first seen at, pod uid, eviction deadline); the heap holds deadlines to check.
        self._scheduled: dict[PodKey, tuple[float, str, float]] = {}
        self._heap: list[tuple[float, int, PodKey, str]] = []
        self._seq = itertools.count()
        self.tick_seconds = config.tick_seconds

    async def run(self) -> None:
        while True:
            self.step()
            await self.clock.sleep(self.tick_seconds, min_real=0.05)

    def step(self) -> None:
        now = self.clock.time()
        nodes, self.index.dirty_nodes = self.index.dirty_nodes, set()
        for node in nodes:
            # Timed from when the taint was added, however late this tick runs after it.
            added = [parse_rfc3339(t["timeAdded"]) for t in self.index.no_execute_taints(node)
                     if t.get("timeAdded")]
            since = min(max(added), now) if added else now
            for pod in self.index.pods_on(node):
                self._evaluate(pod, since)
        pods, self.index.dirty_pods = self.index.dirty_pods, set()
        for ns, name in pods:
            found = self.store.find(self.index.pods_type, ns, name)
            if found is not None:
                self._evaluate(found, now)
        self._evict_due(now)

    # --- the taint manager ---------------------------------------------------------------------

    def _evaluate(self, pod: Obj, now: float) -> None:
        """Schedule, keep or cancel the pod's eviction; `now` is when its node's taints (or
        its binding to a tainted node) were seen."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        node = (pod.get("spec") or {}).get("nodeName")
        taints = self.index.no_execute_taints(node) if node else []
        grace = no_execute_grace(pod, taints) if taints else None
        if grace is None or meta.get("deletionTimestamp") or not holds_resources(pod):
            self._scheduled.pop(key, None)
            return
        previous = self._scheduled.get(key)
        since = previous[0] if previous and previous[1] == meta["uid"] else now
        deadline = since + grace
        if previous and previous[1] == meta["uid"] and previous[2] == deadline:
            return
        self._scheduled[key] = (since, meta["uid"], deadline)
        heapq.heappush(self._heap, (deadline, next(self._seq), key, meta["uid"]))

    def _evict_due(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            deadline, _, key, uid = heapq.heappop(self._heap)
            entry = self._scheduled.get(key)
            if entry is None or entry[1] != uid or entry[2] != deadline:
                continue  # cancelled or rescheduled
            del self._scheduled[key]
            pod = self.store.find(self.index.pods_type, *key)
            if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get(
                    "deletionTimestamp"):
                continue
            self.recorder.record(pod, "TaintManagerEviction",
                                 f"Marking for deletion Pod {key[0]}/{key[1]}",
                                 component="taint-eviction-controller")
            # Since 1.26 the controller first marks the pod, as the scheduler does a victim.
            self.store.mutate(self.index.pods_type, *key, lambda p: _mark_disruption(
                p, rfc3339(self.clock.now())), subresource="status")
            self.store.delete(self.index.pods_type, *key)

    # --- faults --------------------------------------------------------------------------------

    def register_faults(self, faults: FaultRegistry) -> None:
        faults.register("node-notready", self.node_not_ready,
                        "target node stops posting status: Ready=Unknown, unreachable taints; "
                        "its pods are deleted after their tolerationSeconds (300 s by default)",
                        target="a node name")
        faults.register("node-ready", self.node_ready,
                        "target node posts status again: Ready=True, unreachable taints "
                        "removed", target="a node name")
        faults.register("node-shutdown", self.node_shutdown,
                        "target node's instance is gone: the Node and its pods are deleted "
                        "(a node pool then replaces it after its provisioning lag)",
                        target="a node name")

    def _node(self, target: str | None) -> Obj:
        if not target:
            raise errors.bad_request("field 'target' is required: the node's name "
                                     "(`kubectl get nodes`)")
        return self.store.get(self.index.nodes_type, None, target)

    def node_not_ready(self, target: str | None, _params: dict[str, Any]) -> dict[str, Any]:
        node = self._node(target)
        name = node["metadata"]["name"]
        now = rfc3339(self.clock.now())
        self.store.mutate(self.index.nodes_type, None, name,
                          lambda n: mark_unknown(n.setdefault("status", {}), now),
                          subresource="status")

        def taint(n: Obj) -> None:
            spec = n.setdefault("spec", {})
            remove_taints(spec, TAINT_NOT_READY)
            add_taint(spec, TAINT_UNREACHABLE, "NoSchedule")
            add_taint(spec, TAINT_UNREACHABLE, "NoExecute", now)

        node = self.store.mutate(self.index.nodes_type, None, name, taint)
        self.recorder.record(node, "NodeNotReady", f"Node {name} status is now: NodeNotReady",
                             component="node-controller")
        pods = [p for p in self.index.pods_on(name) if holds_resources(p)]
        for pod in pods:
            self._set_pod_ready(pod, "False", now)
            self.recorder.record(pod, "NodeNotReady", "Node is not ready",
                                 type="Warning", component="node-controller")
        self.step()  # the taint manager sees the new taint at once
        return {"node": name, "pods": len(pods)}

    def node_ready(self, target: str | None, _params: dict[str, Any]) -> dict[str, Any]:
        node = self._node(target)
        name = node["metadata"]["name"]
        now = rfc3339(self.clock.now())
        report_ready(self.store, self.recorder, self.index, name, now, TAINT_UNREACHABLE,
                     TAINT_NOT_READY)
        self.step()  # pending evictions of its pods are cancelled at once
        for pod in self.index.pods_on(name):
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if (pod.get("status") or {}).get("phase") == "Running" and statuses and all(
                    s.get("ready") for s in statuses):
                self._set_pod_ready(pod, "True", now)
        return {"node": name}

    def node_shutdown(self, target: str | None, _params: dict[str, Any]) -> dict[str, Any]:
        name = self._node(target)["metadata"]["name"]
        return {"node": name,
                "podsDeleted": remove_node(self.store, self.recorder, self.index, name)}

    def _set_pod_ready(self, pod: Obj, value: str, now: str) -> None:
        meta = pod["metadata"]
        if self.store.find(self.index.pods_type, meta["namespace"], meta["name"]) is None:
            return

        def change(p: Obj) -> None:
            conditions = p.setdefault("status", {}).setdefault("conditions", [])
            for cond in conditions:
                if cond.get("type") == "Ready":
                    if cond.get("status") != value:
                        cond.update(status=value, lastTransitionTime=now)
                    return
            conditions.append({"type": "Ready", "status": value, "lastProbeTime": None,
                               "lastTransitionTime": now})

        self.store.mutate(self.index.pods_type, meta["namespace"], meta["name"], change,
                          subresource="status")


def _mark_disruption(pod: dict, now: str) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != "DisruptionTarget"]
    conditions.append({"type": "DisruptionTarget", "status": "True",
                       "reason": "DeletionByTaintManager",
                       "message": "Taint manager: deleting due to NoExecute taint",
                       "lastTransitionTime": now})
