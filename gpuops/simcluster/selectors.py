"""Label and field selectors with the apiserver's grammar and error messages."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|[^\s!=(),]+)")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op == "=":
            return present and labels[self.key] in self.values
        if self.op == "!=":
            return not present or labels[self.key] not in self.values
        if self.op == "in":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # notin


def parse_label_selector(text: str | None) -> list[Requirement]:
    if not text:
        return []
    tokens = _TOKEN.findall(text)
    reqs: list[Requirement] = []
    i = 0

    def fail(msg: str) -> Exception:
        return bad_request(f"unable to parse requirement: {msg} in label selector {text!r}")

    while i < len(tokens):
        tok = tokens[i]
        if tok == "!":
            if i + 1 >= len(tokens):
                raise fail("missing key after '!'")
            reqs.append(Requirement(tokens[i + 1], "!exists"))
            i += 2
        else:
            key = tok
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
                i += 1
            elif nxt in ("=", "==", "!="):
                if i + 2 >= len(tokens) or tokens[i + 2] == ",":
                    value = ""
                    i += 2
                else:
                    value = tokens[i + 2]
                    i += 3
                reqs.append(Requirement(key, "!=" if nxt == "!=" else "=", frozenset([value])))
            elif nxt in ("in", "notin"):
                if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                    raise fail(f"expected '(' after {nxt!r}")
                j = i + 3
                values: list[str] = []
                while j < len(tokens) and tokens[j] != ")":
                    if tokens[j] != ",":
                        values.append(tokens[j])
                    j += 1
                if j >= len(tokens):
                    raise fail("missing ')'")
                reqs.append(Requirement(key, nxt, frozenset(values)))
                i = j + 1
            else:
                raise fail(f"unexpected {nxt!r} after key {key!r}")
        if i < len(tokens):
            if tokens[i] != ",":
                raise fail(f"expected ',' but found {tokens[i]!r}")
            i += 1
    return reqs


def labels_match(reqs: list[Requirement], labels: dict[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in reqs)


def selector_from_spec(selector: dict[str, Any] | None) -> list[Requirement]:
    """A LabelSelector object (matchLabels + matchExpressions) as requirements."""
    if not selector:
        return []
    reqs = [Requirement(k, "=", frozenset([v])) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
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


def fields_match(reqs: list[FieldRequirement], obj: dict) -> bool:
    return all(r.matches(obj) for r in reqs)
