"""The OpenAPI documents kube-apiserver serves: v3 per group version (and its index), v2 whole.

Built from the resource registry at request time: the built-in kinds' schemas from the
official client's models (`models.py`), a custom resource's from its CRD object
(`spec.versions[].schema.openAPIV3Schema`; a type without a stored CRD, or one without a
schema, takes any fields). Every kind's schema carries `x-kubernetes-group-version-kind`, and
every resource its paths, whose PATCH lists the query parameters kubectl looks for
(`fieldValidation` tells it the server validates, so it sends `fieldValidation=Strict`).
"""

from __future__ import annotations

import copy
from typing import Any

from ...core.resources import ResourceType
from . import models

Schema = dict[str, Any]
KUBE_VERSION = "v1.33.5"
_OBJECT_META = "V1ObjectMeta"
WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")


def gv_path(group: str, version: str) -> str:
    """`api/v1`, `apis/apps/v1`: how the v3 index names a group version."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def type_schemas(rt: ResourceType, crd: dict | None) -> tuple[str, dict[str, Schema]]:
    """(the kind's schema name, every schema it needs), refs unprefixed."""
    gvk = [{"group": rt.group, "version": rt.version, "kind": rt.kind}]
    model = models.model_class(rt.group, rt.version, rt.kind) if rt.builtin else None
    if model is not None:
        found = copy.deepcopy(models.definitions(model))
        name = models.schema_name(model.__name__)
        found[name]["x-kubernetes-group-version-kind"] = gvk
        list_model = getattr(models.models, f"{model.__name__}List", None)
        if isinstance(list_model, type):
            for key, schema in models.definitions(list_model).items():
                found.setdefault(key, copy.deepcopy(schema))
            found[models.schema_name(list_model.__name__)][
                "x-kubernetes-group-version-kind"] = [{**gvk[0], "kind": f"{rt.kind}List"}]
        return name, found
    found = copy.deepcopy(models.definitions(getattr(models.models, _OBJECT_META)))
    name = ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])
    schema = _crd_schema(crd, rt.version)
    props = schema.get("properties")
    if isinstance(props, dict):  # (declaring no fields keeps every field, see fields.py)
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = {"$ref": models.schema_name(_OBJECT_META)}
    schema["x-kubernetes-group-version-kind"] = gvk
    found[name] = schema
    return name, found


def _crd_schema(crd: dict | None, version: str) -> Schema:
    for v in ((crd or {}).get("spec") or {}).get("versions") or []:
        if v.get("name") == version:
            given = ((v.get("schema") or {}).get("openAPIV3Schema"))
            if isinstance(given, dict) and given:
                return copy.deepcopy(given)
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def v3_document(types: list[tuple[ResourceType, dict | None]]) -> Schema:
    """One group version's document: `types` are its resources, each with its CRD (or None)."""
    schemas: dict[str, Schema] = {}
    paths: dict[str, Schema] = {}
    for rt, crd in types:
        name, found = type_schemas(rt, crd)
        for key, schema in found.items():
            schemas.setdefault(key, schema)
        paths.update(_paths(rt, name, "#/components/schemas/"))
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION},
            "paths": paths,
            "components": {"schemas": {k: _refs(v, "#/components/schemas/", v3=True)
                                       for k, v in sorted(schemas.items())}}}


def v2_document(types: list[tuple[ResourceType, dict | None]]) -> Schema:
    definitions: dict[str, Schema] = {}
    paths: dict[str, Schema] = {}
    for rt, crd in types:
        name, found = type_schemas(rt, crd)
        for key, schema in found.items():
            definitions.setdefault(key, schema)
        for path, item in _paths(rt, name, "#/definitions/").items():
            paths[path] = {verb: _v2_operation(op) for verb, op in item.items()}
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION},
            "paths": paths,
            "definitions": {k: _refs(v, "#/definitions/", v3=False)
                            for k, v in sorted(definitions.items())}}


def _refs(schema: Any, prefix: str, *, v3: bool) -> Any:
    """Prefix every `$ref`; in v3 a `$ref` with a description beside it goes into `allOf`, as
    kube-openapi writes it (a `$ref`'s siblings are ignored there)."""
    if isinstance(schema, list):
        return [_refs(s, prefix, v3=v3) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if not isinstance(ref, str):  # (`properties` may declare a field named $ref)
        return {k: (_refs(v, prefix, v3=v3) if k not in ("enum", "default", "example") else v)
                for k, v in schema.items()}
    out = {k: (_refs(v, prefix, v3=v3) if k not in ("enum", "default", "example") else v)
           for k, v in schema.items() if k != "$ref"}
    if ref:
        ref = ref if ref.startswith("#") else prefix + ref
        if v3 and out:
            out["allOf"] = [{"$ref": ref}]
        else:
            out["$ref"] = ref
    return out


def _paths(rt: ResourceType, schema: str, prefix: str) -> dict[str, Schema]:
    base = f"/{gv_path(rt.group, rt.version)}"
    collection = (f"{base}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced
                  else f"{base}/{rt.plural}")
    gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    ref = {"$ref": prefix + schema}

    def op(action: str, verb: str, body: bool = False, params: tuple[str, ...] = ()) -> Schema:
        o: Schema = {"operationId": f"{action}{rt.kind}", "x-kubernetes-action": verb,
                     "x-kubernetes-group-version-kind": gvk,
                     "parameters": [{"name": p, "in": "query", "schema": {"type": "string"},
                                     "uniqueItems": True} for p in params],
                     "responses": {"200": {"description": "OK", "content": {
                         "application/json": {"schema": ref}}}}}
        if body:
            o["requestBody"] = {"content": {"*/*": {"schema": ref}}, "required": True}
        return o

    verbs = set(rt.verbs)
    coll: Schema = {}
    if "list" in verbs:
        coll["get"] = op("list", "list")
    if "create" in verbs:
        coll["post"] = op("create", "post", True, WRITE_PARAMS)
    item: Schema = {}
    if "get" in verbs:
        item["get"] = op("read", "get")
    if "update" in verbs:
        item["put"] = op("replace", "put", True, WRITE_PARAMS)
    if "patch" in verbs:
        item["patch"] = op("patch", "patch", True, (*WRITE_PARAMS, "force"))
    if "delete" in verbs:
        item["delete"] = op("delete", "delete", False, ("dryRun",))
    paths = {collection: coll} if coll else {}
    if item:
        paths[f"{collection}/{{name}}"] = item
        for sub in rt.subresources:
            if sub == "status":  # (scale is another kind, autoscaling/v1 Scale)
                paths[f"{collection}/{{name}}/{sub}"] = {
                    k: v for k, v in item.items() if k in ("get", "put", "patch")}
    return paths


def _v2_operation(op: Schema) -> Schema:
    out = {k: v for k, v in op.items() if k not in ("requestBody", "responses", "parameters")}
    out["parameters"] = [{"name": p["name"], "in": "query", "type": "string",
                          "uniqueItems": True} for p in op["parameters"]]
    if "requestBody" in op:
        out["parameters"].append({"name": "body", "in": "body", "required": True,
                                  "schema": op["requestBody"]["content"]["*/*"]["schema"]})
    out["responses"] = {"200": {"description": "OK", "schema": op["responses"]["200"][
        "content"]["application/json"]["schema"]}}
    return out
