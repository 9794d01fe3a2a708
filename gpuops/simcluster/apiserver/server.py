"""kube-apiserver's HTTP entry: the middleware, routing to a handler, and the write verbs.

Only the HTTP shape lives here; semantics (versions, conflicts, watch history) are the
store's, what differs per resource its strategy's (`core/registry/`, through
`core/admission.py`), lists are `lists.py`'s, watches `watch.py`'s, deletion `deletion.py`'s,
pod subresources (log, eviction, binding, proxy) `pods.py`'s (exec, attach, portforward
`streaming.py`'s refusal); the form a read answers in
(JSON, a Table of `printers/`, PartialObjectMetadata) `views.py`'s; the OpenAPI documents and
the unknown-field check of `fieldValidation` `openapi/`'s; who owns which field
(`managedFields`, server-side apply) `managedfields.py`'s. A dry run (`dryRun=All`) takes the
same path as the write, the store storing nothing. A bad request it detects is a
400 naming what is wrong; an exception from simcluster's own code is a 500 InternalError, as
kube-apiserver answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..core import errors
from ..core.admission import admit_create, admit_update
from ..core.clock import VirtualClock
from ..core.faults import FaultRegistry
from ..core.logs import LogStore
from ..core.patching import apply_patch
from ..core.podproxy import PodProxy
from ..core.resources import ResourceType
from ..core.store import Store
from . import access, discovery, health, serviceproxy, streaming, tables, views
from .codecs import check_kind, dry_run, error_response, json_response, read_body
from .deletion import Deletion
from .faults import ApiFaults, register_api_faults
from .lists import Lister
from .managedfields import FieldManager, is_apply, write_options
from .openapi import fields as field_validation
from .openapi.serve import OpenApi
from .pods import PodSubresources
from .printers import printer_for
from .routing import Target, not_found, resolve
from .scale import scale_of, set_scale
from .watch import watch

# Requests the API's own faults never touch: the simulator's admin API and the metrics.
NOT_KUBERNETES = ("/admin", "/metrics")
log = logging.getLogger("gpuops.simcluster.apiserver")


class ApiServer:
    def __init__(self, store: Store, clock: VirtualClock, logs: LogStore,
                 faults: FaultRegistry, *,
                 has_dependents: Callable[[str], bool] | None = None,
                 pod_proxy: PodProxy | None = None) -> None:
        """`has_dependents(uid)`: the garbage collector's owner index (None: no collector
        runs, so Orphan and Foreground deletion hold nothing back); `pod_proxy`: what answers
        on pods' ports (None: nothing does)."""
        self.store = store
        self.clock = clock
        self.faults = ApiFaults()
        self.lister = Lister(store)
        self.deletion = Deletion(store, self.lister, has_dependents)
        self.pods = PodSubresources(store, clock, logs, pod_proxy or PodProxy())
        self.openapi = OpenApi(store)
        self.fields = FieldManager(self.openapi, clock)
        register_api_faults(faults, self.faults, store)

    def add_routes(self, app: web.Application) -> None:
        """Every path not routed before: register it last."""
        app.router.add_route("*", "/{tail:.*}", self.handle)

    # --- entry point ---------------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith(NOT_KUBERNETES):
            try:
                await self.faults.before_request(request.method, request.path)
            except errors.ApiError as e:
                return error_response(e)
        try:
            return await handler(request)
        except errors.ApiError as e:
            return error_response(e)  # including a bad request, detected as such
        except web.HTTPException:
            raise  # aiohttp's own answers (a method its router does not allow)
        except Exception as e:  # a bug of simcluster's, not of the request
            log.exception("%s %s failed inside simcluster", request.method, request.path)
            return error_response(errors.internal(
                f"simcluster failed on {request.method} {request.path}: "
                f"{type(e).__name__}: {e}"))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["version"]:
            return json_response(discovery.VERSION_INFO)
        if health.is_health(parts):
            return health.health_response(parts, "verbose" in request.query)
        registry = self.store.registry
        if parts[:1] == ["openapi"]:
            return self.openapi.handle(request, parts[1:])
        if parts in (["api"], ["apis"]):  # aggregated discovery, when the client asks for it
            aggregated = discovery.aggregated_version(request.headers.get("Accept"))
            if aggregated is not None:
                return discovery.aggregated_response(registry, aggregated,
                                                     legacy=parts == ["api"])
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
                    raise not_found()
                return json_response(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise not_found()
        if not rest:
            doc = discovery.api_resource_list(registry, group, version)
            if doc is None:
                raise not_found()
            return json_response(doc)
        target = resolve(registry, group, version, rest)
        if request.query.get("watch") in ("true", "1"):
            target.watch = True
        return await self._dispatch(request, target)

    async def _dispatch(self, request: web.Request, t: Target) -> web.StreamResponse:
        method = request.method
        verb = _verb(method, t)
        if verb is not None and verb not in t.rtype.verbs:
            raise errors.method_not_allowed(f"the server does not allow this method on the "
                                            f"requested resource ({method} {request.path})")
        if t.name is None:
            if method == "GET":
                view = self._view(request, t.rtype)
                return await (watch(self.store, request, t, view) if t.watch
                              else self.lister.list(request, t, view))
            if method == "POST":
                return await self.create(request, t)
            if method == "DELETE":
                return await self.deletion.delete_collection(request, t)
        elif t.subresource in (None, "status", "scale", "finalize"):
            if method == "GET" and t.watch and t.subresource is None:  # one object's watch
                return await watch(self.store, request, t, self._view(request, t.rtype))
            if method == "GET":
                obj = self.store.get(t.rtype, t.namespace, t.name)
                if t.subresource == "scale":
                    return json_response(scale_of(obj))
                return self._view(request, t.rtype).object_response(obj)
            if method == "PUT":
                return await self.replace(request, t)
            if method == "PATCH":
                return await self.patch(request, t)
            if method == "DELETE" and t.subresource is None:
                return await self.deletion.delete(request, t)
        elif t.subresource == "log" and method == "GET":
            return await self.pods.read_log(request, t.namespace or "", t.name)
        elif t.subresource == "eviction" and method == "POST":
            dry = dry_run(request, "CreateOptions")
            return self.pods.evict(await read_body(request), t.namespace or "", t.name,
                                   dry_run=dry)
        elif t.subresource == "binding" and method == "POST":
            dry = dry_run(request, "CreateOptions")
            return self.pods.bind(await read_body(request), t.namespace or "", t.name,
                                  dry_run=dry)
        elif t.subresource == "proxy" and t.rtype.plural == "services":
            target = serviceproxy.endpoint(self.store, t.namespace or "", t.name)
            return await self.pods.proxy(request, t.namespace or "", target, t.proxy_path)
        elif t.subresource == "proxy":
            return await self.pods.proxy(request, t.namespace or "", t.name, t.proxy_path)
        elif t.subresource in streaming.STREAMING and method in ("GET", "POST"):
            raise streaming.refuse(self.store, t.rtype, t.namespace or "", t.name,
                                   t.subresource, request.query.get("container"))
        raise errors.method_not_allowed(f"the server does not allow this method on the "
                                        f"requested resource ({method} {request.path})")

    def _view(self, request: web.Request, rt: ResourceType) -> views.View:
        """The form a read answers in (JSON, Table, PartialObjectMetadata), from its Accept
        header; a Table uses the resource's printer and the cluster's clock for ages."""
        wanted = views.negotiate(request.headers.get("Accept"))
        if wanted.form == "json":
            return views.JSON_VIEW
        if wanted.form != "Table":
            return views.MetadataView(wanted)
        include = tables.include_object(request.query.get("includeObject"))
        crd = None
        if not rt.builtin:
            crd_type = self.store.registry.get("apiextensions.k8s.io", "v1",
                                               "customresourcedefinitions")
            if crd_type is not None:
                crd = self.store.find(crd_type, None, f"{rt.plural}.{rt.group}")
        printer = printer_for(rt.group, rt.version, rt.kind, builtin=rt.builtin, crd=crd)
        return views.TableView(printer, include, self.clock.time, wanted.api_version)

    # --- writes --------------------------------------------------------------------------------

    async def create(self, request: web.Request, t: Target) -> web.Response:
        rt = t.rtype
        dry = dry_run(request, "CreateOptions")
        manager, _ = write_options(request, "CreateOptions")
        review = access.is_review(rt.group, rt.kind)
        body = await read_body(request, protobuf=(
            lambda raw: access.from_protobuf(rt.group, rt.kind, raw)) if review else None)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if t.rtype.strategy.binds_pod:
            name = (body.get("metadata") or {}).get("name", "")
            return self.pods.bind(body, t.namespace or "", name, dry_run=dry)
        check_kind(t.rtype, body)
        body, warnings = self._check_fields(request, rt, body, "CreateOptions", decoded=True)
        if review:
            return json_response(access.review(rt.group, rt.kind, body), 201)
        body = self.fields.track(rt, None, admit_create(self.store, t.rtype, body), manager)
        return json_response(self.store.create(t.rtype, body, t.namespace, dry_run=dry), 201,
                             warnings)

    async def replace(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        dry = dry_run(request, "UpdateOptions")
        manager, _ = write_options(request, "UpdateOptions")
        body = await read_body(request)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        if t.subresource == "scale":
            return set_scale(self.store, t, (body.get("spec") or {}).get("replicas"),
                             dry_run=dry, track=self._scaled_by(t, manager))
        check_kind(t.rtype, body)
        body, warnings = self._check_fields(request, t.rtype, body, "UpdateOptions",
                                            decoded=True)
        old = self.store.get(t.rtype, t.namespace, t.name)
        body = self.fields.track(t.rtype, old, admit_update(t.rtype, old, body), manager,
                                 subresource=t.subresource)
        return json_response(self.store.replace(t.rtype, t.namespace, t.name, body,
                                                subresource=t.subresource, dry_run=dry),
                             headers=warnings)

    async def patch(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        ctype = request.headers.get("Content-Type", "")
        if is_apply(ctype):
            return await self.apply(request, t)
        dry = dry_run(request, "PatchOptions")
        manager, _ = write_options(request, "PatchOptions", patch=True)
        patch = await read_body(request)
        if "strategic-merge-patch" in ctype and not t.rtype.builtin:
            raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in "
                                  "an unknown format - accepted media types include: "
                                  "application/json-patch+json, application/merge-patch+json, "
                                  "application/apply-patch+yaml")
        old = self.store.get(t.rtype, t.namespace, t.name)
        if t.subresource == "scale":
            patched = apply_patch(ctype, scale_of(old), patch)
            return set_scale(self.store, t, (patched.get("spec") or {}).get("replicas"),
                             dry_run=dry, track=self._scaled_by(t, manager))
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
        new, warnings = self._check_fields(request, t.rtype, new, "PatchOptions", decoded=False)
        new = self.fields.track(t.rtype, old, admit_update(t.rtype, old, new), manager,
                                subresource=t.subresource)
        return json_response(self.store.replace(t.rtype, t.namespace, t.name, new,
                                                subresource=t.subresource, dry_run=dry),
                             headers=warnings)

    async def apply(self, request: web.Request, t: Target) -> web.Response:
        """Server-side apply: the configuration merged into the live object by the field
        manager (`managedfields.py`), or a create when there is none yet (201)."""
        assert t.name is not None
        dry = dry_run(request, "PatchOptions")
        manager, force = write_options(request, "PatchOptions", apply=True, patch=True)
        if t.subresource not in (None, "status"):
            raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was "
                                  "in an unknown format - accepted media types include: "
                                  "application/json-patch+json, "
                                  "application/merge-patch+json")
        config = await read_body(request)
        if not isinstance(config, dict):
            raise errors.bad_request("error decoding patch: the applied configuration must "
                                     "be an object")
        rt = t.rtype
        old = self.store.find(rt, t.namespace, t.name)
        if old is None and t.subresource is not None:
            raise errors.not_found(rt.plural, t.name, rt.group)
        new = self.fields.apply(rt, old, config, manager, force=force,
                                subresource=t.subresource, namespace=t.namespace, name=t.name)
        if old is None:
            made = admit_create(self.store, rt, new)
            return json_response(self.store.create(rt, made, t.namespace, dry_run=dry), 201)
        new = admit_update(rt, old, new)
        return json_response(self.store.replace(rt, t.namespace, t.name, new,
                                                subresource=t.subresource, dry_run=dry))

    def _scaled_by(self, t: Target, manager: str) -> Callable[[dict, dict], dict]:
        """Records a write through `scale` in managedFields, as the parent's `spec.replicas`
        owned by `manager` with subresource scale."""
        return lambda old, new: self.fields.track(t.rtype, old, new, manager,
                                                  subresource="scale")["metadata"]

    def _check_fields(self, request: web.Request, rt: ResourceType, obj: dict,
                      options_kind: str, *, decoded: bool
                      ) -> tuple[dict, dict[str, str] | None]:
        """(`obj` without the fields its kind's schema does not declare, the Warning headers)
        by `fieldValidation`: Strict refuses such a field with kube's strict decoding error (a
        decoded body's names its kind; a patch's, the patched object's, does not); Warn (the
        default) answers with a Warning header per field; Ignore only drops them."""
        how = field_validation.directive(request.query.get("fieldValidation"), options_kind)
        unknown, kept = self.openapi.unknown_fields(rt, obj)
        if not unknown or how == "Ignore":
            return kept, None
        if how == "Strict":
            error = "strict decoding error: " + ", ".join(unknown)
            if decoded:
                error = (f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                         f"{rt.kind}: {error}")
            raise errors.bad_request(error)
        return kept, {"Warning": ", ".join(
            '299 - "' + u.replace("\\", "\\\\").replace('"', '\\"') + '"'
            for u in unknown)}


def _verb(method: str, t: Target) -> str | None:
    """The verb a request on a resource (not a subresource) needs, as discovery lists them."""
    if t.subresource is not None:
        return None
    if t.name is None:
        return {"GET": "watch" if t.watch else "list", "POST": "create",
                "DELETE": "deletecollection"}.get(method)
    return {"GET": "watch" if t.watch else "get", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}.get(method)
