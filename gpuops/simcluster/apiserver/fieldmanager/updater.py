"""Who owns which field after a write, as kube-apiserver's field manager decides it.

An update (create, PUT, a merge/JSON/strategic patch) takes the fields it adds or changes from
whoever owned them, and nobody owns what it removes. An apply merges the configuration into
the live object, owns exactly the configuration's fields, refuses (a conflict) to change a
field another manager owns unless forced, and removes what it applied last time and applies
no more, unless another manager owns it too. Metadata kube sets itself (name, uid,
resourceVersion...) and the fields the endpoint resets (status through the main resource) are
nobody's. An object no one tracked yet gets its fields owned by `before-first-apply` at its
first apply; more than ten updaters are folded, oldest first, into `ancient-changes`.

`now` is a parameter (an RFC 3339 time); nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import fieldset
from .entries import APPLY, UPDATE, Managed, ManagerId, Owned
from .fieldset import FieldSet, Path, field
from .schema import Types
from .typed import MISSING, Comparison, compare, merge, remove, same, to_set, with_named_fields

Obj = dict[str, Any]

MAX_UPDATE_MANAGERS = 10
_CURRENT = ManagerId("current-operation", UPDATE)
_STRIPPED = FieldSet.of(
    (field("apiVersion"),), (field("kind"),), (field("metadata"),),
    *((field("metadata"), field(f)) for f in (
        "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName",
        "generation", "managedFields", "resourceVersion")))


@dataclass(frozen=True)
class Conflict:
    manager: ManagerId
    path: Path


class Conflicts(Exception):
    """An apply would change fields other managers own."""

    def __init__(self, conflicts: list[Conflict]) -> None:
        self.conflicts = conflicts
        super().__init__(self.message())

    def message(self) -> str:
        """kube-apiserver's message for it."""
        cs = self.conflicts
        if len(cs) == 1:
            return (f"Apply failed with 1 conflict: conflict with {cs[0].manager.describe()}: "
                    f"{fieldset.path_string(cs[0].path)}")
        lines = []
        for who in sorted({c.manager for c in cs}):
            lines.append(f"conflicts with {who.describe()}:")
            lines.extend(f"- {fieldset.path_string(c.path)}" for c in cs if c.manager == who)
        return f"Apply failed with {len(cs)} conflicts: " + "\n".join(lines)

    def causes(self) -> list[dict[str, str]]:
        return [{"type": "FieldManagerConflict",
                 "message": f"conflict with {c.manager.describe()}",
                 "field": fieldset.path_string(c.path)} for c in self.conflicts]


def empty_like(obj: Obj) -> Obj:
    """The object a create starts from: kube's empty Go object, whose struct (not pointer)
    fields are there, empty (so a create owns `spec.replicas`, not `spec` itself)."""
    out: Obj = {"metadata": {}}
    spec = obj.get("spec")
    if isinstance(spec, dict):
        out["spec"] = {"containers": None} if "containers" in spec else {}
        if isinstance(spec.get("template"), dict):
            out["spec"]["template"] = {"metadata": {}, "spec": {"containers": None}}
    if "status" in obj:
        out["status"] = {}
    return out


def update(types: Types, live: Obj, new: Obj, managed: Managed, manager: str, *,
           api_version: str, subresource: str = "", reset: FieldSet | None = None,
           now: str, start_tracking: bool = False) -> Managed:
    """Ownership after a write of `new` over `live` (both without managedFields) by
    `manager`. An object nobody tracks stays untracked unless `start_tracking` (a create)."""
    if not managed.fields and not start_tracking:
        return managed
    reset = reset or FieldSet()
    me = ManagerId(manager or "unknown", UPDATE, api_version, subresource)
    fields, c = _update(types, live, new, dict(managed.fields), _CURRENT, force=True,
                        reset=reset)
    mine = fields.get(_CURRENT)
    own = (mine.fields if mine else FieldSet()).difference(c.removed).union(
        c.modified).union(c.added).recursive_difference(reset).difference(_STRIPPED)
    fields.pop(_CURRENT, None)
    times = dict(managed.times)
    if not own.empty():
        before = fields.get(me)
        fields[me] = Owned(own.union(before.fields) if before else own, api_version, False)
        times[me] = now
    return _cap(Managed(fields, {k: v for k, v in times.items() if k in fields}))


def apply(types: Types, live: Obj, config: Obj, managed: Managed, manager: str, *,
          api_version: str, subresource: str = "", force: bool = False,
          reset: FieldSet | None = None, now: str) -> tuple[Obj | None, Managed]:
    """(the object after applying `config` to `live`, or None when it would not change;
    the ownership after it). Conflicts when it would change others' fields, unless `force`.
    `live` is `empty_like(config)` for an object that does not exist yet."""
    reset = reset or FieldSet()
    if not managed.fields:
        managed = update(types, empty_like(live), live, managed, "before-first-apply",
                         api_version=api_version, now=now, start_tracking=True)
    me = ManagerId(manager, APPLY, "", subresource)
    fields = dict(managed.fields)
    last = fields.get(me)
    merged = _without_nulls(merge(types, live, config))
    applied = to_set(types, config, strict=True).recursive_difference(reset)
    fields[me] = Owned(applied, api_version, True)
    merged = _prune(types, merged, fields, last)
    fields, _ = _update(types, live, merged, fields, me, force=force, reset=reset)
    if me in fields:
        own = fields[me].fields.difference(_STRIPPED)
        if own.empty():
            del fields[me]
        else:
            fields[me] = Owned(own, api_version, True)
    times = {k: v for k, v in managed.times.items() if k in fields}
    changed = not same(live, merged)
    if changed and me in fields:
        times[me] = now
    return (merged if changed else None), Managed(fields, times)


def _update(types: Types, old: Any, new: Any, fields: dict[ManagerId, Owned], me: ManagerId,
            *, force: bool, reset: FieldSet) -> tuple[dict[ManagerId, Owned], Comparison]:
    """structured-merge-diff's update: others lose what the write changes (a conflict
    unless `force`) and what it removes."""
    c = compare(types, old, new)
    c = Comparison(c.added.recursive_difference(reset), c.modified.recursive_difference(reset),
                   c.removed.recursive_difference(reset))
    changed = c.changed()
    taken: dict[ManagerId, FieldSet] = {}
    for who, owned in fields.items():
        if who == me:
            continue
        overlap = owned.fields.intersection(changed)
        if not overlap.empty():
            taken[who] = overlap
    if taken and not force:
        raise Conflicts([Conflict(who, path) for who in sorted(taken)
                         for path in taken[who].paths()])
    out: dict[ManagerId, Owned] = {}
    for who, owned in fields.items():
        s = owned.fields
        if who in taken:
            s = s.difference(taken[who])
        if who != me and not c.removed.empty():
            s = s.difference(c.removed)
        if not s.empty():
            out[who] = Owned(s, owned.api_version, owned.applied)
    return out, c


def _prune(types: Types, merged: Obj, fields: dict[ManagerId, Owned],
           last: Owned | None) -> Obj:
    """`merged` without what the applier applied last time and no more, unless some manager
    (the applier included) still owns it (structured-merge-diff's prune, add back owned
    items, add back dangling items)."""
    if last is None or last.fields.empty():
        return merged

    def named(s: FieldSet) -> FieldSet:
        return with_named_fields(types, s)

    was = named(last.fields)
    owned = FieldSet()
    for o in fields.values():
        owned = owned.union(o.fields)
    pruned = remove(types, merged, was)
    merged_set = named(to_set(types, merged))
    pruned = remove(types, merged, merged_set.difference(
        named(to_set(types, pruned)).union(named(owned))))
    kept: Obj = remove(types, merged, merged_set.difference(
        named(to_set(types, pruned))).intersection(was))
    return kept


def _cap(managed: Managed) -> Managed:
    """At most MAX_UPDATE_MANAGERS updaters: the oldest fold into `ancient-changes`, one per
    apiVersion."""
    updaters = [who for who, o in managed.fields.items() if not o.applied]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return managed
    out = managed.copy()
    updaters.sort(key=lambda who: (managed.times.get(who) or "", who))
    first_of: dict[str, ManagerId] = {}
    count = len(updaters)
    for who in updaters:
        if count <= MAX_UPDATE_MANAGERS:
            break
        owned = out.fields[who]
        version = owned.api_version
        bucket = ManagerId("ancient-changes", UPDATE, version)
        if version not in first_of:
            first_of[version] = who
            continue
        if bucket not in out.fields:
            first = first_of[version]
            out.fields[bucket] = out.fields.pop(first)
            out.times.pop(first, None)
        out.fields[bucket] = Owned(owned.fields.union(out.fields[bucket].fields), version,
                                   False)
        out.times[bucket] = managed.times.get(who)
        del out.fields[who]
        out.times.pop(who, None)
        count -= 1
    return out


def _without_nulls(obj: Any) -> Any:
    """An applied `field: null` leaves the field out, as decoding into a Go type does."""
    if isinstance(obj, dict):
        return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_without_nulls(v) for v in obj]
    return obj


__all__ = ["MISSING", "Conflict", "Conflicts", "apply", "empty_like", "update"]
