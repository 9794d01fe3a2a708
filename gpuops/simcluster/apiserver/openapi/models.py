"""OpenAPI schemas of the built-in kinds, generated from the official Python client's models.

The client (`kubernetes.client.models`, a dependency) is generated from kube-apiserver's own
OpenAPI document: each model lists its fields' types (`openapi_types`), their JSON names
(`attribute_map`), whether they are required and their descriptions (its pydantic fields). The
strategic-merge extensions (`x-kubernetes-patch-strategy`, `-patch-merge-key`, `-list-type`)
are not in the client; they come from the same table the server merges with
(`core/patching.py`), so what kubectl computes a patch with and what the server applies agree.
Schemas are named `<version>.<Kind>` after the model (`v1.Container`, `events.v1.Event`), so
the last segment is the type kubectl explain shows.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from kubernetes.client import models

from ...core.patching import MERGE_KEYS, MERGED_SCALAR_LISTS, PORTS_MERGE_KEYS

Schema = dict[str, Any]
SCALARS: dict[str, Schema] = {
    "str": {"type": "string"}, "int": {"type": "integer", "format": "int64"},
    "bool": {"type": "boolean"}, "float": {"type": "number", "format": "double"},
    "datetime": {"type": "string", "format": "date-time"}, "date": {"type": "string",
                                                                    "format": "date"},
    "bytes": {"type": "string", "format": "byte"},
    # IntOrString, RawExtension, JSON: the client does not tell them apart
    "object": {"x-kubernetes-preserve-unknown-fields": True},
}
_VERSION = re.compile(r"^([A-Z][a-z]+)?(V\d+(?:alpha\d+|beta\d+)?)([A-Z]\w*)$")
# Which list of ports merges by which key, by the model of its items.
_PORT_ITEMS = {"V1ContainerPort": PORTS_MERGE_KEYS["containers"], "V1ServicePort": PORTS_MERGE_KEYS["service"]}


def model_class(group: str, version: str, kind: str) -> type | None:
    """The client's model of a kind: `CoreV1Event` / `EventsV1Event` where the name is shared
    between groups, else `V1Pod`; None when the client has none."""
    ver = version[:1].upper() + version[1:]
    prefix = (group.split(".")[0] or "core").capitalize()
    for name in (f"{prefix}{ver}{kind}", f"{ver}{kind}"):
        cls = getattr(models, name, None)
        if isinstance(cls, type) and "kind" in getattr(cls, "attribute_map", {}):
            return cls
    return None


def schema_name(model: str) -> str:
    """`V1Container` -> `v1.Container`, `EventsV1Event` -> `events.v1.Event`."""
    m = _VERSION.match(model)
    if m is None:
        return model
    prefix, ver, kind = m.groups()
    return ".".join(p for p in ((prefix or "").lower(), ver.lower(), kind) if p)


def definitions(model: type) -> dict[str, Schema]:
    """The schema of `model` and of every model it reaches, by schema name, with `$ref`s
    written as `{"$ref": "<name>"}` (the document prefixes them)."""
    found: dict[str, Schema] = {}
    pending = [model.__name__]
    while pending:
        name = pending.pop()
        if schema_name(name) in found:
            continue
        schema, refs = _model_schema(name)
        found[schema_name(name)] = schema
        pending.extend(refs)
    return found


@cache
def _model_schema(name: str) -> tuple[Schema, tuple[str, ...]]:
    cls = getattr(models, name)
    fields = getattr(cls, "model_fields", {})
    properties: dict[str, Schema] = {}
    required: list[str] = []
    refs: list[str] = []
    for attr, type_text in cls.openapi_types.items():
        json_name = cls.attribute_map[attr]
        prop = _type_schema(type_text, refs)
        info = fields.get(attr)
        if info is not None and info.description:
            prop = {**prop, "description": info.description}
        if info is not None and info.is_required():
            required.append(json_name)
        if prop.get("type") == "array":
            prop.update(_list_extensions(json_name, type_text))
        properties[json_name] = prop
    schema: Schema = {"type": "object", "properties": properties}
    doc = _description(cls)
    if doc:
        schema["description"] = doc
    if required:
        schema["required"] = sorted(required)
    return schema, tuple(refs)


def _type_schema(text: str, refs: list[str]) -> Schema:
    text = text.strip()
    if text.startswith("List[") and text.endswith("]"):
        return {"type": "array", "items": _type_schema(text[5:-1], refs)}
    if text.startswith("Dict[str,") and text.endswith("]"):
        return {"type": "object", "additionalProperties": _type_schema(text[9:-1], refs)}
    if text in SCALARS:
        return dict(SCALARS[text])
    if isinstance(getattr(models, text, None), type):
        refs.append(text)
        return {"$ref": schema_name(text)}
    return dict(SCALARS["object"])


def _list_extensions(field: str, type_text: str) -> Schema:
    item = type_text[5:-1].strip()
    key = _PORT_ITEMS.get(item) if field == "ports" else MERGE_KEYS.get(field)
    # (a table keyed by field name: only where the items have the key, e.g. not Endpoints'
    # `addresses`, whose items have no `type`)
    cls = getattr(models, item, None)
    if key is not None and key in getattr(cls, "attribute_map", {}).values():
        return {"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": key,
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}
    if field in MERGED_SCALAR_LISTS:
        return {"x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-type": "set"}
    return {}


def _description(cls: type) -> str:
    """The model's own sentence(s), before the generator's `Attributes:` boilerplate."""
    text = (cls.__doc__ or "").split("Attributes:")[0]
    return " ".join(text.split())
