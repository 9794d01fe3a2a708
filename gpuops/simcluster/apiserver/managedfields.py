"""The API server's side of field management: the `fieldManager` and `force` options of a
write, `metadata.managedFields` kept on every create, update and patch, and server-side apply
(`PATCH` with `application/apply-patch+yaml`).

The decisions are `fieldmanager/`'s (pure); this module reads the request's options, finds the
kind's schema (`openapi/`), times entries by the cluster's clock and answers kube-apiserver's
errors: 422 on bad options, 409 with a cause per field on an apply conflict, 500 for an applied
configuration that does not fit its schema (kube's typed conversion error). A write whose
objects do not fit their schema keeps the live object's managedFields, as kube's
`UpdateNoErrors` does. Only what comes through the API is tracked: simcluster's own
components (node pools, controllers, the kubelet) write to the store directly and leave
managedFields as they are. Where kube's would have been tracked from their first write, an
object they made is tracked from its first write through the API (kube itself leaves an
untracked object so until an apply), so `kubectl cordon` of a node a pool made is recorded.
"""

from __future__ import annotations

import copy
import logging
import unicodedata
from typing import Any

from aiohttp import web

from ..core import errors
from ..core.clock import VirtualClock, rfc3339
from ..core.resources import ResourceType
from .fieldmanager import entries, lastapplied, updater
from .fieldmanager.fieldset import FieldSet, field
from .fieldmanager.schema import TypedError, Types
from .fieldmanager.typed import same
from .openapi.serve import OpenApi

Obj = dict[str, Any]
log = logging.getLogger("gpuops.simcluster.apiserver")
MAX_MANAGER_LENGTH = 128
APPLY_PATCH = "application/apply-patch+yaml"


def is_apply(content_type: str) -> bool:
    return content_type.split(";")[0].strip() == APPLY_PATCH


def write_options(request: web.Request, options_kind: str, *, apply: bool = False,
                  patch: bool = False) -> tuple[str, bool]:
    """(the manager, force) of a write; 422 as kube's option validation. A write that names
    no manager is its User-Agent's product (`kubectl`, `OpenAPI-Generator`); an apply must
    name one, and only an apply may force."""
    given = request.query.get("fieldManager", "")
    problems: list[tuple[str, str, str]] = []  # (field, reason, message)
    force_text = request.query.get("force")
    if apply and not given:
        problems.append(("fieldManager", "FieldValueRequired",
                         "Required value: is required for apply patch"))
    if patch and not apply and force_text is not None:
        problems.append(("force", "FieldValueForbidden",
                         "Forbidden: may not be specified for non-apply patch"))
    if len(given.encode()) > MAX_MANAGER_LENGTH:
        problems.append(("fieldManager", "FieldValueTooLong",
                         f"Too long: may not be more than {MAX_MANAGER_LENGTH} bytes"))
    for i, ch in enumerate(given):
        if not ch.isprintable() and ch != " ":
            problems.append(("fieldManager", "FieldValueInvalid",
                             (f"Invalid value: {given!r}: invalid character "
                              f"U+{ord(ch):04X} {unicodedata.name(ch, '')!r} "
                              f"(at position {i})")))
    if problems:
        text = ", ".join(f"{f}: {m}" for f, _, m in problems)
        text = f"[{text}]" if len(problems) > 1 else text
        raise errors.ApiError(
            422, "Invalid", f'{options_kind}.meta.k8s.io "" is invalid: {text}',
            details={"group": "meta.k8s.io", "kind": options_kind, "causes": [
                {"reason": r, "message": m, "field": f} for f, r, m in problems]})
    force = False
    if force_text is not None:
        if force_text.lower() not in ("true", "false", "1", "0", "t", "f"):
            raise errors.bad_request(f'strconv.ParseBool: parsing "{force_text}": '
                                     "invalid syntax")
        force = force_text.lower() in ("true", "1", "t")
    return given or _user_agent_product(request.headers.get("User-Agent", "")), force


def _user_agent_product(agent: str) -> str:
    return "".join(ch for ch in agent.split("/")[0] if ch.isprintable())[:MAX_MANAGER_LENGTH]


class FieldManager:
    def __init__(self, openapi: OpenApi, clock: VirtualClock) -> None:
        self.openapi = openapi
        self.clock = clock
        self._types: dict[int, tuple[object, Types]] = {}

    def track(self, rt: ResourceType, live: Obj | None, new: Obj, manager: str, *,
              subresource: str | None = None) -> Obj:
        """`new` (a copy) with the managedFields after `manager` writes it over `live`
        (None: a create). A write may set managedFields itself (a PUT of them; `[]` forgets
        every owner), except through a subresource."""
        new = copy.copy(new)
        meta = new["metadata"] = dict(new.get("metadata") or {})
        given = meta.pop("managedFields", None)
        live_entries = (live or {}).get("metadata", {}).get("managedFields")
        if subresource:
            given = None
        try:
            if entries.is_reset(given):
                managed = entries.Managed()
            else:
                managed = entries.decode(given) if given else entries.Managed()
                if not managed.fields:
                    managed = entries.decode(live_entries)
        except ValueError:
            managed = _decoded_or_empty(live_entries)
        types = self.types(rt)
        before = _untracked(live) if live is not None else updater.empty_like(new)
        try:
            managed = updater.update(
                types, before, _untracked(new), managed, manager, api_version=rt.api_version,
                subresource=subresource or "", reset=_reset(rt, new, subresource),
                now=self._now(), start_tracking=True)
        except TypedError:
            return _with_entries(new, live_entries)
        except Exception:  # kube's UpdateNoErrors: a write never fails on field tracking
            log.exception("[SHOULD NOT HAPPEN] failed to update managedFields of %s %s/%s "
                          "(the live object's kept)", rt.kind, meta.get("namespace", ""),
                          meta.get("name", ""))
            return _with_entries(new, live_entries)
        unchanged = live is not None and same(_bare(new), _bare(live))
        return _with_entries(new, entries.encode(managed), live_entries if unchanged else None)

    def apply(self, rt: ResourceType, live: Obj | None, config: Obj, manager: str, *,
              force: bool, subresource: str | None, namespace: str | None, name: str) -> Obj:
        """The object after `manager` applies `config` to `live` (None: it does not exist
        yet), with its managedFields; ApiError for a configuration kube refuses, 409 on a
        conflict."""
        gvk = f"{rt.api_version if rt.group else '/' + rt.version}, Kind={rt.kind}"
        given_gvk = f"{config.get('apiVersion') or ''}, Kind={config.get('kind') or ''}"
        if "/" not in (config.get("apiVersion") or ""):
            given_gvk = "/" + given_gvk
        if given_gvk != gvk:
            raise errors.bad_request(f"invalid object type: {given_gvk}")
        meta = config.get("metadata")
        if not isinstance(meta, dict):
            meta = config["metadata"] = {}
        if meta.get("managedFields") is not None:
            raise errors.bad_request("metadata.managedFields must be nil")
        if rt.namespaced and namespace and meta.get("namespace", namespace) != namespace:
            raise errors.bad_request("the namespace of the provided object does not match "
                                     "the namespace sent on the request")
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not "
                                     f"match the name on the URL ({name})")
        live_entries = (live or {}).get("metadata", {}).get("managedFields")
        try:
            managed = entries.decode(live_entries)
        except ValueError as e:
            raise errors.internal(f"failed to decode managed fields: {e}") from None
        types = self.types(rt)
        start = _untracked(live) if live is not None else updater.empty_like(config)
        try:
            merged, managed = lastapplied.apply(
                types, start, config, managed, manager, api_version=rt.api_version,
                subresource=subresource or "", force=force,
                reset=_reset(rt, config, subresource), now=self._now())
        except updater.Conflicts as e:
            raise errors.ApiError(409, "Conflict", e.message(),
                                  details={"causes": e.causes()}) from None
        except TypedError as e:
            where = f"{meta.get('namespace') or namespace or ''}/{name}"
            raise errors.ApiError(500, "", f"failed to create typed patch object ({where}; "
                                  f"{gvk}): {e}") from None
        out = merged if merged is not None else start
        if live is None:
            out.setdefault("metadata", {})["name"] = name
        return _with_entries(out, entries.encode(managed),
                             live_entries if merged is None else None)

    def types(self, rt: ResourceType) -> Types:
        root, schemas = self.openapi.kind_schemas(rt)
        found = self._types.get(id(root))
        if found is None or found[0] is not root:
            if len(self._types) > 1024:
                self._types.clear()
            found = self._types[id(root)] = (root, Types(root, schemas))
        return found[1]

    def _now(self) -> str:
        return rfc3339(self.clock.now())


def _untracked(obj: Obj) -> Obj:
    """`obj` without its managedFields (they are no field anyone owns)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _bare(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    return {**obj, "metadata": {k: v for k, v in meta.items()
                                if k not in ("managedFields", "resourceVersion")}}


def _decoded_or_empty(found: Any) -> entries.Managed:
    try:
        return entries.decode(found)
    except ValueError:
        return entries.Managed()


def _with_entries(obj: Obj, found: list | None, live: list | None = None) -> Obj:
    """`obj` with these managedFields; `live`'s (those of an object this write leaves as it
    was) where they differ only in their times (kube's IgnoreManagedFieldsTimestamps: a
    write that changes nothing stores nothing)."""
    if found is not None and live is not None and entries.without_times(
            found) == entries.without_times(live):
        found = live
    obj = {**obj, "metadata": dict(obj.get("metadata") or {})}
    if found:
        obj["metadata"]["managedFields"] = found
    else:
        obj["metadata"].pop("managedFields", None)
    return obj


def _reset(rt: ResourceType, obj: Obj, subresource: str | None) -> FieldSet:
    """The fields an endpoint resets, which nobody owns through it: status through the main
    resource (where status is a subresource), everything but status through `status`."""
    if subresource == "status":
        return FieldSet.of(*((field(k),) for k in obj if k not in (
            "status", "metadata", "apiVersion", "kind")))
    if "status" in rt.subresources and not rt.strategy.main_resource_writes_status:
        return FieldSet.of((field("status"),))
    return FieldSet()
