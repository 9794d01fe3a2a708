"""Whether a pod template selects a node and tolerates its taints, on plain objects.

What kube's component-helpers give the controllers that decide placement themselves (the
DaemonSet controller's `nodeShouldRunDaemonPod`): nodeSelector, required node affinity
(matchExpressions on labels, matchFields on `metadata.name`; terms ORed, requirements ANDed,
an empty term selects nothing) and the toleration rule. The scheduler has its own, compiled
once per pod for speed (`scheduler/filters.py`); both follow the same API semantics.
"""

from __future__ import annotations

from typing import Any

from .nodes import toleration_matches

Obj = dict[str, Any]


def _requirement_matches(req: Obj, values_of: dict[str, str]) -> bool:
    key, op = req.get("key", ""), req.get("operator", "")
    values = [str(v) for v in req.get("values") or ()]
    present = key in values_of
    if op == "In":
        return present and values_of[key] in values
    if op == "NotIn":
        return not present or values_of[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: Obj, node: Obj) -> bool:
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    name = {"metadata.name": node["metadata"]["name"]}
    return (all(_requirement_matches(r, labels) for r in expressions)
            and all(r.get("key") == "metadata.name" and _requirement_matches(r, name)
                    for r in fields))


def selects_node(spec: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity of a pod spec, against a node."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != str(v) for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(term_matches(t, node) for t in required.get("nodeSelectorTerms") or ())


def untolerated_taints(spec: Obj, node: Obj, effects: tuple[str, ...]) -> list[Obj]:
    """The node's taints with one of `effects` that no toleration of the spec tolerates."""
    tolerations = spec.get("tolerations") or []
    return [t for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in effects
            and not any(toleration_matches(tol, t) for tol in tolerations)]
