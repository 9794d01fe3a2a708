"""Objects walked with their schema, as structured-merge-diff's typed values: the set of
fields an object (an applied configuration) holds, what changed between two objects, the
merge of an applied configuration into the live object, and the removal of a set's fields.

Absent and null differ: `MISSING` is a field that is not there, None a field set to null.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .fieldset import PE, FieldSet, Path, field, path_string
from .schema import Atom, Schema, TypedError, Types

Obj = dict[str, Any]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def same(a: Any, b: Any) -> bool:
    """JSON equality that tells `true` from `1`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(
            same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b if a is None or b is None else a == b


# --- the set of an object ----------------------------------------------------------------------

def to_set(types: Types, obj: Any, *, strict: bool = False) -> FieldSet:
    """Every field `obj` sets, as an applier owns them: leaves, atomic maps and lists, the
    items of granular lists, elements of maps, and fields set to null or `{}`. `strict`
    (an applied configuration): a field its struct does not declare, or a duplicate list
    item, is a TypedError."""
    out = FieldSet()
    errors: list[str] = []
    _to_set(types, types.root, obj, (), out, strict, errors)
    if errors:
        raise TypedError(errors[0] if len(errors) == 1 else
                         "errors:\n  " + "\n  ".join(errors))
    return out


def _to_set(t: Types, schema: Schema | None, v: Any, path: Path, out: FieldSet,
            strict: bool, errors: list[str]) -> None:
    if v is None:
        return  # (the parent owns a null field)
    a = t.atom(schema, v)
    if a.kind == "scalar" or a.atomic or not isinstance(v, list | dict) or (
            a.kind == "list") != isinstance(v, list):
        if path:
            out.insert(path)
        return
    if isinstance(v, list):
        elements = _elements(t, a, v, path, errors)
        seen: set[PE] = set()
        dups: set[PE] = set()
        for pe in elements:
            (dups if pe in seen else seen).add(pe)
        if dups and strict:
            errors.extend(f"{path_string(path)}: duplicate entries for key "
                          f"{pe.label()}" for pe in sorted(dups))
        for pe in dups:
            out.insert((*path, pe))
        for pe, item in zip(elements, v, strict=True):
            if pe in dups:
                continue
            _to_set(t, a.elements, item, (*path, pe), out, strict, errors)
            out.insert((*path, pe))
        return
    for k, child in v.items():
        declared = t.declares(a, k)
        p = (*path, field(k))
        if strict and not declared and a.fields is not None and a.elements is None:
            errors.append(f"{path_string(p)}: field not declared in schema")
            continue
        _to_set(t, t.field_schema(a, k), child, p, out, strict, errors)
        if child is None or child == {} or not declared:
            out.insert(p)


def _elements(t: Types, a: Atom, items: list[Any], path: Path, errors: list[str]) -> list[PE]:
    try:
        return [t.item_element(a, item) for item in items]
    except TypedError as e:
        raise TypedError(f"{path_string(path)}: {e}") from None


# --- the difference of two objects ---------------------------------------------------------

@dataclass
class Comparison:
    added: FieldSet
    modified: FieldSet
    removed: FieldSet

    def changed(self) -> FieldSet:
        return self.modified.union(self.added)


def compare(types: Types, old: Any, new: Any) -> Comparison:
    """The fields `new` adds to `old`, modifies and removes. A granular map or list added or
    removed whole is in the set itself, besides its fields."""
    c = Comparison(FieldSet(), FieldSet(), FieldSet())
    _compare(types, types.root, old, new, (), c)
    return c


def _compare(t: Types, schema: Schema | None, lhs: Any, rhs: Any, path: Path,
             c: Comparison) -> None:
    a = t.atom(schema, rhs if rhs not in (MISSING, None) else lhs)

    def leaf() -> None:
        if not path:
            return
        if lhs is MISSING:
            c.added.insert(path)
        elif rhs is MISSING:
            c.removed.insert(path)
        elif not same(lhs, rhs):
            c.modified.insert(path)

    kind = list if a.kind == "list" else dict if a.kind == "map" else None
    if kind is None or a.atomic or not all(
            v is MISSING or v is None or isinstance(v, kind) for v in (lhs, rhs)) or (
            not _value(lhs) and not _value(rhs)):
        leaf()
        return
    if kind is list:
        _compare_lists(t, a, _value(lhs) or [], _value(rhs) or [], path, c)
    else:
        old, new = _value(lhs) or {}, _value(rhs) or {}
        for k in {**old, **new}:
            _compare(t, t.field_schema(a, k), old.get(k, MISSING), new.get(k, MISSING),
                     (*path, field(k)), c)
    if path and lhs is MISSING:
        c.added.insert(path)
    elif path and rhs is MISSING:
        c.removed.insert(path)


def _value(v: Any) -> Any:
    return None if v is MISSING else v


def _compare_lists(t: Types, a: Atom, lhs: list[Any], rhs: list[Any], path: Path, c: Comparison) -> None:
    left: dict[PE, list[Any]] = {}
    right: dict[PE, list[Any]] = {}
    for items, index in ((lhs, left), (rhs, right)):
        for pe, item in zip(_elements(t, a, items, path, []), items, strict=True):
            index.setdefault(pe, []).append(item)
    for pe in {**left, **right}:
        ls, rs = left.get(pe, []), right.get(pe, [])
        where = (*path, pe)
        if len(ls) <= 1 and len(rs) <= 1:
            _compare(t, a.elements, ls[0] if ls else MISSING, rs[0] if rs else MISSING,
                     where, c)
        elif len(ls) >= 2 and len(rs) >= 2:
            if not same(ls, rs):
                c.modified.insert(where)
        elif len(ls) >= 2:  # duplicates no longer
            if rs:
                _compare(t, a.elements, MISSING, rs[0], where, c)
            c.removed.insert(where)
        else:  # new duplicates
            if ls:
                _compare(t, a.elements, ls[0], MISSING, where, c)
            c.added.insert(where)


# --- merging an applied configuration ------------------------------------------------------

def merge(types: Types, live: Any, config: Any) -> Any:
    """`config` merged into `live`: the configuration's leaves win, granular maps and lists
    merge field by field and item by item (the configuration's order for the items it names,
    the others where they were). Neither is changed."""
    return _merge(types, types.root, live, config)


def _merge(t: Types, schema: Schema | None, lhs: Any, rhs: Any) -> Any:
    if rhs is MISSING:
        return lhs
    if lhs is MISSING:
        return copy.deepcopy(rhs)
    a = t.atom(schema, rhs if rhs is not None else lhs)
    if a.atomic or a.kind == "scalar":
        return copy.deepcopy(rhs)
    if a.kind == "list":
        if not isinstance(lhs, list) or not isinstance(rhs, list) or not (lhs or rhs):
            return copy.deepcopy(rhs)
        return _merge_lists(t, a, lhs, rhs)
    if not isinstance(lhs, dict) or not isinstance(rhs, dict) or not (lhs or rhs):
        return copy.deepcopy(rhs)
    return {k: _merge(t, t.field_schema(a, k), lhs.get(k, MISSING), rhs.get(k, MISSING))
            for k in {**lhs, **rhs}}


def _merge_lists(t: Types, a: Atom, lhs: list[Any], rhs: list[Any]) -> list[Any]:
    rpes = _elements(t, a, rhs, (), [])
    lpes = _elements(t, a, lhs, (), [])
    right = dict(zip(rpes, rhs, strict=True))
    left: dict[PE, Any] = {}
    for pe, item in zip(lpes, lhs, strict=True):
        left[pe] = MISSING if pe in left else item  # a duplicate merges with nothing
    shared = iter([pe for pe in rpes if pe in left])
    next_shared = next(shared, None)
    merged: set[PE] = set()
    out: list[Any] = []
    li = ri = 0
    # structured-merge-diff's walk: shared items in the configuration's order, the live
    # list's own items kept where they stood among them.
    while li < len(lpes) or ri < len(rpes):
        if li < len(lpes) and ri < len(rpes):
            pe = lpes[li]
            if pe == rpes[ri]:
                merged.add(pe)
                out.append(_merge(t, a.elements, left[pe], right[pe]))
                li, ri = li + 1, ri + 1
                next_shared = next(shared, None)
                continue
            if pe in right and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(lpes):
            pe = lpes[li]
            if pe not in right:
                out.append(copy.deepcopy(lhs[li]))
                li += 1
                continue
            if pe in merged:
                li += 1
        if ri < len(rpes):
            pe = rpes[ri]
            merged.add(pe)
            out.append(_merge(t, a.elements, left.get(pe, MISSING), right[pe]))
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = next(shared, None)
    return out


# --- removing fields -----------------------------------------------------------------------

def remove(types: Types, obj: Any, fields: FieldSet) -> Any:
    """`obj` without the fields of `fields` (a member goes with everything below it); a map
    or list left empty by it goes too."""
    out = _remove(types, types.root, obj, fields)
    return {} if out is MISSING else out


def _remove(t: Types, schema: Schema | None, v: Any, s: FieldSet) -> Any:
    a = t.atom(schema, v)
    if a.atomic or not v or not isinstance(v, list | dict):
        return v
    if isinstance(v, list):
        if a.kind != "list":
            return v
        items = []
        for pe, item in zip(_elements(t, a, v, (), []), v, strict=True):
            if pe in s.members:
                continue
            below = s.child(pe)
            if not below.empty():
                item = _remove(t, a.elements, item, below)
                if item is MISSING:
                    continue
            items.append(item)
        return items or MISSING
    if a.kind != "map":
        return v
    out = {}
    for k, child in v.items():
        pe = field(k)
        if pe in s.members:
            continue
        below = s.child(pe)
        if not below.empty():
            child = _remove(t, t.field_schema(a, k), child, below)
            if child is MISSING:
                continue
        out[k] = child
    return out or MISSING


def with_named_fields(types: Types, s: FieldSet) -> FieldSet:
    """`s` with every struct field that has fields of its own below it made a member too
    (structured-merge-diff's EnsureNamedFieldsAreMembers: owning `spec.replicas` is owning
    the field `spec`, not a map element)."""
    return _named(types, types.root, s)


def _named(t: Types, schema: Schema | None, s: FieldSet) -> FieldSet:
    a = t.atom(schema)
    out = FieldSet()
    out.members = set(s.members)
    for pe, below in s.children.items():
        if pe.order == 0:
            name = pe.text[2:]
            if t.declares(a, name):
                out.members.add(pe)
            sub = t.field_schema(a, name) if a.kind == "map" else None
        else:
            sub = a.elements if a.kind == "list" else None
        out.children[pe] = _named(t, sub, below)
    return out
