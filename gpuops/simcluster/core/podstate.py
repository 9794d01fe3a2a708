"""What the workload controllers read from a pod and from owner references, as plain functions.

These mirror kube-controller-manager's helpers (`IsPodActive`, `IsPodReady`, `IsPodAvailable`,
`GetControllerOf`, `NewControllerRef`), so every controller judges a pod the same way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .clock import parse_rfc3339

Obj = dict[str, Any]

TERMINAL_PHASES = ("Succeeded", "Failed")


class ControllerRef(NamedTuple):
    api_version: str
    kind: str
    name: str
    uid: str


def phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def is_terminating(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def is_terminal(pod: Obj) -> bool:
    return phase(pod) in TERMINAL_PHASES


def is_active(pod: Obj) -> bool:
    """Counts toward a controller's replicas: not finished and not being deleted."""
    return not is_terminal(pod) and not is_terminating(pod)


def ready_condition(pod: Obj) -> Obj | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond
    return None


def is_ready(pod: Obj) -> bool:
    cond = ready_condition(pod)
    return cond is not None and cond.get("status") == "True"


def ready_since(pod: Obj) -> float | None:
    """When the pod last became Ready (virtual epoch seconds), None when not Ready."""
    cond = ready_condition(pod)
    if cond is None or cond.get("status") != "True":
        return None
    stamp = cond.get("lastTransitionTime")
    return parse_rfc3339(stamp) if stamp else None


def available_at(pod: Obj, min_ready_seconds: int) -> float | None:
    """The time the pod counts as available (Ready for minReadySeconds), None when not Ready."""
    if not is_ready(pod):
        return None
    if not min_ready_seconds:
        return 0.0
    since = ready_since(pod)
    return None if since is None else since + min_ready_seconds


def max_restarts(pod: Obj) -> int:
    status = pod.get("status") or {}
    counts = [cs.get("restartCount", 0) for cs in (status.get("containerStatuses") or [])
              + (status.get("initContainerStatuses") or [])]
    return max(counts, default=0)


def total_restarts(pod: Obj) -> int:
    status = pod.get("status") or {}
    return sum(cs.get("restartCount", 0) for cs in (status.get("containerStatuses") or [])
               + (status.get("initContainerStatuses") or []))


def creation_time(obj: Obj) -> float:
    stamp = obj["metadata"].get("creationTimestamp")
    return parse_rfc3339(stamp) if stamp else 0.0


def labels_of(obj: Obj) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


# --- owner references --------------------------------------------------------------------------

def controller_ref(obj: Obj | None) -> ControllerRef | None:
    """The owner reference with `controller: true`, as `metav1.GetControllerOf`."""
    if obj is None:
        return None
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return ControllerRef(ref.get("apiVersion", ""), ref.get("kind", ""),
                                 ref.get("name", ""), ref.get("uid", ""))
    return None


def new_controller_ref(owner: Obj) -> Obj:
    """`metav1.NewControllerRef`: the reference a controller puts on what it creates."""
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def without_owner(obj: Obj, uid: str) -> None:
    """Drop the owner reference to `uid` from a mutable copy (release, orphaning)."""
    meta = obj["metadata"]
    refs = [r for r in meta.get("ownerReferences") or () if r.get("uid") != uid]
    if refs:
        meta["ownerReferences"] = refs
    else:
        meta.pop("ownerReferences", None)
