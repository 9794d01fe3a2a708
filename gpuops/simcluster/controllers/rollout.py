"""The Deployment controller's arithmetic, as pure functions over plain dicts.

Mirrors `pkg/controller/deployment/util`: the pod-template hash, which ReplicaSet is new,
surge/unavailability fenceposts (surge rounds up, unavailability down, both zero means one
unavailable), how far the new ReplicaSet may grow, proportional scaling, the status and the
Available/Progressing conditions. `deployment.py` does the store plumbing around them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from ..core.clock import parse_rfc3339, rfc3339
from ..core.intstr import scaled_value
from ..core.podstate import creation_time

Obj = dict[str, Any]

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
_NOT_COPIED = {REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS,
               "kubectl.kubernetes.io/last-applied-configuration"}

# Condition reasons, as `deploymentutil` names them.
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
RS_UPDATED = "ReplicaSetUpdated"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
FAILED_RS_CREATE = "ReplicaSetCreateError"

_SAFE = "bcdfghjklmnpqrstvwxz2456789"
MAX_INT32 = 2**31 - 1


# --- identity ----------------------------------------------------------------------------------

def safe_encode(text: str) -> str:
    """`rand.SafeEncodeString`: no vowels, no look-alike characters."""
    return "".join(_SAFE[ord(ch) % len(_SAFE)] for ch in text)


def pod_template_hash(template: Obj, collision_count: int | None = None) -> str:
    """`controller.ComputeHash`: FNV-32a of the template (+ collision count), safe-encoded.

    kube hashes a spew dump of the Go struct; simcluster hashes canonical JSON, so values
    differ from a real cluster's but are just as deterministic. A null is hashed as absent,
    as it is the zero value in the Go struct."""
    data = json.dumps(without_nulls(template), sort_keys=True, separators=(",", ":")).encode()
    if collision_count is not None:
        data += collision_count.to_bytes(8, "little")
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return safe_encode(str(h))


def template_without_hash(template: Obj) -> Obj:
    t = copy.deepcopy(template or {})
    labels = (t.get("metadata") or {}).get("labels")
    if labels and HASH_LABEL in labels:
        del labels[HASH_LABEL]
        if not labels:
            del t["metadata"]["labels"]
    return t


def equal_ignore_hash(a: Obj, b: Obj) -> bool:
    return _normal(template_without_hash(a)) == _normal(template_without_hash(b))


def without_nulls(value: Any) -> Any:
    """The value with every null member left out: decoded into kube's Go structs, a null and
    an absent field are the same zero value. (`kubectl rollout undo` sends a ReplicaSet's
    template back with `metadata.creationTimestamp: null`; it must still match that
    ReplicaSet.)"""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _normal(template: Obj) -> Obj:
    template = without_nulls(template)
    meta = template.get("metadata")
    if meta is not None and not meta:
        template = {k: v for k, v in template.items() if k != "metadata"}
    return template


# --- replica counts ----------------------------------------------------------------------------

def replicas(obj: Obj | None) -> int:
    if obj is None:
        return 0
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else value


def status_of(obj: Obj | None, field: str) -> int:
    return ((obj or {}).get("status") or {}).get(field, 0) or 0


def spec_total(rss: Sequence[Obj | None]) -> int:
    return sum(replicas(rs) for rs in rss if rs is not None)


def status_total(rss: Sequence[Obj | None], field: str) -> int:
    return sum(status_of(rs, field) for rs in rss if rs is not None)


def active(rss: Sequence[Obj | None]) -> list[Obj]:
    return [rs for rs in rss if rs is not None and replicas(rs) > 0]


def by_creation(rss: list[Obj]) -> list[Obj]:
    return sorted(rss, key=lambda rs: (creation_time(rs), rs["metadata"]["name"]))


def revision(rs: Obj | None) -> int:
    raw = ((rs or {}).get("metadata", {}).get("annotations") or {}).get(REVISION)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def annotation_int(rs: Obj, key: str) -> int | None:
    raw = (rs["metadata"].get("annotations") or {}).get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


# --- strategy ----------------------------------------------------------------------------------

def is_rolling(d: Obj) -> bool:
    return ((d["spec"].get("strategy") or {}).get("type") or "RollingUpdate") == "RollingUpdate"


def resolve_fenceposts(d: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as counts for the desired replicas."""
    ru = (d["spec"].get("strategy") or {}).get("rollingUpdate") or {}
    desired = replicas(d)
    surge = scaled_value(ru.get("maxSurge", "25%"), desired, round_up=True)
    unavailable = scaled_value(ru.get("maxUnavailable", "25%"), desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # a rollout must be able to make progress
    return surge, unavailable


def max_surge(d: Obj) -> int:
    return resolve_fenceposts(d)[0] if is_rolling(d) else 0


def max_unavailable(d: Obj) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    return min(resolve_fenceposts(d)[1], replicas(d))


def new_rs_new_replicas(d: Obj, all_rss: Sequence[Obj | None], new_rs: Obj) -> int:
    """`NewRSNewReplicas`: how big the new ReplicaSet may be now."""
    if not is_rolling(d):
        return replicas(d)
    current = spec_total(all_rss)
    max_total = replicas(d) + max_surge(d)
    if current >= max_total:
        return replicas(new_rs)
    scale_up = min(max_total - current, replicas(d) - replicas(new_rs))
    return replicas(new_rs) + scale_up


def is_saturated(d: Obj, new_rs: Obj | None) -> bool:
    if new_rs is None:
        return False
    return (annotation_int(new_rs, DESIRED_REPLICAS) == replicas(d)
            and replicas(new_rs) == replicas(d)
            and status_of(new_rs, "availableReplicas") == replicas(d))


def find_active_or_latest(new_rs: Obj | None, old_rss: list[Obj]) -> Obj | None:
    if new_rs is None and not old_rss:
        return None
    newest_first = list(reversed(by_creation(old_rss)))
    live = active(newest_first + [new_rs])
    if not live:
        return new_rs if new_rs is not None else newest_first[0]
    return live[0] if len(live) == 1 else None


def proportional_sizes(d: Obj, rss: list[Obj]) -> tuple[dict[str, int], str]:
    """`scale()` for a rolling Deployment whose size changed mid-rollout: spread the change
    over the active ReplicaSets by their share of the previous maximum, leftovers to the
    largest. Returns name -> new size, and "up"/"down"."""
    allowed = replicas(d) + max_surge(d) if replicas(d) > 0 else 0
    to_add = allowed - spec_total(rss)
    if not rss:
        return {}, ""
    if to_add > 0:
        order = sorted(rss, key=lambda rs: (-replicas(rs), -creation_time(rs)))
        operation = "up"
    elif to_add < 0:
        order = sorted(rss, key=lambda rs: (-replicas(rs), creation_time(rs)))
        operation = "down"
    else:
        return {rs["metadata"]["name"]: replicas(rs) for rs in rss}, ""
    sizes: dict[str, int] = {}
    added = 0
    for rs in order:
        part = _proportion(rs, d, to_add, added)
        sizes[rs["metadata"]["name"]] = replicas(rs) + part
        added += part
    largest = order[0]["metadata"]["name"]
    sizes[largest] = max(0, sizes[largest] + to_add - added)
    return sizes, operation


def _proportion(rs: Obj, d: Obj, to_add: int, added: int) -> int:
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = _fraction(rs, d)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def _fraction(rs: Obj, d: Obj) -> int:
    if replicas(d) == 0:
        return -replicas(rs)
    max_now = replicas(d) + max_surge(d)
    max_before = annotation_int(rs, MAX_REPLICAS)
    if not max_before:
        max_before = status_of(d, "replicas")
        if max_before == 0:
            return 0
    size = replicas(rs) * max_now / max_before
    return int(size + 0.5) - replicas(rs)  # integer.RoundToInt32 rounds half away from zero


def replicas_annotations(d: Obj) -> dict[str, str]:
    return {DESIRED_REPLICAS: str(replicas(d)), MAX_REPLICAS: str(replicas(d) + max_surge(d))}


def copy_deployment_annotations(d: Obj, annotations: dict[str, str]) -> bool:
    changed = False
    for k, v in (d["metadata"].get("annotations") or {}).items():
        if k in _NOT_COPIED or annotations.get(k) == v:
            continue
        annotations[k] = v
        changed = True
    return changed


# --- status and conditions ---------------------------------------------------------------------

def has_progress_deadline(d: Obj) -> bool:
    deadline = d["spec"].get("progressDeadlineSeconds", 600)
    return deadline is not None and deadline != MAX_INT32


def get_condition(status: Obj, ctype: str) -> Obj | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == ctype), None)


def new_condition(ctype: str, status: str, reason: str, message: str, now: float) -> Obj:
    stamp = rfc3339(now)
    return {"type": ctype, "status": status, "lastUpdateTime": stamp,
            "lastTransitionTime": stamp, "reason": reason, "message": message}


def set_condition(status: Obj, cond: Obj) -> None:
    """`SetDeploymentCondition`: same status and reason is no change; same status keeps the
    transition time."""
    current = get_condition(status, cond["type"])
    if current is not None and current["status"] == cond["status"] and current.get(
            "reason") == cond["reason"]:
        return
    if current is not None and current["status"] == cond["status"]:
        cond = {**cond, "lastTransitionTime": current["lastTransitionTime"]}
    remove_condition(status, cond["type"])
    status.setdefault("conditions", []).append(cond)


def remove_condition(status: Obj, ctype: str) -> None:
    conditions = [c for c in status.get("conditions") or () if c.get("type") != ctype]
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)


def calculate_status(d: Obj, all_rss: Sequence[Obj | None], new_rs: Obj | None, now: float) -> Obj:
    available = status_total(all_rss, "availableReplicas")
    status: Obj = {
        "observedGeneration": d["metadata"].get("generation", 1),
        "replicas": status_total(all_rss, "replicas"),
        "updatedReplicas": status_total([new_rs], "replicas"),
        "readyReplicas": status_total(all_rss, "readyReplicas"),
        "availableReplicas": available,
        "unavailableReplicas": max(0, spec_total(all_rss) - available),
    }
    old = d.get("status") or {}
    if old.get("collisionCount"):
        status["collisionCount"] = old["collisionCount"]
    if old.get("conditions"):
        status["conditions"] = copy.deepcopy(old["conditions"])
    if available >= replicas(d) - max_unavailable(d):
        set_condition(status, new_condition("Available", "True", "MinimumReplicasAvailable",
                                            "Deployment has minimum availability.", now))
    else:
        set_condition(status, new_condition("Available", "False", "MinimumReplicasUnavailable",
                                            "Deployment does not have minimum availability.",
                                            now))
    return status


def deployment_complete(d: Obj, status: Obj) -> bool:
    want = replicas(d)
    return (status.get("updatedReplicas", 0) == want and status.get("replicas", 0) == want
            and status.get("availableReplicas", 0) == want
            and status.get("observedGeneration", 0) >= d["metadata"].get("generation", 1))


def deployment_progressing(d: Obj, status: Obj) -> bool:
    old = d.get("status") or {}
    old_old = old.get("replicas", 0) - old.get("updatedReplicas", 0)
    new_old = status.get("replicas", 0) - status.get("updatedReplicas", 0)
    return (status.get("updatedReplicas", 0) > old.get("updatedReplicas", 0)
            or new_old < old_old
            or status.get("readyReplicas", 0) > old.get("readyReplicas", 0)
            or status.get("availableReplicas", 0) > old.get("availableReplicas", 0))


def progress_deadline_at(d: Obj, status: Obj) -> float | None:
    """When the Progressing condition times out, if it can."""
    if not has_progress_deadline(d):
        return None
    cond = get_condition(status, "Progressing")
    if cond is None or cond.get("reason") in (NEW_RS_AVAILABLE, TIMED_OUT):
        return None
    return parse_rfc3339(cond["lastUpdateTime"]) + d["spec"].get("progressDeadlineSeconds", 600)


def deployment_timed_out(d: Obj, status: Obj, now: float) -> bool:
    cond = get_condition(status, "Progressing")
    if not has_progress_deadline(d) or cond is None:
        return False
    if cond.get("reason") == TIMED_OUT:
        return True
    at = progress_deadline_at(d, status)
    return at is not None and at < now


def rollout_status(d: Obj, all_rss: Sequence[Obj | None], new_rs: Obj | None, now: float) -> Obj:
    """`syncRolloutStatus`'s new status: counts, Available, and Progressing moved along."""
    status = calculate_status(d, all_rss, new_rs, now)
    if not has_progress_deadline(d):
        remove_condition(status, "Progressing")
    current = get_condition(d.get("status") or {}, "Progressing")
    complete = (status.get("replicas") == status.get("updatedReplicas") and current is not None
                and current.get("reason") == NEW_RS_AVAILABLE)
    if has_progress_deadline(d) and not complete:
        subject = (f'ReplicaSet "{new_rs["metadata"]["name"]}"' if new_rs is not None
                   else f'Deployment "{d["metadata"]["name"]}"')
        if deployment_complete(d, status):
            set_condition(status, new_condition("Progressing", "True", NEW_RS_AVAILABLE,
                                                f"{subject} has successfully progressed.", now))
        elif deployment_progressing(d, status):
            cond = new_condition("Progressing", "True", RS_UPDATED, f"{subject} is progressing.",
                                 now)
            if current is not None:
                if current["status"] == "True":
                    cond["lastTransitionTime"] = current["lastTransitionTime"]
                remove_condition(status, "Progressing")
            set_condition(status, cond)
        elif deployment_timed_out(d, status, now):
            set_condition(status, new_condition("Progressing", "False", TIMED_OUT,
                                                f"{subject} has timed out progressing.", now))
    failure = next((get_condition(rs.get("status") or {}, "ReplicaFailure")
                    for rs in all_rss if rs is not None
                    and get_condition(rs.get("status") or {}, "ReplicaFailure")), None)
    if failure is not None:
        set_condition(status, {"type": "ReplicaFailure", "status": failure["status"],
                               "lastUpdateTime": rfc3339(now),
                               "lastTransitionTime": failure.get("lastTransitionTime",
                                                                 rfc3339(now)),
                               "reason": failure.get("reason", ""),
                               "message": failure.get("message", "")})
    else:
        remove_condition(status, "ReplicaFailure")
    return status
