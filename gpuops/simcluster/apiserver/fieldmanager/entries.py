"""`metadata.managedFields` and the ownership it records, as kube-apiserver encodes it.

An entry is one manager's fields: who (`manager`), how (`operation` Apply or Update), the
`apiVersion` its field set is in, when (`time`), an optional `subresource` and the set itself
(`fieldsType: FieldsV1`, `fieldsV1`). A manager is identified by name, operation and
subresource, and for an updater also by apiVersion: an applier keeps one entry across
versions, an updater has one per version it wrote. Entries are listed appliers first, then by
time, name, apiVersion and subresource.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .fieldset import FieldSet, FieldsV1Error

APPLY, UPDATE = "Apply", "Update"


@dataclass(frozen=True, order=True)
class ManagerId:
    manager: str
    operation: str
    api_version: str = ""  # an updater's; an applier's is its set's
    subresource: str = ""

    def describe(self) -> str:
        """As kube's conflict messages name a manager."""
        text = _quote(self.manager)
        if self.subresource:
            text += f" with subresource {_quote(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


@dataclass(frozen=True)
class Owned:
    """A manager's fields, the apiVersion they are in, and whether it applied them."""
    fields: FieldSet
    api_version: str
    applied: bool


@dataclass
class Managed:
    fields: dict[ManagerId, Owned] = field(default_factory=dict)
    times: dict[ManagerId, str | None] = field(default_factory=dict)

    def copy(self) -> Managed:
        return Managed(dict(self.fields), dict(self.times))


def manager_id(entry: dict[str, Any]) -> ManagerId:
    op = entry.get("operation", "")
    return ManagerId(entry.get("manager") or "", op,
                     "" if op == APPLY else entry.get("apiVersion") or "",
                     entry.get("subresource") or "")


def decode(entries: Any) -> Managed:
    """The ownership `entries` record; FieldsV1Error (kube's message) for an entry it
    would refuse."""
    if entries is None:
        return Managed()
    if not isinstance(entries, list):
        raise FieldsV1Error("managedFields must be a list")
    managed = Managed()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise FieldsV1Error(f"managed fields entry {i} must be an object")
        if entry.get("operation") not in (APPLY, UPDATE):
            raise FieldsV1Error("operation must be `Apply` or `Update`")
        if not entry.get("apiVersion"):
            raise FieldsV1Error("apiVersion must not be empty")
        kind = entry.get("fieldsType")
        if not kind:
            raise FieldsV1Error(f"missing fieldsType in managed fields entry {i}")
        if kind != "FieldsV1":
            raise FieldsV1Error(f"invalid fieldsType {kind!r} in managed fields entry {i}")
        who = manager_id(entry)
        fields = FieldSet.from_fields_v1(entry.get("fieldsV1") or {})
        managed.fields[who] = Owned(fields, entry["apiVersion"], entry["operation"] == APPLY)
        managed.times[who] = entry.get("time")
    return managed


def encode(managed: Managed) -> list[dict[str, Any]] | None:
    """The entries, in kube's order; None when nobody manages anything."""
    if not managed.fields:
        return None
    out = []
    for who, owned in managed.fields.items():
        entry: dict[str, Any] = {"manager": who.manager,
                                 "operation": APPLY if owned.applied else who.operation,
                                 "apiVersion": owned.api_version}
        when = managed.times.get(who)
        if when:
            entry["time"] = when
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = owned.fields.to_fields_v1()
        if who.subresource:
            entry["subresource"] = who.subresource
        out.append(entry)
    out.sort(key=lambda e: (e["operation"], _seconds(e.get("time")), e["manager"],
                            e["apiVersion"], e.get("subresource", "")))
    return out


def is_reset(entries: Any) -> bool:
    """Whether a write's managedFields ask to forget every owner (`[]` or `[{}]`)."""
    return isinstance(entries, list) and (not entries or entries == [{}])


def without_times(entries: Any) -> Any:
    if not isinstance(entries, list):
        return entries
    return [{k: v for k, v in e.items() if k != "time"} if isinstance(e, dict) else e
            for e in entries]


def _seconds(when: str | None) -> float:
    if not when:
        return 0.0
    try:
        return int(datetime.fromisoformat(when).timestamp())
    except ValueError:
        return 0.0


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
