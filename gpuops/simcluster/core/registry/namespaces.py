"""Namespaces: Active on create, `default` and `kube-system` may not go, and deleting one
deletes everything in it at once (the namespace controller's job, done in the same request)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors
from .strategy import Strategy

if TYPE_CHECKING:
    from ..resources import ResourceType
    from ..store import Store

Obj = dict[str, Any]
UNDELETABLE = ("default", "kube-system")


class NamespaceStrategy(Strategy):
    main_resource_writes_status = True

    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("metadata", {}).setdefault("labels", {})[
            "kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")

    def validate_delete(self, obj: Obj) -> None:
        if obj["metadata"]["name"] in UNDELETABLE:
            raise errors.ApiError(403, "Forbidden", f'namespaces "{obj["metadata"]["name"]}" '
                                  "is forbidden: this namespace may not be deleted")

    def after_delete(self, store: Store, name: str) -> None:
        """Delete everything inside, then the namespace."""
        for rt in store.registry.all():
            if not rt.namespaced:
                continue
            for obj in store.list(rt, name):
                if store.find(rt, name, obj["metadata"]["name"]) is not None:
                    store.delete(rt, name, obj["metadata"]["name"], grace_period=0)
        ns_type = store.type("namespaces")
        if store.find(ns_type, None, name) is not None:
            store.finalize_deletion(ns_type, None, name)
