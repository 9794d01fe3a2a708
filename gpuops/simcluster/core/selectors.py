"""Label and field selectors with the apiserver's grammar and error messages.

The label grammar is `gpuops.common.labels` (shared with the restart policy's filter); this
module answers its errors as 400 and adds what only an API server needs: LabelSelector
objects (`matchLabels` + `matchExpressions`) and the field selectors of each kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuops.common.labels import LabelSelectorError, Op, Requirement, labels_match
from gpuops.common.labels import parse_label_selector as _parse_labels

from .errors import bad_request

__all__ = ["FieldRequirement", "Requirement", "fields_match", "labels_match",
           "parse_field_selector", "parse_label_selector", "selecting_name",
           "selector_from_spec"]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """`gpuops.common.labels.parse_label_selector`, a bad selector answered as 400."""
    try:
        return _parse_labels(text)
    except LabelSelectorError as e:
        raise bad_request(str(e)) from e


def selector_from_spec(selector: dict[str, Any] | None) -> list[Requirement]:
    """A LabelSelector object (matchLabels + matchExpressions) as requirements."""
    if not selector:
        return []
    reqs = [Requirement(k, "=", frozenset([v])) for k, v in (selector.get("matchLabels") or {}).items()]
    ops: dict[str, Op] = {"In": "in", "NotIn": "notin", "Exists": "exists",
                          "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append(Requirement(expr["key"], ops[expr["operator"]],
                                frozenset(expr.get("values") or ())))
    return reqs


# --- field selectors -------------------------------------------------------------------------

def _path(*keys: str) -> Callable[[dict], str]:
    def get(obj: dict) -> str:
        cur: Any = obj
        for k in keys:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(k)
        return "" if cur is None else str(cur)
    return get


_COMMON_FIELDS = {"metadata.name": _path("metadata", "name"),
                  "metadata.namespace": _path("metadata", "namespace")}
_FIELDS_BY_KIND: dict[str, dict[str, Callable[[dict], str]]] = {
    "Pod": {"spec.nodeName": _path("spec", "nodeName"), "status.phase": _path("status", "phase"),
            "spec.schedulerName": _path("spec", "schedulerName"),
            "spec.restartPolicy": _path("spec", "restartPolicy"),
            "status.podIP": _path("status", "podIP")},
    "Event": {f"involvedObject.{f}": _path("involvedObject", f)
              for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion",
                        "fieldPath")} | {"reason": _path("reason"), "type": _path("type"),
                                         "source": _path("source", "component"),
                                         "regarding.name": _path("regarding", "name"),
                                         "regarding.kind": _path("regarding", "kind"),
                                         "regarding.namespace": _path("regarding", "namespace")},
    "Node": {"spec.unschedulable": _path("spec", "unschedulable")},
    "Secret": {"type": _path("type")},
    "Namespace": {"status.phase": _path("status", "phase")},
    "Job": {"status.successful": _path("status", "succeeded")},
    "ReplicaSet": {"status.replicas": _path("status", "replicas")},
}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str
    getter: Callable[[dict], str]

    def matches(self, obj: dict) -> bool:
        actual = self.getter(obj)
        if self.field == "spec.unschedulable" and actual == "":
            actual = "false"
        if actual in ("True", "False"):
            actual = actual.lower()
        return (actual == self.value) == (self.op == "=")


def parse_field_selector(text: str | None, kind: str) -> list[FieldRequirement]:
    if not text:
        return []
    fields = _COMMON_FIELDS | _FIELDS_BY_KIND.get(kind, {})
    reqs = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([^!=]+?)\s*(!=|==|=)\s*(.*)", part)
        if not m:
            raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
        name, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if name not in fields:
            raise bad_request(f'field label not supported: {name}')
        reqs.append(FieldRequirement(name, "!=" if op == "!=" else "=", value, fields[name]))
    return reqs


def selecting_name(name: str) -> FieldRequirement:
    """`metadata.name=<name>`: what a watch of one object by its URL selects."""
    return FieldRequirement("metadata.name", "=", name, _COMMON_FIELDS["metadata.name"])


def fields_match(reqs: list[FieldRequirement], obj: dict) -> bool:
    return all(r.matches(obj) for r in reqs)
