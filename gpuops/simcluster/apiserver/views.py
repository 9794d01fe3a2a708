"""The form a GET, LIST or WATCH answers in, negotiated from the Accept header as
kube-apiserver does: plain JSON, a meta.k8s.io Table (`as=Table;v=v1;g=meta.k8s.io`: what
kubectl asks for), or PartialObjectMetadata(List) (metadata-only clients).

kubectl sends `application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;
v=v1beta1;g=meta.k8s.io,application/json`: the first form the server can give wins (highest
`q` first). Only requests that ask for conversions alone, none of which is served, get 406;
any other Accept (`*/*`, protobuf or YAML before JSON, none) gets JSON, as simcluster speaks
JSON only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web

from ..core import errors
from . import tables
from .codecs import JSON, encoded_events, json_response, list_response
from .printers import Printer

Obj = dict[str, Any]
log = logging.getLogger("gpuops.simcluster.apiserver")
META_GROUP = "meta.k8s.io"
META_VERSIONS = ("v1", "v1beta1")
CONVERSIONS = ("Table", "PartialObjectMetadata", "PartialObjectMetadataList")
ACCEPTED = "only the following media types are accepted: application/json"


@dataclass(frozen=True)
class Wanted:
    form: str  # "json" or one of CONVERSIONS
    api_version: str = ""  # meta.k8s.io/v1 or meta.k8s.io/v1beta1 for a conversion


JSON_WANTED = Wanted("json")


def negotiate(accept: str | None) -> Wanted:
    """What an Accept header asks for; 406 when it asks only for conversions not served."""
    if not accept:
        return JSON_WANTED
    ranges = []
    for position, part in enumerate(accept.split(",")):
        media, *raw_params = [p.strip() for p in part.split(";")]
        params = {}
        for raw in raw_params:
            key, _, value = raw.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 1.0
        ranges.append((-q, position, media.lower(), params))
    conversions_only = True
    for _, _, media, params in sorted(ranges):
        wanted = params.get("as")
        if wanted is None:
            conversions_only = False
            if media in (JSON, "*/*", "application/*"):
                return JSON_WANTED
            continue
        if (media in (JSON, "*/*", "application/*") and wanted in CONVERSIONS
                and params.get("g") == META_GROUP and params.get("v") in META_VERSIONS):
            return Wanted(wanted, f"{META_GROUP}/{params['v']}")
    if conversions_only:
        raise errors.ApiError(406, "NotAcceptable", ACCEPTED)
    return JSON_WANTED


class View(Protocol):
    def list_response(self, body: Obj) -> web.Response: ...

    def object_response(self, obj: Obj) -> web.Response: ...

    def watch_lines(self, events: list[tuple[str, Any]]) -> list[bytes]: ...


class JsonView:
    """Objects as stored."""

    def list_response(self, body: Obj) -> web.Response:
        return list_response(body)

    def object_response(self, obj: Obj) -> web.Response:
        return json_response(obj)

    def watch_lines(self, events: list[tuple[str, Any]]) -> list[bytes]:
        return encoded_events(events)


JSON_VIEW = JsonView()


class TableView:
    """Rows of a resource's printer. A watch's first event carries the column definitions,
    later ones none (as kube-apiserver's watch encoder does); ERROR and BOOKMARK events pass
    as they are."""

    def __init__(self, printer: Printer, include: str, now: Callable[[], float],
                 api_version: str) -> None:
        self.printer = printer
        self.include = include
        self.now = now
        self.api_version = api_version
        self._headers_sent = False

    def _table(self, items: list[Obj], meta: Obj, headers: bool = True) -> Obj:
        return tables.table(self.printer, items, now=self.now(), include=self.include,
                            list_meta=meta, api_version=self.api_version, headers=headers)

    def list_response(self, body: Obj) -> web.Response:
        items = body["items"]
        try:
            data = orjson.dumps(self._table(items, body["metadata"]))
        except TypeError:  # one object the encoder refuses is left out, as for JSON lists
            data = orjson.dumps(self._table(_encodable(items, body["kind"]), body["metadata"]))
        return web.Response(body=data, content_type=JSON)

    def object_response(self, obj: Obj) -> web.Response:
        rv = (obj.get("metadata") or {}).get("resourceVersion", "")
        return json_response(self._table([obj], {"resourceVersion": rv}))

    def watch_lines(self, events: list[tuple[str, Any]]) -> list[bytes]:
        converted = []
        for kind, obj in events:
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                rv = (obj.get("metadata") or {}).get("resourceVersion", "")
                obj = self._table([obj], {"resourceVersion": rv},
                                  headers=not self._headers_sent)
                self._headers_sent = True
            converted.append((kind, obj))
        return encoded_events(converted)


class MetadataView:
    """PartialObjectMetadata for one object, PartialObjectMetadataList for a list; the other
    pairing is 406, as kube-apiserver answers."""

    def __init__(self, wanted: Wanted) -> None:
        self.wanted = wanted

    def list_response(self, body: Obj) -> web.Response:
        if self.wanted.form != "PartialObjectMetadataList":
            raise errors.ApiError(406, "NotAcceptable", "you requested PartialObjectMetadata, "
                                  f"but the requested object is a list ({body['kind']})")
        return list_response(tables.partial_metadata_list(body["items"], body["metadata"],
                                                          self.wanted.api_version))

    def object_response(self, obj: Obj) -> web.Response:
        if self.wanted.form != "PartialObjectMetadata":
            raise errors.ApiError(406, "NotAcceptable", "you requested "
                                  "PartialObjectMetadataList, but the requested object is not "
                                  f"a list ({obj.get('kind', 'object')})")
        return json_response(tables.partial_metadata(obj, self.wanted.api_version))

    def watch_lines(self, events: list[tuple[str, Any]]) -> list[bytes]:
        return encoded_events([
            (kind, tables.partial_metadata(obj, self.wanted.api_version)
             if kind in ("ADDED", "MODIFIED", "DELETED") else obj) for kind, obj in events])


def _encodable(items: list[Obj], kind: str) -> list[Obj]:
    kept = []
    for item in items:
        try:
            orjson.dumps(item)
        except TypeError as e:
            meta = item.get("metadata") or {}
            log.error("LIST %s: %s/%s left out, it cannot be encoded: %s", kind,
                      meta.get("namespace", ""), meta.get("name", ""), e)
            continue
        kept.append(item)
    return kept
