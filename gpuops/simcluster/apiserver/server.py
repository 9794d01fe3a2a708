"""The Kubernetes REST API over aiohttp: routing, CRUD, list pagination and watch streams.

Only the HTTP shape lives here; semantics (versions, conflicts, watch history) are the
store's, admission defaults are `admission.py`'s, pod subresources are `podapi.py`'s.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ..core import errors
from ..core.admission import admit_create, admit_delete, admit_update
from ..core.faults import ApiFaults
from ..core.intfields import check_integer_fields
from ..core.patching import apply_patch
from ..core.resources import ResourceType
from ..core.selectors import parse_field_selector, parse_label_selector
from . import discovery

if TYPE_CHECKING:
    from ..cluster import SimCluster

JSON = "application/json"
log = logging.getLogger("gpuops.simcluster.apiserver")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=JSON,
                        headers=headers)


def list_response(body: dict[str, Any]) -> web.Response:
    """A LIST answer that one object the encoder refuses cannot break: it is left out and
    logged (validation on write keeps such objects out; this is the last line)."""
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


@dataclass
class Target:
    """What a request path names."""

    rtype: ResourceType
    namespace: str | None
    name: str | None = None
    subresource: str | None = None
    watch: bool = False


class ApiServer:
    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.faults = ApiFaults()
        self._sorted_keys: dict[str, tuple[int, list[tuple[str, str]]]] = {}

    # --- entry point ---------------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith(("/admin", "/metrics")):
            try:
                await self.faults.before_request(request.method, request.path)
            except errors.ApiError as e:
                return error_response(e)
        try:
            return await handler(request)
        except errors.ApiError as e:
            return error_response(e)
        except (ValueError, KeyError, TypeError) as e:
            return error_response(errors.bad_request(f"{type(e).__name__}: {e}"))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["version"]:
            return json_response(discovery.VERSION_INFO)
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return web.Response(text="ok")
        registry = self.store.registry
        if parts == ["api"]:
            return json_response(discovery.api_versions(request.host))
        if parts == ["apis"]:
            return json_response(discovery.api_group_list(registry))
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            if len(parts) == 2:
                doc = discovery.api_group(registry, parts[1])
                if doc is None:
                    raise errors.ApiError(404, "NotFound", "the server could not find the "
                                          "requested resource")
                return json_response(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested "
                                  "resource")
        if not rest:
            doc = discovery.api_resource_list(registry, group, version)
            if doc is None:
                raise errors.ApiError(404, "NotFound", "the server could not find the "
                                      "requested resource")
            return json_response(doc)
        target = self._resolve(group, version, rest)
        if request.query.get("watch") in ("true", "1"):
            target.watch = True
        return await self._dispatch(request, target)

    def _resolve(self, group: str, version: str, rest: list[str]) -> Target:
        registry = self.store.registry
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            rt = registry.get(group, version, rest[2])
            if rt is not None and rt.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = registry.get(group, version, rest[0])
        if rt is None or len(rest) > 3:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested "
                                  "resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            raise errors.ApiError(404, "NotFound", f"the server could not find the requested "
                                  f"resource ({rt.plural}/{sub})")
        return Target(rt, namespace, name, sub, watch)

    async def _dispatch(self, request: web.Request, t: Target) -> web.StreamResponse:
        method = request.method
        from . import pods as podapi

        if t.name is None:
            if method == "GET":
                return await (self.watch(request, t) if t.watch else self.list(request, t))
            if method == "POST":
                return await self.create(request, t)
            if method == "DELETE":
                return await self.delete_collection(request, t)
        elif t.subresource in (None, "status", "scale", "finalize"):
            if method == "GET":
                obj = self.store.get(t.rtype, t.namespace, t.name)
                return json_response(_scale_of(obj) if t.subresource == "scale" else obj)
            if method == "PUT":
                return await self.replace(request, t)
            if method == "PATCH":
                return await self.patch(request, t)
            if method == "DELETE" and t.subresource is None:
                return await self.delete(request, t)
        elif t.subresource == "log" and method == "GET":
            return await podapi.read_log(self.cluster, request, t.namespace or "", t.name)
        elif t.subresource == "eviction" and method == "POST":
            return await podapi.evict(self.cluster, await _body(request), t.namespace or "",
                                      t.name)
        elif t.subresource == "binding" and method == "POST":
            return podapi.bind(self.cluster, await _body(request), t.namespace or "", t.name)
        raise errors.method_not_allowed(f"the server does not allow this method on the "
                                        f"requested resource ({method} {request.path})")

    # --- verbs ---------------------------------------------------------------------------------

    async def create(self, request: web.Request, t: Target) -> web.Response:
        body = await _body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if t.rtype.key == "bindings":
            from . import pods as podapi
            name = (body.get("metadata") or {}).get("name", "")
            return podapi.bind(self.cluster, body, t.namespace or "", name)
        _check_kind(t.rtype, body)
        body = admit_create(self.cluster, t.rtype, body, t.namespace)
        if _dry_run(request):
            check_integer_fields(t.rtype.key, t.rtype.kind, body)  # the store checks the rest
            return json_response(body, 201)
        obj = self.store.create(t.rtype, body, t.namespace)
        if t.rtype.key == "apiextensions.k8s.io/customresourcedefinitions":
            self.store.registry.register_crd(obj)
        return json_response(obj, 201)

    async def replace(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        body = await _body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if t.subresource == "scale":
            return self._set_scale(t, (body.get("spec") or {}).get("replicas"))
        _check_kind(t.rtype, body)
        old = self.store.get(t.rtype, t.namespace, t.name)
        body = admit_update(self.cluster, t.rtype, old, body)
        if _dry_run(request):
            check_integer_fields(t.rtype.key, t.rtype.kind, body)
            return json_response(body)
        return json_response(self.store.replace(t.rtype, t.namespace, t.name, body,
                                                subresource=t.subresource))

    async def patch(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        patch = await _body(request)
        ctype = request.headers.get("Content-Type", "")
        if "strategic-merge-patch" in ctype and not t.rtype.builtin:
            raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in "
                                  "an unknown format - accepted media types include: "
                                  "application/json-patch+json, application/merge-patch+json, "
                                  "application/apply-patch+yaml")
        old = self.store.get(t.rtype, t.namespace, t.name)
        if t.subresource == "scale":
            patched = apply_patch(ctype, _scale_of(old), patch)
            return self._set_scale(t, (patched.get("spec") or {}).get("replicas"))
        new = apply_patch(ctype, old, patch)
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise errors.bad_request("the patch removed the object's metadata")
        given_rv = new["metadata"].get("resourceVersion")
        if given_rv != old["metadata"]["resourceVersion"]:
            # A patch naming an old resourceVersion is a conditional update.
            if given_rv is not None and (patch if isinstance(patch, dict) else {}).get(
                    "metadata", {}).get("resourceVersion") is not None:
                raise errors.conflict(t.rtype.plural, t.name, t.rtype.group)
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        new = admit_update(self.cluster, t.rtype, old, new)
        if _dry_run(request):
            check_integer_fields(t.rtype.key, t.rtype.kind, new)
            return json_response(new)
        return json_response(self.store.replace(t.rtype, t.namespace, t.name, new,
                                                subresource=t.subresource))

    def _set_scale(self, t: Target, replicas: Any) -> web.Response:
        if not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid("Scale", t.name or "", "spec.replicas",
                                 f"Invalid value: {replicas!r}: must be greater than or "
                                 "equal to 0")
        obj = self.store.mutate(t.rtype, t.namespace, t.name or "",
                                lambda o: o.setdefault("spec", {}).update(replicas=replicas))
        return json_response(_scale_of(obj))

    async def delete(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        options = await _body(request, default={}) or {}
        grace = request.query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        pre = options.get("preconditions") or {}
        old = self.store.get(t.rtype, t.namespace, t.name)
        admit_delete(self.cluster, t.rtype, old)
        if _dry_run(request):
            return json_response(old)
        from ..controllers.garbagecollector import prepare_deletion
        orphan = request.query.get("orphanDependents", options.get("orphanDependents"))
        if prepare_deletion(self.cluster, t.rtype, old, request.query.get(
                "propagationPolicy", options.get("propagationPolicy")),
                None if orphan is None else str(orphan).lower() == "true", pre):
            pre = {**pre, "resourceVersion": None}  # checked before the finalizer went on
        obj = self.store.delete(t.rtype, t.namespace, t.name,
                                grace_period=None if grace is None else int(grace),
                                uid=pre.get("uid"), resource_version=pre.get("resourceVersion"))
        if t.rtype.key == "namespaces":
            from ..core.admission import delete_namespace_contents
            delete_namespace_contents(self.cluster, t.name)
        still_there = self.store.find(t.rtype, t.namespace, t.name) is not None
        if t.rtype.key == "pods" or still_there:
            return json_response(obj, 202 if still_there and t.rtype.key != "pods" else 200)
        return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Success",
                              "details": {"name": t.name, "group": t.rtype.group,
                                          "kind": t.rtype.plural,
                                          "uid": obj["metadata"]["uid"]}})

    async def delete_collection(self, request: web.Request, t: Target) -> web.Response:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), t.rtype.kind)
        items = self.store.list(t.rtype, t.namespace, labels, fields)
        if not _dry_run(request):
            for obj in items:
                meta = obj["metadata"]
                if self.store.find(t.rtype, meta.get("namespace"), meta["name"]) is not None:
                    self.store.delete(t.rtype, meta.get("namespace"), meta["name"])
        return json_response(self._list_body(t.rtype, items, None))

    # --- list and watch ------------------------------------------------------------------------

    async def list(self, request: web.Request, t: Target) -> web.Response:
        q = request.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"), t.rtype.kind)
        limit = int(q.get("limit", "0") or 0)
        if not limit:
            items = self.store.list(t.rtype, t.namespace, labels, fields)
            return list_response(self._list_body(t.rtype, items, None))
        start_after, snapshot_rv = _decode_continue(q.get("continue"))
        page, next_key = self._page(t, labels, fields, limit, start_after)
        token = None
        if next_key is not None:
            token = _encode_continue(next_key, snapshot_rv or self.store.resource_version)
        return list_response(self._list_body(t.rtype, page, token, snapshot_rv))

    def _page(self, t: Target, labels: list, fields: list, limit: int,
              start_after: tuple[str, str] | None) -> tuple[list[dict], tuple[str, str] | None]:
        keys = self._sorted(t.rtype)
        i = bisect.bisect_right(keys, start_after) if start_after else 0
        page: list[dict] = []
        while i < len(keys) and len(page) < limit:
            ns, name = keys[i]
            i += 1
            if t.namespace and ns != t.namespace:
                continue
            obj = self.store.find(t.rtype, ns or None, name)
            if obj is None:
                continue
            if labels or fields:
                from ..core.selectors import fields_match, labels_match
                if not (labels_match(labels, obj["metadata"].get("labels"))
                        and fields_match(fields, obj)):
                    continue
            page.append(obj)
        more = i < len(keys) and page
        return page, (keys[i - 1] if more else None)

    def _sorted(self, rt: ResourceType) -> list[tuple[str, str]]:
        """Keys in (namespace, name) order, re-sorted only when the set of keys changed."""
        version = self.store.keyset_version(rt)
        cached = self._sorted_keys.get(rt.key)
        if cached is None or cached[0] != version:
            cached = (version, self.store.sorted_keys(rt))
            self._sorted_keys[rt.key] = cached
        return cached[1]

    def _list_body(self, rt: ResourceType, items: list[dict], token: str | None,
                   rv: int | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(rv or self.store.resource_version)}
        if token:
            meta["continue"] = token
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                "items": items}

    async def watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"), t.rtype.kind)
        if t.name:
            from ..core.selectors import _COMMON_FIELDS, FieldRequirement
            fields.append(FieldRequirement("metadata.name", "=", t.name,
                                           _COMMON_FIELDS["metadata.name"]))
        timeout = float(q.get("timeoutSeconds", "0") or 0) or 1800.0
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        response = web.StreamResponse(headers={"Content-Type": JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            watcher = self.store.watch(t.rtype, t.namespace, q.get("resourceVersion"),
                                       labels, fields)
        except errors.ApiError as e:
            if e.code != 410:
                raise
            await response.write(orjson.dumps({"type": "ERROR", "object": e.status()}) + b"\n")
            return response
        deadline = time.monotonic() + timeout
        try:
            await self._stream(response, watcher, t.rtype, deadline, bookmarks)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.stop_watch(watcher)
        return response

    async def _stream(self, response: web.StreamResponse, watcher: Any, rt: ResourceType,
                      deadline: float, bookmarks: bool) -> None:
        bookmark_every = 5.0
        next_bookmark = time.monotonic() + bookmark_every
        while True:
            now = time.monotonic()
            wait = min(deadline, next_bookmark if bookmarks else deadline) - now
            if now >= deadline:
                return
            try:
                event = await asyncio.wait_for(watcher.queue.get(), timeout=max(wait, 0.001))
            except TimeoutError:
                if bookmarks and time.monotonic() >= next_bookmark:
                    await response.write(orjson.dumps(
                        {"type": "BOOKMARK", "object": {
                            "kind": rt.kind, "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(self.store.resource_version)}}})
                        + b"\n")
                    next_bookmark = time.monotonic() + bookmark_every
                continue
            if event is None:
                return  # closed by the server: dropped watch or a slow consumer
            chunk = _encoded_events([event])
            while not watcher.queue.empty() and len(chunk) < 500:
                more = watcher.queue.get_nowait()
                if more is None:
                    if chunk:
                        await response.write(b"\n".join(chunk) + b"\n")
                    return
                chunk += _encoded_events([more])
            if chunk:
                await response.write(b"\n".join(chunk) + b"\n")


# --- small helpers -----------------------------------------------------------------------------

def _encoded_events(events: list[tuple[str, Any]]) -> list[bytes]:
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


async def _body(request: web.Request, default: Any = None) -> Any:
    raw = await request.read()
    if not raw:
        if default is not None:
            return default
        raise errors.bad_request("the request body is empty")
    try:
        if "yaml" in request.headers.get("Content-Type", ""):
            import yaml
            return yaml.safe_load(raw)
        return orjson.loads(raw)
    except (orjson.JSONDecodeError, ValueError) as e:
        raise errors.bad_request(f"the request body is not valid JSON: {e}") from e


def _dry_run(request: web.Request) -> bool:
    return request.query.get("dryRun") == "All"


def _check_kind(rt: ResourceType, body: dict) -> None:
    kind = body.get("kind")
    if kind and kind != rt.kind:
        raise errors.bad_request(f"the object kind {kind!r} does not match the resource "
                                 f"{rt.plural!r} (kind {rt.kind!r})")


def _scale_of(obj: dict) -> dict[str, Any]:
    from ..core.selectors import selector_from_spec  # noqa: F401  (selector text below)
    meta = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    match = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "uid": meta["uid"], "resourceVersion": meta["resourceVersion"],
                         "creationTimestamp": meta["creationTimestamp"]},
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                       "selector": match}}


def _encode_continue(last: tuple[str, str], rv: int) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"ns": last[0], "name": last[1], "rv": rv})
                                    ).decode()


def _decode_continue(token: str | None) -> tuple[tuple[str, str] | None, int | None]:
    if not token:
        return None, None
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return (data["ns"], data["name"]), int(data["rv"])
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        raise errors.bad_request(f"invalid continue token {token!r}") from None


def build_app(cluster: SimCluster) -> web.Application:
    from ..admin import add_admin_routes
    from ..metrics.engine import add_metrics_route

    server = ApiServer(cluster)
    cluster.api = server  # type: ignore[attr-defined]
    app = web.Application(middlewares=[server.middleware], client_max_size=64 * 1024 * 1024)
    add_admin_routes(app, cluster, server)
    add_metrics_route(app, cluster)
    app.router.add_route("*", "/{tail:.*}", server.handle)
    return app
