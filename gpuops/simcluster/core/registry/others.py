"""The built-in resources whose strategy is a small difference from the generic one:
Nodes (their kubelet reports status on create), PriorityClasses (a value is required) and
CustomResourceDefinitions (registering one serves its resource at once, Established)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors
from .strategy import Strategy

if TYPE_CHECKING:
    from ..resources import ResourceType
    from ..store import Store

Obj = dict[str, Any]


class NodeStrategy(Strategy):
    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        """A node registers with its status (capacity, conditions), as a kubelet does."""


class PriorityClassStrategy(Strategy):
    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        if not isinstance(obj.get("value"), int):
            raise errors.invalid(rt.kind, name, "value", "Required value")


class CustomResourceDefinitionStrategy(Strategy):
    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        try:
            store.registry.register_crd(obj)
        except ValueError as e:
            raise errors.invalid(rt.kind, name, "spec", str(e)) from e
        obj["status"] = {"conditions": [{"type": "Established", "status": "True"},
                                        {"type": "NamesAccepted", "status": "True"}],
                         "acceptedNames": obj["spec"]["names"]}
