"""Server-side field validation (`fieldValidation=Strict|Warn|Ignore`), as kube-apiserver's
strict decoding: a field the kind's schema does not declare is an "unknown field", named by
its path (`spec.template.spec.containers[0].imagee`). Strict refuses the write (400), Warn
(the default) answers with a `Warning` header per field, Ignore says nothing; both drop the
fields, as decoding into the kind's Go type does.
A schema part that keeps unknown fields (`x-kubernetes-preserve-unknown-fields`, a map's
`additionalProperties`) is not looked into, nor is an object schema that declares no fields
at all (a CRD's bare `type: object`): kube would prune all of it, simcluster keeps it.
"""

from __future__ import annotations

from typing import Any

from ...core import errors

Schema = dict[str, Any]
DIRECTIVES = ("", "Ignore", "Strict", "Warn")  # as kube lists them: sorted, "" first


def directive(value: str | None, options_kind: str) -> str:
    """The request's `fieldValidation`, defaulted to Warn; 422 for a value kube refuses."""
    value = value or ""
    if value not in DIRECTIVES:
        supported = ", ".join(f'"{d}"' for d in DIRECTIVES)
        message = f'Unsupported value: "{value}": supported values: {supported}'
        raise errors.ApiError(
            422, "Invalid",
            f'{options_kind}.meta.k8s.io "" is invalid: fieldValidation: {message}',
            details={"group": "meta.k8s.io", "kind": options_kind, "causes": [
                {"reason": "FieldValueNotSupported", "message": message,
                 "field": "fieldValidation"}]})
    return value or "Warn"


def unknown_fields(obj: Any, schema: Schema, schemas: dict[str, Schema]
                   ) -> tuple[list[str], Any]:
    """(`unknown field "<path>"` for every field of `obj` its schema does not declare, `obj`
    without them): kube decodes into the kind's type, which has nowhere to keep them. `obj`
    is not changed; the parts without unknown fields are shared."""
    found: list[str] = []
    kept = _walk(obj, schema, schemas, "", found)
    return [f'unknown field "{path}"' for path in found], kept


def _resolve(schema: Schema, schemas: dict[str, Schema]) -> Schema:
    for _ in range(64):  # refs to refs; a cycle stops here rather than looping
        ref = schema.get("$ref") or next(
            (s.get("$ref") for s in schema.get("allOf") or [] if "$ref" in s), None)
        if not isinstance(ref, str):
            return schema
        schema = schemas.get(ref.rsplit("/", 1)[-1], {})
    return schema


def _walk(obj: Any, schema: Schema, schemas: dict[str, Schema], path: str,
          found: list[str]) -> Any:
    schema = _resolve(schema, schemas)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return obj
    before = len(found)
    if isinstance(obj, dict):
        props = schema.get("properties")
        if props is None:
            extra = schema.get("additionalProperties")
            if not isinstance(extra, dict):
                return obj
            out = {key: _walk(value, extra, schemas, f"{path}[{key}]" if path else key, found)
                   for key, value in obj.items()}
        else:
            out = {}
            for key, value in obj.items():
                where = f"{path}.{key}" if path else key
                if key not in props:
                    found.append(where)
                else:
                    out[key] = _walk(value, props[key], schemas, where, found)
        return out if len(found) > before else obj
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        items = [_walk(value, schema["items"], schemas, f"{path}[{i}]", found)
                 for i, value in enumerate(obj)]
        return items if len(found) > before else obj
    return obj
