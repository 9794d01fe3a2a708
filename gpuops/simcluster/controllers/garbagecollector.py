"""The garbage collector: dependents follow their owners through `ownerReferences` (by uid).

As kube's garbage collector: when an owner is gone, each dependent whose owners are all gone
is deleted (Background propagation); one that still has a live owner only loses the dangling
reference. A dependent created pointing at an owner that does not exist is collected too.
`DELETE` with propagationPolicy=Orphan (the batch/v1 Job default) puts the `orphan` finalizer
on the owner: the collector strips the owner reference from every dependent, then the
finalizer. Foreground puts `foregroundDeletion`: dependents are deleted first and the owner
goes once none with blockOwnerDeletion is left. The API server's half (validating the policy,
adding the finalizer) is `apiserver/deletion.py`'s.
"""

from __future__ import annotations

from typing import Any

from ..core import errors
from ..core.clock import VirtualClock
from ..core.ownership import FOREGROUND, ORPHAN, OwnerIndex, add_finalizer, object_key
from ..core.podstate import is_terminating, without_owner
from ..core.resources import ResourceType
from ..core.store import Store
from ..core.workqueue import ControllerLoop

Obj = dict[str, Any]


class GarbageCollector(ControllerLoop[tuple[str, str, str, str]]):
    name = "garbage-collector"

    def __init__(self, store: Store, clock: VirtualClock, owners: OwnerIndex) -> None:
        super().__init__(store, clock)
        self.index = owners
        self._kinds: dict[tuple[str, str], ResourceType | None] = {}
        self.store.add_listener(self._on_change, replay=True)

    def _on_change(self, rtype: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        key = object_key(rtype, obj)
        if event == "DELETED":
            for dep in self.index.dependents(meta["uid"]):
                self.enqueue(("dependent", *dep))
            for ref in meta.get("ownerReferences") or ():
                owner = self._owner_key(ref, meta.get("namespace", ""))
                if owner is not None:
                    self.enqueue(("owner", *owner))  # a foreground owner may be free to go
            return
        if meta.get("deletionTimestamp") and set(meta.get("finalizers") or ()) & {
                ORPHAN, FOREGROUND}:
            self.enqueue(("owner", *key))
        if meta.get("ownerReferences") and (old is None or old["metadata"].get(
                "ownerReferences") != meta["ownerReferences"]):
            self.enqueue(("dependent", *key))  # check that its owners exist

    # --- sync ----------------------------------------------------------------------------------

    def sync(self, key: tuple[str, str, str, str]) -> None:
        role, rkey, namespace, name = key
        found = self.index.find((rkey, namespace, name))
        if found is None:
            return
        rt, obj = found
        if role == "dependent":
            self._collect_dependent(rt, obj)
        else:
            self._process_owner(rt, obj)

    def _collect_dependent(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        if is_terminating(obj):
            return
        refs = meta.get("ownerReferences") or []
        dangling = [r for r in refs if self._owner_absent(r, meta.get("namespace", ""))]
        if not dangling:
            return
        if len(dangling) < len(refs):
            gone = {r.get("uid") for r in dangling}

            def drop(o: Obj) -> None:
                for uid in gone:
                    without_owner(o, uid)
            self.store.mutate(rt, meta.get("namespace") or None, meta["name"], drop)
            return
        self.store.delete(rt, meta.get("namespace") or None, meta["name"], uid=meta["uid"])

    def _process_owner(self, rt: ResourceType, owner: Obj) -> None:
        meta = owner["metadata"]
        finalizers = meta.get("finalizers") or []
        if not meta.get("deletionTimestamp"):
            return
        uid = meta["uid"]
        if ORPHAN in finalizers:
            for dep_key in self.index.dependents(uid):
                found = self.index.find(dep_key)
                if found is not None:
                    dep_rt, dep = found
                    self.store.mutate(dep_rt, dep["metadata"].get("namespace") or None,
                                      dep["metadata"]["name"], lambda o: without_owner(o, uid))
            self._remove_finalizer(rt, owner, ORPHAN)
            return
        if FOREGROUND not in finalizers:
            return
        blocking = False
        for dep_key in self.index.dependents(uid):
            found = self.index.find(dep_key)
            if found is None:
                continue
            dep_rt, dep = found
            ref: dict[str, Any] = next((r for r in dep["metadata"].get("ownerReferences") or ()
                        if r.get("uid") == uid), {})
            blocking = blocking or bool(ref.get("blockOwnerDeletion"))
            if not is_terminating(dep):
                self._delete(dep_rt, dep, foreground=self.index.has_dependents(
                    dep["metadata"]["uid"]))
        if not blocking:
            self._remove_finalizer(rt, owner, FOREGROUND)

    # --- helpers -------------------------------------------------------------------------------

    def _delete(self, rt: ResourceType, obj: Obj, *, foreground: bool) -> None:
        ns, name = obj["metadata"].get("namespace") or None, obj["metadata"]["name"]
        if foreground:
            self.store.mutate(rt, ns, name, lambda o: add_finalizer(o, FOREGROUND))
        try:
            self.store.delete(rt, ns, name, uid=obj["metadata"]["uid"])
        except errors.ApiError as e:
            if e.code not in (404, 409):
                raise

    def _remove_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        def drop(o: Obj) -> None:
            o["metadata"]["finalizers"] = [f for f in o["metadata"].get("finalizers") or ()
                                           if f != finalizer]
            if not o["metadata"]["finalizers"]:
                del o["metadata"]["finalizers"]
        self.store.mutate(rt, obj["metadata"].get("namespace") or None, obj["metadata"]["name"],
                          drop)

    def _owner_type(self, ref: Obj) -> ResourceType | None:
        k = (ref.get("apiVersion", ""), ref.get("kind", ""))
        if k not in self._kinds:
            self._kinds[k] = self.store.registry.by_kind(*k)
        return self._kinds[k]

    def _owner_key(self, ref: Obj, namespace: str) -> tuple[str, str, str] | None:
        rt = self._owner_type(ref)
        if rt is None:
            return None
        return rt.key, namespace if rt.namespaced else "", ref.get("name", "")

    def _owner_absent(self, ref: Obj, namespace: str) -> bool:
        """Verified absent: the kind is known and no object of that name has that uid.
        An owner of an unknown kind is never presumed absent."""
        rt = self._owner_type(ref)
        if rt is None:
            return False
        owner = self.store.find(rt, namespace if rt.namespaced else None, ref.get("name", ""))
        return owner is None or owner["metadata"]["uid"] != ref.get("uid")
