"""PodDisruptionBudget arithmetic: who a budget covers, how many may go, as the disruption
controller computes it.

Pure functions on plain objects (the store only to look up owners' scale), shared by the
disruption controller that writes PDB status, the eviction endpoint that honours it and the
scheduler's preemption that prefers not to violate it: healthy = Ready pods matching the
selector, not being deleted and not evicted in the last 2 minutes (`status.disruptedPods`);
desiredHealthy from minAvailable (an int: expected = matching pods; a percent of the
controllers' scale, rounded up) or maxUnavailable (expected = the controllers' scale, rounded
up); disruptionsAllowed = healthy - desired, never negative, 0 while nothing is expected.
"""

from __future__ import annotations

from typing import Any

from .clock import parse_rfc3339
from .intstr import is_percent, scaled_value
from .podstate import controller_ref, is_ready, is_terminating, labels_of
from .selectors import Requirement, labels_match, selector_from_spec
from .store import Store

Obj = dict[str, Any]
DELETION_TIMEOUT_S = 120.0  # an evicted pod not deleted within this counts as healthy again
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
