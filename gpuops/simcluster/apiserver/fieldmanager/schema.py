"""What a kind's OpenAPI schema says about merging, as structured-merge-diff reads it.

Every node is a scalar, a map or a list. A map with declared properties is a struct, one with
`additionalProperties` a map of elements; both are granular (each field owned on its own)
unless `x-kubernetes-map-type: atomic`. A list is atomic (owned and replaced whole) unless
`x-kubernetes-list-type` says `set` (scalars owned one by one) or `map` (items owned by their
`x-kubernetes-list-map-keys`); a list with only the strategic-merge extensions is read as
kube-openapi converts it (merge with a key: a map; merge without: a set). A node the schema
says nothing about (`x-kubernetes-preserve-unknown-fields`, IntOrString, a CRD's bare object)
is deduced from its value: a dict granular, a list atomic.

The built-in schemas come from the official client's models, which lack two facts kube's own
schemas carry; they are added here: the structs Go declares `+structType=atomic` (a label
selector is owned whole) and the second key of ports lists (`protocol`, default TCP).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import fieldset
from .fieldset import PE

Schema = dict[str, Any]
ANY: Schema = {"x-kubernetes-preserve-unknown-fields": True}

# Structs kube's API types mark `+structType=atomic`.
ATOMIC_STRUCTS = frozenset({
    "v1.LabelSelector", "v1.NodeSelector", "v1.NodeSelectorTerm", "v1.TopologySelectorTerm",
    "v1.ObjectReference", "v1.LocalObjectReference", "v1.TypedLocalObjectReference",
    "v1.TypedObjectReference", "v1.ConfigMapKeySelector", "v1.SecretKeySelector",
    "v1.ObjectFieldSelector", "v1.ResourceFieldSelector", "v1.FileKeySelector",
})
# List keys kube declares beyond the client's merge keys: items' schema -> (keys, defaults).
LIST_KEYS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "v1.ContainerPort": (("containerPort", "protocol"), {"protocol": "TCP"}),
    "v1.ServicePort": (("port", "protocol"), {"protocol": "TCP"}),
    "v1.EndpointPort": (("port", "protocol"), {"protocol": "TCP"}),
}


class TypedError(ValueError):
    """An object that does not fit its schema as structured-merge-diff needs it (a keyed
    list item without its key, a duplicate item in an applied list, an undeclared field)."""


@dataclass(frozen=True)
class Atom:
    kind: str  # "scalar", "map", "list" or "any" (deduced from the value)
    atomic: bool = False
    fields: dict[str, Schema] | None = None  # a struct's declared properties
    elements: Schema | None = None  # a map's additionalProperties, a list's items
    list_type: str = "atomic"  # "atomic", "set" or "map"
    keys: tuple[str, ...] = ()
    key_defaults: dict[str, Any] = field(default_factory=dict)


SCALAR = Atom("scalar")
UNTYPED = Atom("any")  # what the schema does not say; `Types.atom` deduces it from the value
DEDUCED_LIST = Atom("list", atomic=True, elements=ANY)
DEDUCED_MAP = Atom("map", elements=ANY)


class Types:
    """The schemas of one kind: its root schema and the named ones it refers to."""

    def __init__(self, root: Schema, schemas: dict[str, Schema]) -> None:
        self.root = root
        self.schemas = schemas
        self._atoms: dict[int, tuple[Schema, Atom]] = {}

    def atom(self, schema: Schema | None, value: Any = None) -> Atom:
        """What `schema` is; a deduced node takes its shape from `value`."""
        a = self._atom(schema if schema is not None else ANY)
        if a.kind == "any":
            return DEDUCED_MAP if isinstance(value, dict) else DEDUCED_LIST if isinstance(
                value, list) else SCALAR
        return a

    def field_schema(self, a: Atom, name: str) -> Schema:
        if a.fields is not None and name in a.fields:
            return a.fields[name]
        return a.elements if a.elements is not None else ANY

    def declares(self, a: Atom, name: str) -> bool:
        """Whether `name` is a declared field (a struct's) rather than an element."""
        return a.fields is not None and name in a.fields

    def item_element(self, a: Atom, item: Any) -> PE:
        """The path element of a granular list's item: its key fields, or its value."""
        if a.list_type == "map":
            if not isinstance(item, dict):
                raise TypedError("associative list with keys may not have non-map elements")
            fields = {}
            for k in a.keys:
                if k in item:
                    fields[k] = item[k]
                elif k in a.key_defaults:
                    fields[k] = a.key_defaults[k]
            if not fields:
                keys = " ".join(f'"{k}"' for k in a.keys)
                raise TypedError(f"associative list with keys has an element that omits all "
                                 f"key fields [{keys}] (and doesn't have default values for "
                                 f"any key fields)")
            return fieldset.key(fields)
        if isinstance(item, dict):
            raise TypedError("associative list without keys has an element that's a map type")
        if isinstance(item, list):
            raise TypedError("not supported: associative list with lists as elements")
        if item is None:
            raise TypedError("associative list without keys has an element that's an "
                             "explicit null")
        return fieldset.value(item)

    # --- reading a schema ----------------------------------------------------------------------

    def _atom(self, schema: Schema) -> Atom:
        found = self._atoms.get(id(schema))
        if found is not None and found[0] is schema:
            return found[1]
        name, resolved = self._resolve(schema)
        a = self._read(name, resolved)
        self._atoms[id(schema)] = (schema, a)  # (the schema kept: its id stays its own)
        return a

    def _resolve(self, schema: Schema) -> tuple[str | None, Schema]:
        name = None
        for _ in range(64):  # refs to refs; a cycle stops here
            ref = schema.get("$ref") or next(
                (s.get("$ref") for s in schema.get("allOf") or [] if "$ref" in s), None)
            if not isinstance(ref, str):
                break
            name = ref.rsplit("/", 1)[-1]
            schema = self.schemas.get(name, ANY)
        return name, schema

    def _read(self, name: str | None, s: Schema) -> Atom:
        kind = s.get("type")
        if s.get("x-kubernetes-int-or-string"):
            return SCALAR
        if kind == "array" or "items" in s:
            return self._list(s)
        props = s.get("properties")
        extra = s.get("additionalProperties")
        if isinstance(props, dict) and props:
            return Atom("map", atomic=self._atomic_map(name, s), fields=props,
                        elements=extra if isinstance(extra, dict) else None)
        if isinstance(extra, dict):
            return Atom("map", atomic=self._atomic_map(name, s), elements=extra)
        if kind in ("string", "integer", "number", "boolean"):
            return SCALAR
        return UNTYPED

    @staticmethod
    def _atomic_map(name: str | None, s: Schema) -> bool:
        return s.get("x-kubernetes-map-type") == "atomic" or name in ATOMIC_STRUCTS

    def _list(self, s: Schema) -> Atom:
        given = s.get("items")
        items: Schema = given if isinstance(given, dict) else ANY
        item_name, item_schema = self._resolve(items)
        list_type = s.get("x-kubernetes-list-type")
        keys = tuple(s.get("x-kubernetes-list-map-keys") or ())
        if list_type is None and s.get("x-kubernetes-patch-strategy", "") == "merge":
            key = s.get("x-kubernetes-patch-merge-key")
            list_type, keys = ("map", (key,)) if key else ("set", ())
        if list_type not in ("set", "map"):
            return Atom("list", atomic=True, elements=items)
        defaults: dict[str, Any] = {}
        if list_type == "map":
            extra_keys = LIST_KEYS.get(item_name or "")
            if extra_keys is not None:
                keys, defaults = extra_keys
            props = item_schema.get("properties") or {}
            for k in keys:
                if isinstance(props.get(k), dict) and "default" in props[k]:
                    defaults.setdefault(k, props[k]["default"])
        return Atom("list", elements=items, list_type=list_type, keys=keys,
                    key_defaults=defaults)
