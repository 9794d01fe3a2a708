"""Would a node with these labels and taints take this pod? kube-scheduler's filters that do
not depend on free resources, read one way for every feature (pure).

The rebalance planner asks it of the cluster's nodes (through its typed model,
`tasks/rebalance/model.py`); capacity asks it of the nodes a pool would add, to know which
pool to raise for a pod that fits no node (`tasks/capacity/pending.py`). The rules, as
kube-scheduler's NodeAffinity and TaintToleration plugins have them:

- `nodeSelector`: every key equal;
- required node affinity: any term, each term all of its requirements (`In`, `NotIn`,
  `Exists`, `DoesNotExist`, `Gt`, `Lt`; `matchFields` on `metadata.name` compares the node's
  name, given as the label `metadata.name` when known);
- taints: every `NoSchedule` and `NoExecute` taint tolerated (`PreferNoSchedule` only
  scores). A toleration with an empty key and `Exists` tolerates every taint; an empty
  effect matches every effect.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

NAME_FIELD = "metadata.name"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def requirement_matches(key: str, operator: str, values: Collection[str],
                        labels: Mapping[str, str]) -> bool:
    """One node-selector requirement against a node's labels."""
    value = labels.get(key)
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    try:  # Gt / Lt compare integers; a label that is not one does not match
        first = int(next(iter(values)))
        return value is not None and (int(value) > first if operator == "Gt"
                                      else int(value) < first)
    except (ValueError, StopIteration):
        return False


def tolerates(key: str, operator: str, value: str, effect: str, taint_key: str,
              taint_value: str, taint_effect: str) -> bool:
    """A toleration (its fields) against a taint (its fields)."""
    if effect and effect != taint_effect:
        return False
    if operator == "Exists":
        return not key or key == taint_key
    return key == taint_key and value == taint_value


def node_admits(labels: Mapping[str, str], taints: Sequence[Mapping[str, Any]],
                pod_spec: Mapping[str, Any]) -> str | None:
    """Why a node with `labels` and `taints` (the API's shape) cannot take a pod of
    `pod_spec` whatever its free resources, or None if it can."""
    for key, want in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != want:
            return f"node selector {key}={want} does not match"
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(
            all(requirement_matches(e["key"], e["operator"], e.get("values") or (), labels)
                for e in (term.get("matchExpressions") or []) + (term.get("matchFields")
                                                                  or []))
            for term in terms):
        return "required node affinity does not match"
    tolerations = pod_spec.get("tolerations") or []
    for taint in taints:
        effect = taint.get("effect") or "NoSchedule"
        if effect in BLOCKING_EFFECTS and not any(
                tolerates(t.get("key") or "", t.get("operator") or "Equal",
                          t.get("value") or "", t.get("effect") or "", taint.get("key") or "",
                          taint.get("value") or "", effect) for t in tolerations):
            return f"taint {taint.get('key')}={taint.get('value') or ''}:{effect} is not " \
                   "tolerated"
    return None
