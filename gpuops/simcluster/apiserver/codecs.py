"""Bodies in and out of the API: JSON (YAML accepted in), query parameters, Status errors,
lists and watch lines.

An object the JSON encoder refuses never breaks a LIST or a watch stream for everyone: it is
left out and logged (validation on write keeps such objects out; this is the last line).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import orjson
import yaml
from aiohttp import web

from ..core import errors
from ..core.resources import ResourceType
from . import protobuf as protobuf_codec

JSON = "application/json"
PROTOBUF = "application/vnd.kubernetes.protobuf"
log = logging.getLogger("gpuops.simcluster.apiserver")
T = TypeVar("T")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON,
                        headers=headers)


def list_response(body: dict[str, Any]) -> web.Response:
    """A LIST answer that one object the encoder refuses cannot break: it is left out and
    logged."""
    try:
        return web.Response(body=orjson.dumps(body), content_type=JSON)
    except TypeError:
        items = []
        for item in body["items"]:
            try:
                orjson.dumps(item)
            except TypeError as e:
                meta = item.get("metadata") or {}
                log.error("LIST %s: %s/%s left out, it cannot be encoded: %s", body["kind"],
                          meta.get("namespace", ""), meta.get("name", ""), e)
                continue
            items.append(item)
        return web.Response(body=orjson.dumps({**body, "items": items}), content_type=JSON)


def error_response(err: errors.ApiError) -> web.Response:
    return json_response(err.status(), err.code, err.headers)


def encoded_events(events: list[tuple[str, Any]]) -> list[bytes]:
    """Watch lines; an event the encoder refuses is left out and logged, not the stream."""
    out = []
    for kind, obj in events:
        try:
            out.append(orjson.dumps({"type": kind, "object": obj}))
        except TypeError as e:
            meta = obj.get("metadata") or {}
            log.error("WATCH: %s event of %s/%s left out, it cannot be encoded: %s", kind,
                      meta.get("namespace", ""), meta.get("name", ""), e)
    return out


async def read_body(request: web.Request, default: Any = None,
                    protobuf: Callable[[bytes], Any] | None = None) -> Any:
    """The request's object: JSON, YAML, or protobuf (a built-in kind, `protobuf/`; or the
    kind's own `protobuf` decoder)."""
    raw = await request.read()
    if PROTOBUF in request.headers.get("Content-Type", ""):
        if protobuf is not None:
            return protobuf(raw)
        await protobuf_codec.load()
        return protobuf_codec.decode_body(raw)
    if not raw:
        if default is not None:
            return default
        raise errors.bad_request("the request body is empty")
    try:
        if "yaml" in request.headers.get("Content-Type", ""):
            return yaml.safe_load(raw)
        return orjson.loads(raw)
    except (orjson.JSONDecodeError, ValueError) as e:
        raise errors.bad_request(f"the request body is not valid JSON: {e}") from e


def query_int(query: Mapping[str, str], name: str) -> int | None:
    """An integer query parameter (None when absent or empty); 400 naming it if it is not."""
    return _query(query, name, int, "an integer")


def query_float(query: Mapping[str, str], name: str) -> float | None:
    return _query(query, name, float, "a number")


def query_time(query: Mapping[str, str], name: str) -> datetime | None:
    return _query(query, name, datetime.fromisoformat, "an RFC 3339 time")


def _query(query: Mapping[str, str], name: str, parse: Callable[[str], T], what: str
           ) -> T | None:
    text = query.get(name)
    if not text:
        return None
    try:
        return parse(text)
    except ValueError:
        raise errors.bad_request(f"query parameter {name!r} must be {what}, got {text!r}"
                                 ) from None


def dry_run(request: web.Request, options_kind: str, given: Any = None) -> bool:
    """Whether a write is a dry run: `dryRun=All` in the query or, for a delete, `dryRun:
    [All]` in its DeleteOptions (`given`). Any other value is refused as kube-apiserver's
    option validation does (422 on the `options_kind`, e.g. CreateOptions)."""
    values = [*request.query.getall("dryRun", [])]
    return dry_run_of(values + (given if isinstance(given, list) else
                                [] if given is None else [given]), options_kind)


def dry_run_of(values: Any, options_kind: str) -> bool:
    """Whether these `dryRun` values (a list, or None) ask for a dry run; 422 unless each is
    `All`, the only value kube-apiserver supports."""
    values = [] if values is None else values if isinstance(values, list) else [values]
    if any(v != "All" for v in values):
        listed = ", ".join(orjson.dumps(str(v)).decode() for v in values)
        message = f'Unsupported value: []string{{{listed}}}: supported values: "All"'
        raise errors.ApiError(
            422, "Invalid", f'{options_kind}.meta.k8s.io "" is invalid: dryRun: {message}',
            details={"group": "meta.k8s.io", "kind": options_kind, "causes": [
                {"reason": "FieldValueNotSupported", "message": message, "field": "dryRun"}]})
    return bool(values)


def check_kind(rt: ResourceType, body: dict) -> None:
    kind = body.get("kind")
    if kind and kind != rt.kind:
        raise errors.bad_request(f"the object kind {kind!r} does not match the resource "
                                 f"{rt.plural!r} (kind {rt.kind!r})")
