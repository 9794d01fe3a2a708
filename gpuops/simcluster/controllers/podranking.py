"""Which pods a controller deletes first when it scales down: `controller.ActivePodsWithRanks`.

The order, from first-deleted: unscheduled before scheduled; Pending < Unknown < Running; not
Ready before Ready; lower `controller.kubernetes.io/pod-deletion-cost` first; more pods of the
same workload on its node first; Ready for less time first (log2 buckets); more restarts first;
newer first (log2 buckets) — kube's LogarithmicScaleDown ordering.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ..core.podstate import creation_time, is_active, is_ready, max_restarts, phase, ready_since

Obj = dict[str, Any]

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


def _deletion_cost(pod: Obj) -> int:
    raw = (pod["metadata"].get("annotations") or {}).get(DELETION_COST)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def _log_rank(ts: float, now: float) -> int:
    age_ns = (now - ts) * 1e9
    return int(math.log2(age_ns)) if age_ns > 0 else -1


def _newer_first(a: float | None, b: float | None, uid_a: str, uid_b: str,
                 now: float | None) -> int:
    """For two different times: negative when `a` goes first (missing or more recent);
    with `now`, times in the same log2 age bucket tie and the smaller uid goes first."""
    if a is None or b is None or not a or not b:
        return -1 if not a else 1
    if now is None:
        return -1 if a > b else 1
    diff = _log_rank(a, now) - _log_rank(b, now)
    if diff == 0:
        return -1 if uid_a < uid_b else 1
    return diff


def _less(a: Obj, b: Obj, rank_a: int, rank_b: int, now: float | None) -> int:
    node_a, node_b = a.get("spec", {}).get("nodeName") or "", b.get("spec", {}).get(
        "nodeName") or ""
    if node_a != node_b and (not node_a or not node_b):
        return -1 if not node_a else 1
    pa, pb = _PHASE_ORDINAL.get(phase(a), 0), _PHASE_ORDINAL.get(phase(b), 0)
    if pa != pb:
        return pa - pb
    ra, rb = is_ready(a), is_ready(b)
    if ra != rb:
        return -1 if not ra else 1
    ca, cb = _deletion_cost(a), _deletion_cost(b)
    if ca != cb:
        return -1 if ca < cb else 1
    if rank_a != rank_b:
        return -1 if rank_a > rank_b else 1
    uid_a, uid_b = a["metadata"].get("uid", ""), b["metadata"].get("uid", "")
    if ra and rb:
        since_a, since_b = ready_since(a), ready_since(b)
        if since_a != since_b:
            return _newer_first(since_a, since_b, uid_a, uid_b, now)
    restarts_a, restarts_b = max_restarts(a), max_restarts(b)
    if restarts_a != restarts_b:
        return -1 if restarts_a > restarts_b else 1
    created_a, created_b = creation_time(a), creation_time(b)
    if created_a != created_b:
        return _newer_first(created_a, created_b, uid_a, uid_b, now)
    return 0


def rank_for_deletion(pods: list[Obj], related: list[Obj] | None = None, *,
                      now: float | None = None) -> list[Obj]:
    """`pods` ordered first-to-delete first. `related`: the pods of the whole workload
    (all its ReplicaSets), used to prefer pods doubled up on a node; `now` turns on the
    logarithmic buckets. Without both it is the Job controller's plain `ActivePods` order."""
    per_node: dict[str, int] = {}
    for pod in related or ():
        if is_active(pod):
            node = pod.get("spec", {}).get("nodeName") or ""
            per_node[node] = per_node.get(node, 0) + 1
    ranks = {id(p): per_node.get(p.get("spec", {}).get("nodeName") or "", 0) for p in pods}

    def compare(a: Obj, b: Obj) -> int:
        return _less(a, b, ranks[id(a)], ranks[id(b)], now)

    return sorted(pods, key=functools.cmp_to_key(compare))
