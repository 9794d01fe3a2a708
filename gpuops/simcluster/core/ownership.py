"""Who owns what, kept current from store changes: the informer indexes the controllers share.

kube-controller-manager's controllers find "the pods of this ReplicaSet" through informer
indexes rather than by listing the namespace; simcluster does the same with one listener that
maps owner uid -> dependents and keeps the orphans (no controller) of adoptable kinds. A sync
then costs what its own objects cost, not what the cluster holds (100,000 pods).

The finalizers of Orphan and Foreground deletion are here too: the API server's DELETE puts
them on an owner that has dependents, the garbage collector acts on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .podstate import controller_ref
from .resources import ResourceType
from .store import Store

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (resource key, namespace, name)

ADOPTABLE = frozenset({"pods", "apps/replicasets"})
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def add_finalizer(obj: Obj, finalizer: str) -> None:
    """Add `finalizer` to a mutable copy, once."""
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)


def object_key(rtype: ResourceType, obj: Obj) -> Key:
    meta = obj["metadata"]
    return rtype.key, meta.get("namespace", ""), meta["name"]


def _owner_uids(obj: Obj | None) -> tuple[str, ...]:
    if obj is None:
        return ()
    return tuple(r.get("uid", "") for r in obj["metadata"].get("ownerReferences") or ())


class OwnerIndex:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._dependents: dict[str, set[Key]] = {}
        self._orphans: dict[tuple[str, str], set[str]] = {}
        self._types: dict[str, ResourceType] = {}
        store.add_listener(self._on_change, replay=True)

    # --- maintenance (a store listener) --------------------------------------------------------

    def _on_change(self, rtype: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        key = object_key(rtype, obj)
        before = _owner_uids(old)
        after = () if event == "DELETED" else _owner_uids(obj)
        if before != after:
            self._types.setdefault(rtype.key, rtype)
            for uid in before:
                deps = self._dependents.get(uid)
                if deps is not None:
                    deps.discard(key)
                    if not deps:
                        del self._dependents[uid]
            for uid in after:
                self._dependents.setdefault(uid, set()).add(key)
        if rtype.key in ADOPTABLE:
            bucket_key = (rtype.key, key[1])
            orphan = event != "DELETED" and controller_ref(obj) is None
            if orphan:
                self._orphans.setdefault(bucket_key, set()).add(key[2])
            elif old is None or controller_ref(old) is None:
                bucket = self._orphans.get(bucket_key)
                if bucket is not None:
                    bucket.discard(key[2])

    # --- queries -------------------------------------------------------------------------------

    def dependents(self, owner_uid: str) -> list[Key]:
        return sorted(self._dependents.get(owner_uid, ()))

    def has_dependents(self, owner_uid: str) -> bool:
        return bool(self._dependents.get(owner_uid))

    def resource_type(self, key: str) -> ResourceType | None:
        """The type stored under `key` (`apps/replicasets`); None if no such type is known."""
        found = self._types.get(key)
        if found is None:
            found = next((rt for rt in self.store.registry.all() if rt.key == key), None)
        return found

    def find(self, key: Key) -> tuple[ResourceType, Obj] | None:
        """The object under a key from `dependents` (or `object_key`), with its type."""
        rkey, namespace, name = key
        rt = self.resource_type(rkey)
        if rt is None:
            return None
        obj = self.store.find(rt, namespace or None, name)
        return None if obj is None else (rt, obj)

    def controlled(self, owner_uid: str, rt: ResourceType) -> list[Obj]:
        """Objects of type `rt` whose controller reference is `owner_uid`."""
        found = []
        for rkey, ns, name in self._dependents.get(owner_uid, ()):
            if rkey != rt.key:
                continue
            obj = self.store.find(rt, ns or None, name)
            if obj is not None:
                ref = controller_ref(obj)
                if ref is not None and ref.uid == owner_uid:
                    found.append(obj)
        return found

    def orphans(self, rt: ResourceType, namespace: str) -> Iterable[Obj]:
        """Objects of an adoptable type in `namespace` that no controller owns."""
        for name in list(self._orphans.get((rt.key, namespace), ())):
            obj = self.store.find(rt, namespace, name)
            if obj is not None and controller_ref(obj) is None:
                yield obj
