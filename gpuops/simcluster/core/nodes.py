"""What the node components read and write on a Node: conditions, taints, tolerations.

Pure: no store, no clock. The node lifecycle controller, the node pools and the kubelet each
decide *when* a node turns Ready or NotReady or gets tainted; this module knows what each of
those looks like on the Node object (conditions with kubelet's reasons, the taints the node
lifecycle controller sets, kube's toleration rule).
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

POOL_LABEL = "gpuops.io/pool"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

# Condition types in the order the kubelet reports them, with their healthy state.
HEALTHY_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory",
     "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def condition(node: Obj, type_: str) -> Obj | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def is_ready(node: Obj) -> bool:
    cond = condition(node, "Ready")
    return cond is not None and cond.get("status") == "True"


def set_condition(status: Obj, type_: str, value: str, reason: str, message: str,
                  now: str) -> None:
    """Set one condition in a status copy; lastTransitionTime moves only when status does."""
    conditions = status.setdefault("conditions", [])
    for cond in conditions:
        if cond.get("type") == type_:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now
            cond.update(status=value, reason=reason, message=message, lastHeartbeatTime=now)
            return
    conditions.append({"type": type_, "status": value, "reason": reason, "message": message,
                       "lastHeartbeatTime": now, "lastTransitionTime": now})


def mark_ready(status: Obj, now: str) -> None:
    for type_, value, reason, message in HEALTHY_CONDITIONS:
        set_condition(status, type_, value, reason, message, now)
    set_condition(status, "Ready", "True", "KubeletReady", "kubelet is posting ready status", now)


def mark_unknown(status: Obj, now: str) -> None:
    """What the node lifecycle controller writes when the kubelet stops posting status."""
    for type_, *_ in HEALTHY_CONDITIONS:
        set_condition(status, type_, "Unknown", "NodeStatusUnknown", UNKNOWN_MESSAGE, now)
    set_condition(status, "Ready", "Unknown", "NodeStatusUnknown", UNKNOWN_MESSAGE, now)



# --- taints and tolerations --------------------------------------------------------------------

def add_taint(spec: Obj, key: str, effect: str, now: str | None = None,
              value: str | None = None) -> None:
    taints = spec.setdefault("taints", [])
    if any(t.get("key") == key and t.get("effect") == effect for t in taints):
        return
    taint: Obj = {"key": key, "effect": effect}
    if value is not None:
        taint["value"] = value
    if effect == "NoExecute" and now:
        taint["timeAdded"] = now
    taints.append(taint)


def remove_taints(spec: Obj, *keys: str) -> None:
    kept = [t for t in spec.get("taints") or [] if t.get("key") not in keys]
    if kept:
        spec["taints"] = kept
    else:
        spec.pop("taints", None)


def toleration_matches(toleration: Obj, taint: Obj) -> bool:
    """The scheduler's and taint manager's rule (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def no_execute_grace(pod: Obj, taints: list[Obj]) -> float | None:
    """Seconds a pod may stay on a node with these NoExecute taints: 0 if one is not
    tolerated, None if all are tolerated forever, else the least tolerationSeconds."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    least: float | None = None
    for taint in taints:
        matching = [t for t in tolerations if toleration_matches(t, taint)]
        if not matching:
            return 0.0
        for tol in matching:
            seconds = tol.get("tolerationSeconds")
            if seconds is not None:
                seconds = max(float(seconds), 0.0)
                least = seconds if least is None else min(least, seconds)
    return least


# --- pods --------------------------------------------------------------------------------------

def holds_resources(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
