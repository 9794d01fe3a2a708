"""The disruption controller: it writes each PodDisruptionBudget's status.

The arithmetic is `core/pdb.py`'s (the eviction endpoint and preemption use it too). The
controller keeps each PDB's member pods from store changes, looks the owning workloads' scale
up for the percent and maxUnavailable forms (a Deployment's, not its ReplicaSet's), and writes
expectedPods / currentHealthy / desiredHealthy / disruptionsAllowed / disruptedPods /
observedGeneration and the DisruptionAllowed condition (SufficientPods, InsufficientPods,
SyncFailed).
"""

from __future__ import annotations

import copy
from typing import Any

from ..core.clock import VirtualClock, parse_rfc3339, rfc3339
from ..core.pdb import (
    DELETION_TIMEOUT_S,
    SCALED_KINDS,
    expected_scale,
    needs_scale,
    pdb_budget,
    pdb_selector,
)
from ..core.podstate import is_terminating, labels_of
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.selectors import Requirement, labels_match
from ..core.store import Store
from ..core.workqueue import ControllerLoop

Obj = dict[str, Any]
COMPONENT = "controllermanager"


def selector_text(reqs: list[Requirement]) -> str:
    """A selector as `labels.Selector.String()` writes it: `app=web,tier in (a,b)`."""
    parts = []
    for r in sorted(reqs, key=lambda r: r.key):
        values = ",".join(sorted(r.values))
        if r.op in ("=", "!="):
            parts.append(f"{r.key}{r.op}{values}")
        elif r.op in ("in", "notin"):
            parts.append(f"{r.key} {r.op} ({values})")
        else:
            parts.append(r.key if r.op == "exists" else f"!{r.key}")
    return ",".join(parts)


class DisruptionController(ControllerLoop[tuple[str, str]]):
    name = "disruption-controller"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder) -> None:
        super().__init__(store, clock)
        self.recorder = recorder
        self.pdb_type = self.store.type("poddisruptionbudgets", "policy")
        self.pod_type = self.store.type("pods")
        self._selectors: dict[str, dict[str, list[Requirement] | None]] = {}
        self._members: dict[tuple[str, str], set[str]] = {}
        for pdb in self.store.list(self.pdb_type):
            self._on_pdb(self.pdb_type, "ADDED", pdb, None)
        self.store.add_listener(self._on_pod, self.pod_type)
        self.store.add_listener(self._on_pdb, self.pdb_type)
        self.store.add_listener(self._on_scaled, *(self.store.type(plural, group)
                                                   for plural, group in SCALED_KINDS.values()))

    # --- membership, from store changes --------------------------------------------------------

    def _on_scaled(self, _rt: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        """A scale change of a Deployment, ReplicaSet or StatefulSet moves expectedPods."""
        if event == "DELETED" or old is None or (old.get("spec") or {}).get("replicas") != (
                obj.get("spec") or {}).get("replicas"):
            namespace = obj["metadata"]["namespace"]
            for name in self._selectors.get(namespace, ()):
                self.enqueue((namespace, name))

    def _on_pod(self, _rt: ResourceType, event: str, pod: Obj, _old: Obj | None) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for pdb_name, reqs in self._selectors.get(namespace, {}).items():
            members = self._members.setdefault((namespace, pdb_name), set())
            now_member = (event != "DELETED" and reqs is not None
                          and labels_match(reqs, labels_of(pod)))
            if now_member:
                members.add(name)
            elif name in members:
                members.discard(name)
            else:
                continue
            self.enqueue((namespace, pdb_name))

    def _on_pdb(self, _rt: ResourceType, event: str, pdb: Obj, old: Obj | None) -> None:
        namespace, name = pdb["metadata"]["namespace"], pdb["metadata"]["name"]
        if event == "DELETED":
            self._selectors.get(namespace, {}).pop(name, None)
            self._members.pop((namespace, name), None)
            return
        selector_changed = old is None or (old.get("spec") or {}).get("selector") != (
            pdb.get("spec") or {}).get("selector")
        if selector_changed:
            reqs = pdb_selector(pdb)
            self._selectors.setdefault(namespace, {})[name] = reqs
            self._members[(namespace, name)] = set() if reqs is None else {
                p["metadata"]["name"] for p in self.store.list(self.pod_type, namespace)
                if labels_match(reqs, labels_of(p))}
        self.enqueue((namespace, name))

    # --- sync ----------------------------------------------------------------------------------

    def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        pdb = self.store.find(self.pdb_type, namespace, name)
        if pdb is None:
            return
        now = self.clock.time()
        pods = [p for n in sorted(self._members.get(key, ()))
                if (p := self.store.find(self.pod_type, namespace, n)) is not None]
        if not pods:
            self.recorder.record(pdb, "NoPods", "No matching pods found", component=COMPONENT)
        disrupted = self._live_disruptions(pdb, pods, now)
        working = {**pdb, "status": {**(pdb.get("status") or {}), "disruptedPods": disrupted}}
        try:
            scale = None
            if needs_scale(pdb):
                scale, unmanaged = expected_scale(self.store, pods)
                if unmanaged:
                    self.recorder.record(
                        pdb, "UnmanagedPods",
                        f"Pods selected by this PodDisruptionBudget (selector: "
                        f"{selector_text(pdb_selector(pdb) or [])}) were found to be unmanaged. As a result, the "
                        "status of the PDB cannot be calculated correctly, which may result in "
                        "undefined behavior. To account for these pods please set "
                        '".spec.minAvailable" field of the PDB to an integer value.',
                        type="Warning", component=COMPONENT)
            budget = pdb_budget(working, pods, expected_scale=scale, now=now)
        except ValueError as e:
            self._fail_safe(pdb, str(e), now)
            return
        status: Obj = {**budget, "observedGeneration": pdb["metadata"].get("generation", 1)}
        if disrupted:
            status["disruptedPods"] = disrupted
        allowed = budget["disruptionsAllowed"] > 0
        status["conditions"] = _set_condition(
            (pdb.get("status") or {}).get("conditions"), "True" if allowed else "False",
            "SufficientPods" if allowed else "InsufficientPods", "",
            status["observedGeneration"], now)
        self._write(pdb, status)

    def _live_disruptions(self, pdb: Obj, pods: list[Obj], now: float) -> dict[str, str]:
        """`buildDisruptedPodMap`: evictions whose pod still exists, isn't being deleted and
        is within the deletion timeout; wake up when the next one expires."""
        recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
        if not recorded:
            return {}
        by_name = {p["metadata"]["name"]: p for p in pods}
        live: dict[str, str] = {}
        for pod_name, stamp in recorded.items():
            pod = by_name.get(pod_name)
            if pod is None or is_terminating(pod):
                continue
            expires = parse_rfc3339(stamp) + DELETION_TIMEOUT_S
            if expires > now:
                live[pod_name] = stamp
                self.enqueue_at(expires, (pdb["metadata"]["namespace"], pdb["metadata"]["name"]))
        return live

    def _fail_safe(self, pdb: Obj, message: str, now: float) -> None:
        status = copy.deepcopy(pdb.get("status") or {})
        for field in ("expectedPods", "currentHealthy", "desiredHealthy"):
            status.setdefault(field, 0)
        status["disruptionsAllowed"] = 0
        status["conditions"] = _set_condition(status.get("conditions"), "False", "SyncFailed",
                                              message, status.get("observedGeneration", 0), now)
        self._write(pdb, status)

    def _write(self, pdb: Obj, status: Obj) -> None:
        if status == pdb.get("status"):
            return
        self.store.mutate(self.pdb_type, pdb["metadata"]["namespace"], pdb["metadata"]["name"],
                          lambda o: o.__setitem__("status", status), subresource="status")


def _set_condition(conditions: list[Obj] | None, status: str, reason: str, message: str,
                   generation: int, now: float) -> list[Obj]:
    """`meta.SetStatusCondition` for DisruptionAllowed: the transition time moves only when
    the status does."""
    current = next((c for c in conditions or () if c.get("type") == "DisruptionAllowed"), None)
    stamp = rfc3339(now)
    if current is not None and current.get("status") == status:
        stamp = current.get("lastTransitionTime", stamp)
    cond = {"type": "DisruptionAllowed", "status": status, "observedGeneration": generation,
            "lastTransitionTime": stamp, "reason": reason, "message": message}
    others = [copy.deepcopy(c) for c in conditions or () if c.get("type") != "DisruptionAllowed"]
    return others + [cond]
