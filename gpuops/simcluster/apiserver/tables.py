"""meta.k8s.io Tables and PartialObjectMetadata, built from stored objects: pure functions.

A Table carries the printer's column definitions (left out, as `null`, on every watch event
but the first), one row per object with its cells (always the wide ones: kubectl hides the
columns of priority > 0 unless `-o wide`), the row's conditions, and the object as
`includeObject` asks: `Metadata` (the default: a PartialObjectMetadata, which kubectl reads
for the namespace, labels and `--show-labels`), `Object` (the whole object) or `None`.
"""

from __future__ import annotations

from typing import Any

from ..core import errors
from .printers import Printer

Obj = dict[str, Any]
INCLUDE_OBJECT = ("Metadata", "None", "Object")


def include_object(value: str | None) -> str:
    """The `includeObject` query parameter, validated as kube-apiserver does."""
    if value in (None, ""):
        return "Metadata"
    if value not in INCLUDE_OBJECT:
        supported = ", ".join(f'"{v}"' for v in INCLUDE_OBJECT)
        raise errors.bad_request(f"Unable to convert to Table as requested: includeObject: "
                                 f'Unsupported value: "{value}": supported values: {supported}')
    return value


def partial_metadata(obj: Obj, api_version: str) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": api_version,
            "metadata": obj.get("metadata") or {}}


def table(printer: Printer, items: list[Obj], *, now: float, include: str,
          list_meta: Obj, api_version: str = "meta.k8s.io/v1", headers: bool = True) -> Obj:
    rows = []
    for obj in items:
        row: Obj = {"cells": printer.cells(obj, now)}
        conditions = printer.conditions(obj) if printer.conditions else []
        if conditions:
            row["conditions"] = conditions
        row["object"] = (obj if include == "Object" else None if include == "None"
                         else partial_metadata(obj, api_version))
        rows.append(row)
    return {"kind": "Table", "apiVersion": api_version, "metadata": list_meta,
            "columnDefinitions": ([c.definition() for c in printer.columns] if headers
                                  else None),
            "rows": rows}


def partial_metadata_list(items: list[Obj], list_meta: Obj, api_version: str) -> Obj:
    return {"kind": "PartialObjectMetadataList", "apiVersion": api_version,
            "metadata": list_meta, "items": [partial_metadata(o, api_version) for o in items]}
