"""Sets of field paths, as structured-merge-diff's `fieldpath.Set`, and their FieldsV1 form.

A path is a tuple of path elements: a field of a map (`f:name`), an item of a keyed list
(`k:{"name":"app"}`), a value of a set (`v:"finalizer"`) or an index (`i:0`). A set is a
trie: the elements that are members at this level and the child sets below others. FieldsV1
writes it as nested JSON objects keyed by the elements' text; an element that is both a member
and has children holds `".": {}`. Elements are ordered as structured-merge-diff orders them
(fields, then keys, then values, then indices; values numbers < strings < bools < lists <
maps < null), so the JSON comes out in kube-apiserver's order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple


class FieldsV1Error(ValueError):
    """A FieldsV1 document (or a managedFields entry) kube would not read."""


class UnknownElement(FieldsV1Error):
    """A path element of a type this version does not know (kube drops those)."""


class PE(NamedTuple):
    """One path element. `order` and `sort` order it; `text` is its FieldsV1 key."""
    order: int  # 0 field, 1 key, 2 value, 3 index
    sort: Any
    text: str

    def label(self) -> str:
        """As a conflict message writes it: `.image`, `[name="app"]`, `[="x"]`, `[0]`."""
        if self.order == 0:
            return "." + self.text[2:]
        if self.order == 1:
            fields = json.loads(self.text[2:])
            return "[" + ",".join(f"{k}={_go_string(v)}" for k, v in fields.items()) + "]"
        if self.order == 2:
            return f"[={_go_string(json.loads(self.text[2:]))}]"
        return f"[{self.text[2:]}]"


Path = tuple[PE, ...]


def value_sort(v: Any) -> tuple[Any, ...]:
    """structured-merge-diff's total order of values."""
    if isinstance(v, bool):
        return (2, v)
    if isinstance(v, int | float):
        return (0, v)
    if isinstance(v, str):
        return (1, v)
    if isinstance(v, list):
        return (3, tuple(value_sort(x) for x in v))
    if isinstance(v, dict):
        return (4, tuple((k, value_sort(v[k])) for k in sorted(v)))
    return (5,)


def _json(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _go_string(v: Any) -> str:
    """Go's `value.ToString`: strings quoted, the rest as they print."""
    if isinstance(v, str):
        return _json(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def field(name: str) -> PE:
    return PE(0, name, "f:" + name)


def key(fields: dict[str, Any]) -> PE:
    """A keyed list item; `fields` its key fields (sorted by name, as kube writes them)."""
    names = sorted(fields)
    return PE(1, tuple((n, value_sort(fields[n])) for n in names),
              "k:" + _json({n: fields[n] for n in names}))


def value(v: Any) -> PE:
    return PE(2, value_sort(v), "v:" + _json(v))


def index(i: int) -> PE:
    return PE(3, i, f"i:{i}")


def parse(text: str) -> PE:
    """A FieldsV1 key back into its element; FieldsV1Error for one kube would not write."""
    kind, sep, rest = text.partition(":")
    if not sep or len(kind) != 1:
        raise FieldsV1Error(f"invalid path element {text!r}")
    if kind == "f":
        return field(rest)
    if kind == "k":
        try:
            fields = json.loads(rest)
        except ValueError as e:
            raise FieldsV1Error(f"invalid key {text!r}: {e}") from None
        if not isinstance(fields, dict):
            raise FieldsV1Error(f"invalid key {text!r}")
        return key(fields)
    try:
        if kind == "v":
            return value(json.loads(rest))
        if kind == "i":
            return index(int(rest))
    except ValueError as e:
        raise FieldsV1Error(f"invalid path element {text!r}: {e}") from None
    raise UnknownElement(f"unknown path element type {text!r}")


def path_string(path: Path) -> str:
    return "".join(pe.label() for pe in path)


class FieldSet:
    """A set of paths. Operations return new sets and never change their operands."""

    __slots__ = ("children", "members")

    def __init__(self) -> None:
        self.members: set[PE] = set()
        self.children: dict[PE, FieldSet] = {}

    @classmethod
    def of(cls, *paths: Path) -> FieldSet:
        s = cls()
        for p in paths:
            s.insert(p)
        return s

    def insert(self, path: Path) -> None:
        node = self
        for pe in path[:-1]:
            node = node.children.setdefault(pe, FieldSet())
        if path:
            node.members.add(path[-1])

    def has(self, path: Path) -> bool:
        node = self
        for pe in path[:-1]:
            found = node.children.get(pe)
            if found is None:
                return False
            node = found
        return bool(path) and path[-1] in node.members

    def child(self, pe: PE) -> FieldSet:
        """The paths below `pe` (an empty set when there are none); shared, not copied."""
        return self.children.get(pe) or EMPTY

    def empty(self) -> bool:
        return not self.members and all(c.empty() for c in self.children.values())

    def union(self, other: FieldSet) -> FieldSet:
        out = FieldSet()
        out.members = self.members | other.members
        for pe in self.children.keys() | other.children.keys():
            a, b = self.children.get(pe), other.children.get(pe)
            out.children[pe] = a.union(b) if a and b else (a or b).copy()  # type: ignore[union-attr]
        return out

    def intersection(self, other: FieldSet) -> FieldSet:
        out = FieldSet()
        out.members = self.members & other.members
        for pe in self.children.keys() & other.children.keys():
            c = self.children[pe].intersection(other.children[pe])
            if not c.empty():
                out.children[pe] = c
        return out

    def difference(self, other: FieldSet) -> FieldSet:
        """Paths of this set that are not paths of `other` (a member of `other` does not take
        the paths below it away: see `recursive_difference`)."""
        out = FieldSet()
        out.members = self.members - other.members
        for pe, c in self.children.items():
            o = other.children.get(pe)
            d = c.difference(o) if o is not None else c.copy()
            if not d.empty():
                out.children[pe] = d
        return out

    def recursive_difference(self, other: FieldSet) -> FieldSet:
        """Paths of this set that neither are in `other` nor lie below one of its members."""
        out = FieldSet()
        out.members = self.members - other.members
        for pe, c in self.children.items():
            if pe in other.members:
                continue
            o = other.children.get(pe)
            d = c.recursive_difference(o) if o is not None else c.copy()
            if not d.empty():
                out.children[pe] = d
        return out

    def copy(self) -> FieldSet:
        out = FieldSet()
        out.members = set(self.members)
        out.children = {pe: c.copy() for pe, c in self.children.items()}
        return out

    def paths(self, prefix: Path = ()) -> Iterator[Path]:
        """Every path, in structured-merge-diff's order (a member before what lies below it)."""
        for pe in sorted(self.members | self.children.keys()):
            if pe in self.members:
                yield (*prefix, pe)
            if pe in self.children:
                yield from self.children[pe].paths((*prefix, pe))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSet):
            return NotImplemented
        return self.to_fields_v1() == other.to_fields_v1()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FieldSet({[path_string(p) for p in self.paths()]})"

    # --- FieldsV1 ------------------------------------------------------------------------------

    def to_fields_v1(self) -> dict[str, Any]:
        return _emit(self, include_self=False)

    @classmethod
    def from_fields_v1(cls, doc: Any) -> FieldSet:
        """FieldsV1Error for what is not a FieldsV1 object; unknown element types are
        dropped, as kube-apiserver drops them."""
        if not isinstance(doc, dict):
            raise FieldsV1Error("fieldsV1 must be a JSON object")
        out, _ = cls._read(doc)
        return out or cls()

    @classmethod
    def _read(cls, doc: dict[str, Any]) -> tuple[FieldSet | None, bool]:
        children: FieldSet | None = None
        is_member = False
        for text, sub in doc.items():
            if text == ".":
                is_member = True
                continue
            if not isinstance(sub, dict):
                raise FieldsV1Error(f"fieldsV1: {text!r} must hold a JSON object")
            try:
                pe = parse(text)
            except UnknownElement:
                continue
            grand, member = cls._read(sub)
            if children is None:
                children = cls()
            if member:
                children.members.add(pe)
            if grand is not None:
                children.children[pe] = grand
        if children is None:
            is_member = True
        return children, is_member


def _emit(s: FieldSet, *, include_self: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if include_self and (s.members or s.children):
        out["."] = {}
    for pe in sorted(s.members | s.children.keys()):
        c = s.children.get(pe)
        out[pe.text] = {} if c is None or c.empty() else _emit(
            c, include_self=pe in s.members)
    return out


EMPTY = FieldSet()
