"""DELETE of one object and of a collection, with kube-apiserver's options.

`gracePeriodSeconds`, `preconditions` (uid, resourceVersion), and `propagationPolicy` (or the
older `orphanDependents`): Background leaves the dependents to the garbage collector; Orphan and
Foreground on an object that has dependents put the collector's finalizer on it first, so it
stays (202) until the collector is done. Whether an object has dependents is the collector's
owner index, handed in as `has_dependents`; without a collector (a bare API server) nothing is
held back. A pod answers with itself even once gone; other objects with a Success Status.
A dry run (`dryRun=All` in the query or the DeleteOptions) answers the same with the object as
the deletion would leave it, and changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..core import errors
from ..core.admission import admit_delete
from ..core.clock import rfc3339
from ..core.ownership import FOREGROUND, ORPHAN, PROPAGATION_POLICIES, add_finalizer
from ..core.resources import ResourceType
from ..core.selectors import parse_field_selector, parse_label_selector
from ..core.store import Store
from .codecs import dry_run, json_response, read_body
from .lists import Lister
from .routing import Target

Obj = dict[str, Any]


class Deletion:
    def __init__(self, store: Store, lister: Lister,
                 has_dependents: Callable[[str], bool] | None) -> None:
        self.store = store
        self.lister = lister
        self.has_dependents = has_dependents

    async def delete(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        options = await read_body(request, default={}) or {}
        grace = request.query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        pre = options.get("preconditions") or {}
        dry = dry_run(request, "DeleteOptions", options.get("dryRun"))
        old = self.store.get(t.rtype, t.namespace, t.name)
        admit_delete(t.rtype, old)
        orphan = request.query.get("orphanDependents", options.get("orphanDependents"))
        held = self._hold_for_dependents(t.rtype, old, request.query.get(
                "propagationPolicy", options.get("propagationPolicy")),
                None if orphan is None else str(orphan).lower() == "true", pre, dry)
        if held is not None:
            pre = {**pre, "resourceVersion": None}  # checked before the finalizer went on
        if dry and held is not None:  # the finalizer holds it: it would only be marked
            obj = copy.deepcopy(held)
            obj["metadata"]["deletionTimestamp"] = rfc3339(self.store.clock.now())
        else:
            obj = self.store.delete(t.rtype, t.namespace, t.name,
                                    grace_period=_grace_period(grace), uid=pre.get("uid"),
                                    resource_version=pre.get("resourceVersion"), dry_run=dry)
        if dry:
            still_there = bool(obj["metadata"].get("deletionTimestamp"))
        else:
            t.rtype.strategy.after_delete(self.store, t.name)
            still_there = self.store.find(t.rtype, t.namespace, t.name) is not None
        if t.rtype.strategy.returns_deleted_object:
            return json_response(obj)
        if still_there:
            return json_response(obj, 202)
        return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Success",
                              "details": {"name": t.name, "group": t.rtype.group,
                                          "kind": t.rtype.plural,
                                          "uid": obj["metadata"]["uid"]}})

    async def delete_collection(self, request: web.Request, t: Target) -> web.Response:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), t.rtype.kind)
        items = self.store.list(t.rtype, t.namespace, labels, fields)
        if not dry_run(request, "DeleteOptions"):
            for obj in items:
                meta = obj["metadata"]
                if self.store.find(t.rtype, meta.get("namespace"), meta["name"]) is not None:
                    self.store.delete(t.rtype, meta.get("namespace"), meta["name"])
        return json_response(self.lister.body(t.rtype, items, None))

    def _hold_for_dependents(self, rt: ResourceType, obj: Obj, propagation_policy: str | None,
                             orphan_dependents: bool | None, preconditions: Obj,
                             dry_run: bool) -> Obj | None:
        """Validate propagationPolicy and, for Orphan or Foreground on an object that has
        dependents, add the finalizer the collector acts on: the object with it when it did
        (its resourceVersion moved; the preconditions were checked first), else None."""
        if propagation_policy is not None and propagation_policy not in PROPAGATION_POLICIES:
            raise errors.invalid("DeleteOptions", "", "propagationPolicy",
                                 f'Unsupported value: "{propagation_policy}": supported '
                                 'values: "Foreground", "Background", "Orphan"')
        if propagation_policy is None and orphan_dependents is not None:
            propagation_policy = "Orphan" if orphan_dependents else "Background"
        policy = propagation_policy or rt.strategy.default_propagation
        meta = obj["metadata"]
        if policy == "Background" or meta.get("deletionTimestamp"):
            return None
        if self.has_dependents is None or not self.has_dependents(meta["uid"]):
            return None
        pre = preconditions
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise errors.ApiError(409, "Conflict", f"Precondition failed: UID in precondition: "
                                  f"{pre['uid']}, UID in object meta: {meta['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(rt.plural, meta["name"], rt.group)
        finalizer = ORPHAN if policy == "Orphan" else FOREGROUND
        return self.store.mutate(rt, meta.get("namespace") or None, meta["name"],
                                 lambda o: add_finalizer(o, finalizer), dry_run=dry_run)


def _grace_period(value: Any) -> int | None:
    """`gracePeriodSeconds` of the query or the DeleteOptions, as an integer."""
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise errors.bad_request(f"gracePeriodSeconds must be an integer, got {value!r}"
                                 ) from None
