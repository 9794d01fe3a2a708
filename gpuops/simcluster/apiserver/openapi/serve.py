"""`/openapi/v2`, `/openapi/v3` and `/openapi/v3/<group version>` over the live registry, and
each kind's schema for field validation.

A document depends on the group version's resources and on their CRDs' resourceVersions; it
is rebuilt only when one of them changes. The v3 index links each group version with a hash
of its document, as kube-apiserver's does, so clients cache it by URL. The v2 document is
served as JSON only: kube-apiserver also serves it as protobuf (what client-go asks for), a
client that accepts nothing else gets 406.
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
from . import documents, fields

Schema = dict[str, Any]


class OpenApi:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple, bytes] = {}
        self._schemas: dict[tuple, tuple[Schema, dict[str, Schema]]] = {}

    # --- HTTP --------------------------------------------------------------------------------

    def handle(self, request: web.Request, parts: list[str]) -> web.Response:
        """`parts`: the path after `openapi`."""
        if parts == ["v2"]:
            accept = request.headers.get("Accept", "")
            if accept and not any(t in accept for t in (JSON, "*/*")):
                raise errors.ApiError(406, "NotAcceptable", "simcluster serves the OpenAPI v2 "
                                      "document as application/json only")
            return self._bytes(("v2", self._version_key(None)),
                               lambda: documents.v2_document(self._types(None)))
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
        types = [(rt, self._crd(rt))]
        key = self._version_key(types)
        found = self._schemas.get(key)
        if found is None:
            name, schemas = documents.type_schemas(rt, types[0][1])
            found = self._schemas[key] = (schemas[name], schemas)
        return fields.unknown_fields(obj, *found)

    # --- helpers -------------------------------------------------------------------------------

    def _v3_args(self, group: str, version: str) -> tuple[tuple, Any]:
        types = self._types((group, version))
        return ("v3", group, version, self._version_key(types)), (
            lambda: documents.v3_document(types))

    def _bytes(self, key: tuple, build: Any) -> web.Response:
        return web.Response(body=self._built(key, build), content_type=JSON)

    def _built(self, key: tuple, build: Any) -> bytes:
        body = self._cache.get(key)
        if body is None:
            if len(self._cache) > 256:  # documents of CRD versions long gone
                self._cache.clear()
            body = self._cache[key] = orjson.dumps(build())
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
