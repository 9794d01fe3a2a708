"""PodDisruptionBudgets: the budget arithmetic, and the controller that writes PDB status.

`pdb_budget` is the disruption controller's computation as a pure function (the eviction
endpoint calls it too): healthy = Ready pods matching the selector, not being deleted and not
evicted in the last 2 minutes (`status.disruptedPods`); desiredHealthy from minAvailable (an
int: expected = matching pods; a percent of the controllers' scale, rounded up) or
maxUnavailable (expected = the controllers' scale, rounded up); disruptionsAllowed = healthy -
desired, never negative, 0 while nothing is expected. The controller keeps each PDB's member
pods from store changes, looks the owning workloads' scale up for the percent and
maxUnavailable forms (a Deployment's, not its ReplicaSet's), and writes expectedPods /
currentHealthy / desiredHealthy / disruptionsAllowed / disruptedPods / observedGeneration and
the DisruptionAllowed condition (SufficientPods, InsufficientPods, SyncFailed).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ..core.clock import parse_rfc3339, rfc3339
from ..core.intstr import is_percent, scaled_value
from ..core.podstate import controller_ref, is_ready, is_terminating, labels_of
from ..core.recorder import record_event
from ..core.resources import ResourceType
from ..core.selectors import Requirement, labels_match, selector_from_spec
from ..core.store import Store
from .loop import ControllerLoop

if TYPE_CHECKING:
    from ..cluster import SimCluster

Obj = dict[str, Any]
DELETION_TIMEOUT_S = 120.0  # an evicted pod not deleted within this counts as healthy again
COMPONENT = "controllermanager"
SCALED_KINDS = {"Deployment": ("deployments", "apps"), "ReplicaSet": ("replicasets", "apps"),
                "StatefulSet": ("statefulsets", "apps")}


class UnscalableController(ValueError):
    """A covered pod's controller has no scale to count expected pods from."""


def pdb_selector(pdb: Obj) -> list[Requirement] | None:
    """The PDB's selector; None selects nothing (policy/v1), {} selects every pod."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return None
    return selector_from_spec(selector)


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


def covers(pdb: Obj, pod: Obj, reqs: list[Requirement] | None = None) -> bool:
    if reqs is None:
        reqs = pdb_selector(pdb)
        if reqs is None:
            return False
    return (pod["metadata"].get("namespace") == pdb["metadata"].get("namespace")
            and labels_match(reqs, labels_of(pod)))


def needs_scale(pdb: Obj) -> bool:
    """Whether expectedPods comes from the controllers' scale rather than the pod count."""
    spec = pdb.get("spec") or {}
    return spec.get("maxUnavailable") is not None or is_percent(spec.get("minAvailable"))


def pdb_budget(pdb: dict, pods: list[dict], *, expected_scale: int | None = None,
               now: float | None = None) -> dict:
    """{"expectedPods", "currentHealthy", "desiredHealthy", "disruptionsAllowed"} for `pdb`.

    `pods` may be any pods: those the PDB does not select are ignored. `expected_scale` is
    the summed scale of the covered pods' controllers (what the controller uses for percent
    and maxUnavailable); without it the number of covered pods stands in. `now` enables the
    2-minute grace for pods listed in `status.disruptedPods`; without it they stay unhealthy.
    Raises ValueError for a malformed minAvailable/maxUnavailable."""
    reqs = pdb_selector(pdb)
    covered = [] if reqs is None else [p for p in pods if covers(pdb, p, reqs)]
    disrupted = (pdb.get("status") or {}).get("disruptedPods") or {}
    healthy = 0
    for pod in covered:
        if is_terminating(pod):
            continue
        evicted = disrupted.get(pod["metadata"]["name"])
        if evicted and (now is None or parse_rfc3339(evicted) + DELETION_TIMEOUT_S > now):
            continue
        if is_ready(pod):
            healthy += 1
    expected, desired = expected_and_desired(pdb, len(covered), expected_scale)
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return {"expectedPods": expected, "currentHealthy": healthy, "desiredHealthy": desired,
            "disruptionsAllowed": allowed}


def expected_and_desired(pdb: Obj, covered: int, expected_scale: int | None) -> tuple[int, int]:
    spec = pdb.get("spec") or {}
    scale = covered if expected_scale is None else expected_scale
    if spec.get("maxUnavailable") is not None:
        unavailable = scaled_value(spec["maxUnavailable"], scale, round_up=True)
        return scale, max(0, scale - unavailable)
    min_available = spec.get("minAvailable")
    if min_available is None:
        return 0, 0
    if is_percent(min_available):
        return scale, scaled_value(min_available, scale, round_up=True)
    return covered, scaled_value(min_available, covered, round_up=True)


def pdbs_covering(store: Store, pod: dict) -> list[dict]:
    """The PodDisruptionBudgets in the pod's namespace whose selector matches it."""
    rt = store.type("poddisruptionbudgets", "policy")
    return [pdb for pdb in store.list(rt, pod["metadata"].get("namespace"))
            if covers(pdb, pod)]


def expected_scale(store: Store, pods: list[Obj]) -> tuple[int, list[str]]:
    """`getExpectedScale`: the summed spec.replicas of the covered pods' controllers (each
    counted once; a ReplicaSet of a Deployment counts as the Deployment), and the names of
    pods without a controller. UnscalableController for a controller without a scale."""
    seen: dict[str, int] = {}
    unmanaged: list[str] = []
    for pod in pods:
        ref = controller_ref(pod)
        if ref is None:
            unmanaged.append(pod["metadata"]["name"])
            continue
        if ref.uid in seen:
            continue
        namespace = pod["metadata"]["namespace"]
        if ref.kind not in SCALED_KINDS:
            raise UnscalableController(f"{_resource_of(store, ref.api_version, ref.kind)} does "
                                       "not implement the scale subresource")
        owner = store.find(store.type(*SCALED_KINDS[ref.kind]), namespace, ref.name)
        if owner is None or owner["metadata"]["uid"] != ref.uid:
            continue
        uid, size = ref.uid, (owner.get("spec") or {}).get("replicas", 1)
        if ref.kind == "ReplicaSet":
            parent = controller_ref(owner)
            if parent is not None and parent.kind == "Deployment":
                d = store.find(store.type("deployments", "apps"), namespace, parent.name)
                if d is not None and d["metadata"]["uid"] == parent.uid:
                    uid, size = parent.uid, (d.get("spec") or {}).get("replicas", 1)
        seen[uid] = size
    return sum(seen.values()), unmanaged


def _resource_of(store: Store, api_version: str, kind: str) -> str:
    rt = store.registry.by_kind(api_version, kind)
    if rt is None:
        return kind.lower()
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def budget_from_store(store: Store, pdb: Obj, pods: list[Obj], now: float) -> Obj:
    """`pdb_budget` with expectedPods from the controllers' scale, as the controller has it."""
    reqs = pdb_selector(pdb)
    covered = [] if reqs is None else [p for p in pods if covers(pdb, p, reqs)]
    scale = expected_scale(store, covered)[0] if needs_scale(pdb) else None
    return pdb_budget(pdb, covered, expected_scale=scale, now=now)


class DisruptionController(ControllerLoop):
    name = "disruption-controller"

    def __init__(self, cluster: SimCluster) -> None:
        super().__init__(cluster)
        self.pdb_type = self.store.type("poddisruptionbudgets", "policy")
        self.pod_type = self.store.type("pods")
        self._selectors: dict[str, dict[str, list[Requirement] | None]] = {}
        self._members: dict[tuple[str, str], set[str]] = {}
        for pdb in self.store.list(self.pdb_type):
            self._on_change(self.pdb_type, "ADDED", pdb, None)
        self.store.add_listener(self._on_change)

    # --- membership, from store changes --------------------------------------------------------

    def _on_change(self, rtype: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        key = rtype.key
        if key == "pods":
            self._on_pod(event, obj)
        elif key == "policy/poddisruptionbudgets":
            self._on_pdb(event, obj, old)
        elif key in ("apps/deployments", "apps/replicasets", "apps/statefulsets") and (
                event == "DELETED" or old is None or (old.get("spec") or {}).get("replicas")
                != (obj.get("spec") or {}).get("replicas")):
            namespace = obj["metadata"]["namespace"]  # a scale change moves expectedPods
            for name in self._selectors.get(namespace, ()):
                self.enqueue((namespace, name))

    def _on_pod(self, event: str, pod: Obj) -> None:
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

    def _on_pdb(self, event: str, pdb: Obj, old: Obj | None) -> None:
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
            record_event(self.cluster, pdb, "NoPods", "No matching pods found",
                         component=COMPONENT)
        disrupted = self._live_disruptions(pdb, pods, now)
        working = {**pdb, "status": {**(pdb.get("status") or {}), "disruptedPods": disrupted}}
        try:
            scale = None
            if needs_scale(pdb):
                scale, unmanaged = expected_scale(self.store, pods)
                if unmanaged:
                    record_event(
                        self.cluster, pdb, "UnmanagedPods",
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
