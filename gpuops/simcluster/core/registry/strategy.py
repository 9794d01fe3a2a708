"""The strategy every resource has, and what a resource without a special one gets.

A custom resource (a CRD's), a ConfigMap or a Service gets the generic strategy: status is
the controllers' to write (dropped on create), updates are not checked beyond the store's
integer fields, deletion is immediate and Background.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..resources import ResourceType
    from ..store import Store

Obj = dict[str, Any]


class Strategy:
    # A write through the main resource keeps the stored status (the status subresource's),
    # unless the main resource carries the status (Namespaces).
    main_resource_writes_status = False
    # `propagationPolicy` of a DELETE that names none.
    default_propagation = "Background"
    # A DELETE answers with the object even once it is gone (Pods), not with a Status.
    returns_deleted_object = False
    # A create of this resource is a pod's binding (`bindings`).
    binds_pod = False

    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        """Default and validate a new object in place (a copy of the request's); `name` is
        its name or generateName, for messages."""
        if "status" in rt.subresources:
            obj.pop("status", None)  # status is the controllers' to write

    def validate_update(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        """Refuse an update the resource does not allow (422)."""

    def validate_delete(self, obj: Obj) -> None:
        """Refuse a delete the resource does not allow (403)."""

    def after_delete(self, store: Store, name: str) -> None:
        """What a deletion sets off at once (a Namespace's contents go)."""

    def check_graceful_delete(self, obj: Obj, grace_period: int | None) -> tuple[bool, Any]:
        """(whether a delete leaves the object terminating rather than removing it at once,
        its deletionGracePeriodSeconds then), as kube's `CheckGracefulDelete`."""
        return False, None


GENERIC = Strategy()
