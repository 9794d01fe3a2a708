"""`/openapi/v2`, `/openapi/v3` and `/openapi/v3/<group version>` over the live registry, and
each kind's schema for field validation.

A document depends on the group version's resources and on their CRDs' resourceVersions; it
is rebuilt only when one of them changes. The v3 index links each group version with a hash
of its document, as kube-apiserver's does, so clients cache it by URL. The v2 document is
served as JSON or, to whoever asks for it (client-go does), as gnostic protobuf.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from aiohttp import web

from ...core import errors
from ...core.resources import ResourceType
from ...core.store import Store
from ..codecs import JSON
from ..routing import not_found
from . import documents, fields, protobuf

Schema = dict[str, Any]


class OpenApi:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple, bytes] = {}
        self._schemas: dict[tuple, tuple[Schema, dict[str, Schema]]] = {}
        self._v2_doc: tuple[tuple, Schema] | None = None

    # --- HTTP --------------------------------------------------------------------------------

    def handle(self, request: web.Request, parts: list[str]) -> web.Response:
        """`parts`: the path after `openapi`."""
        if parts == ["v2"]:
            accept = request.headers.get("Accept", "")
            key = self._version_key(None)
            if "proto-openapi.spec.v2" in accept:
                body = self._built(("v2pb", key), lambda: protobuf.document(self._v2(key)),
                                   encode=False)
                return web.Response(body=body, headers={"Content-Type": protobuf.MEDIA_TYPE})
            if accept and not any(t in accept for t in (JSON, "*/*")):
                raise errors.ApiError(406, "NotAcceptable", "the OpenAPI v2 document is served "
                                      f"as {JSON} or {protobuf.ACCEPTED}")
            return self._bytes(("v2", key), lambda: self._v2(key))
        if parts == ["v3"]:
            return web.Response(body=orjson.dumps(self.v3_index()), content_type=JSON)
        if parts[:1] == ["v3"] and len(parts) in (3, 4):
            gv = "/".join(parts[1:])
            for group, version in self._group_versions():
                if documents.gv_path(group, version) == gv:
                    return self._bytes(*self._v3_args(group, version))
        raise not_found()

    def v3_index(self) -> Schema:
        paths = {}
        for group, version in self._group_versions():
            key, build = self._v3_args(group, version)
            digest = hashlib.sha512(self._built(key, build)).hexdigest().upper()
            gv = documents.gv_path(group, version)
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
        return {"paths": paths}

    # --- validation ----------------------------------------------------------------------------

    def unknown_fields(self, rt: ResourceType, obj: Any) -> tuple[list[str], Any]:
        """kube's strict decoding errors of `obj` as a `rt` (`unknown field "spec.x"`) and
        `obj` without those fields."""
        return fields.unknown_fields(obj, *self.kind_schemas(rt))

    def kind_schemas(self, rt: ResourceType) -> tuple[Schema, dict[str, Schema]]:
        """(the kind's schema, every named schema it refers to), rebuilt when its CRD
        changes; the same objects until then (callers may cache what they derive by them)."""
        types = [(rt, self._crd(rt))]
        key = self._version_key(types)
        found = self._schemas.get(key)
        if found is None:
            if len(self._schemas) > 1024:  # schemas of CRD versions long gone
                self._schemas.clear()
            name, schemas = documents.type_schemas(rt, types[0][1])
            found = self._schemas[key] = (schemas[name], schemas)
        return found

    # --- helpers -------------------------------------------------------------------------------

    def _v3_args(self, group: str, version: str) -> tuple[tuple, Any]:
        types = self._types((group, version))
        return ("v3", group, version, self._version_key(types)), (
            lambda: documents.v3_document(types))

    def _v2(self, key: tuple) -> Schema:
        if self._v2_doc is None or self._v2_doc[0] != key:
            self._v2_doc = (key, documents.v2_document(self._types(None)))
        return self._v2_doc[1]

    def _bytes(self, key: tuple, build: Any) -> web.Response:
        return web.Response(body=self._built(key, build), content_type=JSON)

    def _built(self, key: tuple, build: Any, *, encode: bool = True) -> bytes:
        """`build()`'s document as JSON (`encode`) or as the bytes it returns, cached."""
        body = self._cache.get(key)
        if body is None:
            if len(self._cache) > 256:  # documents of CRD versions long gone
                self._cache.clear()
            built = build()
            body = self._cache[key] = orjson.dumps(built) if encode else built
        return body

    def _group_versions(self) -> list[tuple[str, str]]:
        seen: dict[tuple[str, str], None] = {}
        for rt in self.store.registry.all():
            seen[(rt.group, rt.version)] = None
        return list(seen)

    def _types(self, gv: tuple[str, str] | None) -> list[tuple[ResourceType, dict | None]]:
        registry = self.store.registry
        rts = registry.all() if gv is None else registry.in_group_version(*gv)
        return [(rt, self._crd(rt)) for rt in rts]

    def _crd(self, rt: ResourceType) -> dict | None:
        if rt.builtin:
            return None
        crd_type = self.store.registry.get("apiextensions.k8s.io", "v1",
                                           "customresourcedefinitions")
        return None if crd_type is None else self.store.find(crd_type, None,
                                                             f"{rt.plural}.{rt.group}")

    def _version_key(self, types: list[tuple[ResourceType, dict | None]] | None) -> tuple:
        if types is None:
            types = self._types(None)
        return tuple((rt.key, rt.version, (crd or {}).get("metadata", {}).get(
            "resourceVersion")) for rt, crd in types)
