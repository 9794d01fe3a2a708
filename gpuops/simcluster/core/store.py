"""Object storage with the apiserver's semantics: resourceVersions, conflicts, finalizers, watch.

Stored objects are never mutated in place: every write stores a new dict. Readers (the HTTP
layer, the controllers) may therefore hold a reference without copying, and must not mutate it.
What differs per resource (graceful deletion, whose status a write keeps) is the resource
type's strategy's (`registry/`). In-process components follow changes through listeners, each
for the types it names, as informers do. A write with `dry_run` (kube's `dryRun=All`) is checked
exactly as a real one and returns the object it would store, but stores nothing: no new
resourceVersion, no watch event, no listener called.
"""

from __future__ import annotations

import asyncio
import builtins  # `list` below is Store.list in the class body's annotations
import copy
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import errors
from .clock import VirtualClock, rfc3339
from .intfields import check_integer_fields
from .resources import ResourceRegistry, ResourceType
from .selectors import FieldRequirement, Requirement, fields_match, labels_match

# apimachinery's rand.String alphabet: no vowels, no look-alike digits (no accidental words)
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generated_suffix(length: int = 5) -> str:
    """What `generateName` appends, as kube-apiserver's name generator does."""
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(length))


Obj = dict[str, Any]
Listener = Callable[[ResourceType, str, Obj, "Obj | None"], None]


@dataclass(frozen=True)
class Change:
    rv: int
    rtype: ResourceType
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None


class Watcher:
    """One open watch: a queue of (type, object) filtered by namespace and selectors."""

    def __init__(self, rtype: ResourceType, namespace: str | None,
                 labels: list[Requirement], fields: list[FieldRequirement], maxsize: int) -> None:
        self.rtype = rtype
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue(maxsize)
        self.closed = False

    def _matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, meta.get("labels")) and fields_match(self.fields, obj)

    def translate(self, change: Change) -> tuple[str, Obj] | None:
        """The event this watcher sees: a MODIFIED that leaves the selection is a DELETED."""
        now = self._matches(change.obj)
        if change.type == "DELETED":
            return ("DELETED", change.obj) if now else None
        before = change.type == "MODIFIED" and self._matches(change.old)
        if now and before:
            return ("MODIFIED", change.obj)
        if now:
            return ("ADDED", change.obj)
        if before:
            return ("DELETED", change.obj)
        return None

    def offer(self, event: tuple[str, Obj]) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            # A watcher too slow to keep up is dropped, as the apiserver does; the client
            # re-watches from its last resourceVersion (or relists on 410).
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            while True:
                try:
                    self.queue.put_nowait(None)
                    return
                except asyncio.QueueFull:
                    self.queue.get_nowait()


class Store:
    def __init__(self, clock: VirtualClock, registry: ResourceRegistry | None = None, *,
                 history_window: int = 50_000, watch_queue_size: int = 100_000) -> None:
        self.clock = clock
        self.registry = registry or ResourceRegistry.with_builtins()
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._rv = 1
        self._history: deque[Change] = deque(maxlen=history_window)
        self._compacted_rv = 1  # resourceVersions at or below this are no longer watchable
        self._watchers: dict[str, set[Watcher]] = {}
        # (the resource keys it follows, or None for every type; the listener), in order
        self._listeners: list[tuple[frozenset[str] | None, Listener]] = []
        self._listeners_by_key: dict[str, list[Listener]] = {}  # derived from the above
        self._keysets: dict[str, int] = {}  # per type: bumped when an object is added or removed
        self.watch_queue_size = watch_queue_size

    # --- reading -------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._bucket(rt).get((namespace or "", name))
        if obj is None:
            raise errors.not_found(rt.plural, name, rt.group)
        return obj

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self._bucket(rt).get((namespace or "", name))

    def list(self, rt: ResourceType, namespace: str | None = None,
             labels: list[Requirement] | None = None,
             fields: list[FieldRequirement] | None = None) -> list[Obj]:
        items: Iterable[Obj] = self._bucket(rt).values()
        if namespace:
            items = (o for o in items if o["metadata"].get("namespace") == namespace)
        if labels:
            items = (o for o in items if labels_match(labels, o["metadata"].get("labels")))
        if fields:
            items = (o for o in items if fields_match(fields, o))
        return list(items)

    def keyset_version(self, rt: ResourceType) -> int:
        """Changes whenever an object of this type is added or removed (for cached orderings)."""
        return self._keysets.get(rt.key, 0)

    def sorted_keys(self, rt: ResourceType) -> builtins.list[tuple[str, str]]:
        return sorted(self._bucket(rt))

    def count(self, rt: ResourceType) -> int:
        return len(self._bucket(rt))

    # --- writing -------------------------------------------------------------------------------

    def create(self, rt: ResourceType, obj: Obj, namespace: str | None = None, *,
               dry_run: bool = False) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            ns = namespace or meta.get("namespace") or "default"
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            meta["namespace"] = ns
            if self.find(self._ns_type, None, ns) is None:
                raise errors.not_found("namespaces", ns)
        else:
            meta.pop("namespace", None)
            ns = ""
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + generated_suffix()
            else:
                raise errors.invalid(rt.kind, "", "metadata.name",
                                     "Required value: name or generateName is required")
        name = meta["name"]
        if (ns, name) in self._bucket(rt):
            raise errors.already_exists(rt.plural, name, rt.group)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.clock.now())
        meta.pop("deletionTimestamp", None)
        if "spec" in obj or rt.group:
            meta["generation"] = 1
        return self._commit(rt, "ADDED", obj, None, dry_run)

    def replace(self, rt: ResourceType, namespace: str | None, name: str, obj: Obj, *,
                subresource: str | None = None, dry_run: bool = False) -> Obj:
        """PUT semantics: optimistic concurrency on metadata.resourceVersion when given."""
        old = self.get(rt, namespace, name)
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not "
                                     f"match the name on the URL ({name})")
        given_rv = meta.get("resourceVersion")
        if given_rv and str(given_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt.plural, name, rt.group)
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:  # a precondition too
            raise errors.ApiError(409, "Conflict", f"Precondition failed: UID in precondition: "
                                  f"{meta['uid']}, UID in object meta: {old['metadata']['uid']}")
        return self._write(rt, old, new, subresource=subresource, dry_run=dry_run)

    def mutate(self, rt: ResourceType, namespace: str | None, name: str,
               change: Callable[[Obj], Any], *, subresource: str | None = None,
               dry_run: bool = False) -> Obj:
        """Read-modify-write of the latest version (what the controllers use)."""
        old = self.get(rt, namespace, name)
        new = copy.deepcopy(old)
        change(new)
        return self._write(rt, old, new, subresource=subresource, dry_run=dry_run)

    def _write(self, rt: ResourceType, old: Obj, new: Obj, *, subresource: str | None,
               dry_run: bool = False) -> Obj:
        old_meta, meta = old["metadata"], new.setdefault("metadata", {})
        if subresource == "status":
            # Only status changes through the status subresource, and who changed it (the
            # API server's field manager records it in managedFields).
            # Shallow: stored objects are never mutated, so the new version may share every
            # part of the old one but its (copied) metadata and its new status.
            owners = meta.get("managedFields", old_meta.get("managedFields"))
            new = {**old, "metadata": dict(old_meta), "status": new.get("status",
                                                                        old.get("status"))}
            meta = new["metadata"]
            if owners is None:
                meta.pop("managedFields", None)
            else:
                meta["managedFields"] = owners
        elif ("status" in rt.subresources and subresource is None
              and not rt.strategy.main_resource_writes_status):
            new["status"] = copy.deepcopy(old.get("status"))
            if new["status"] is None:
                new.pop("status")
        for immutable in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp",
                          "deletionGracePeriodSeconds"):
            if immutable in old_meta:
                meta[immutable] = old_meta[immutable]
            else:
                meta.pop(immutable, None)
        meta["generation"] = old_meta.get("generation", 1)
        if "generation" in old_meta and new.get("spec") != old.get("spec"):
            meta["generation"] += 1
        elif "generation" not in old_meta:
            meta.pop("generation")
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rt, new, dry_run)
        if _without_rv(new) == _without_rv(old):
            return old  # a no-op write keeps its resourceVersion, as the apiserver does
        return self._commit(rt, "MODIFIED", new, old, dry_run)

    def delete(self, rt: ResourceType, namespace: str | None, name: str, *,
               grace_period: int | None = None, uid: str | None = None,
               resource_version: str | None = None, dry_run: bool = False) -> Obj:
        old = self.get(rt, namespace, name)
        if uid and old["metadata"]["uid"] != uid:
            raise errors.ApiError(409, "Conflict", f"Precondition failed: UID in precondition: "
                                  f"{uid}, UID in object meta: {old['metadata']['uid']}")
        if resource_version and old["metadata"]["resourceVersion"] != resource_version:
            raise errors.conflict(rt.plural, name, rt.group)
        graceful, grace = rt.strategy.check_graceful_delete(old, grace_period)
        if old["metadata"].get("finalizers") or graceful:
            if old["metadata"].get("deletionTimestamp"):
                return old
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = rfc3339(self.clock.now())
            if graceful:
                new["metadata"]["deletionGracePeriodSeconds"] = grace
            return self._commit(rt, "MODIFIED", new, old, dry_run)
        return self._remove(rt, old, dry_run)

    def finalize_deletion(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """Remove an object whose deletion is under way (the kubelet's last word on a pod)."""
        obj = self.find(rt, namespace, name)
        if obj is None:
            return None
        return self._remove(rt, obj)

    def _remove(self, rt: ResourceType, obj: Obj, dry_run: bool = False) -> Obj:
        if dry_run:
            return obj  # as it would be at its removal, still at its resourceVersion
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        old = self._bucket(rt).pop(key)
        self._keysets[rt.key] = self._keysets.get(rt.key, 0) + 1
        obj = copy.copy(obj)
        obj["metadata"] = {**obj["metadata"]}
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._publish(Change(self._rv, rt, "DELETED", obj, old))
        return obj

    def _commit(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None,
                dry_run: bool = False) -> Obj:
        # Every write, a client's or a simulated component's: no stored object may hold an
        # integer its Go type cannot (a LIST or WATCH of it would fail for every client).
        check_integer_fields(rt.key, rt.kind, obj, tuple(
            k for k in ("spec",) if old is not None and k in obj and obj[k] is old.get(k)))
        if dry_run:
            # kube's dry-run storage: a new object has no resourceVersion yet, an updated one
            # the version it was read at.
            if old is None:
                obj["metadata"].pop("resourceVersion", None)
            else:
                obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return obj
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        meta = obj["metadata"]
        if kind == "ADDED":
            self._keysets[rt.key] = self._keysets.get(rt.key, 0) + 1
        self._bucket(rt)[(meta.get("namespace", ""), meta["name"])] = obj
        self._publish(Change(self._rv, rt, kind, obj, old))
        return obj

    def _publish(self, change: Change) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(change)
        for watcher in list(self._watchers.get(change.rtype.key, ())):
            event = watcher.translate(change)
            if event is not None:
                watcher.offer(event)
        for listener in self._listeners_of(change.rtype.key):
            listener(change.rtype, change.type, change.obj, change.old)

    # --- watching ------------------------------------------------------------------------------

    def add_listener(self, listener: Listener, *types: ResourceType,
                     replay: bool = False) -> None:
        """An in-process observer (a simulated component's informer) called on every change
        of the given `types` (none given: of every type), in the order listeners were added;
        with `replay`, first called with an ADDED for every object of them already stored."""
        if replay:
            for rt in types or self.registry.all():
                for obj in self.list(rt):
                    listener(rt, "ADDED", obj, None)
        self._listeners.append((frozenset(rt.key for rt in types) or None, listener))
        self._listeners_by_key.clear()

    def _listeners_of(self, key: str) -> builtins.list[Listener]:
        found = self._listeners_by_key.get(key)
        if found is None:
            found = self._listeners_by_key[key] = [
                listener for keys, listener in self._listeners if keys is None or key in keys]
        return found

    def watch(self, rt: ResourceType, namespace: str | None, resource_version: str | None,
              labels: builtins.list[Requirement],
              fields: builtins.list[FieldRequirement]) -> Watcher:
        watcher = Watcher(rt, namespace, labels, fields, self.watch_queue_size)
        if resource_version in (None, "", "0"):
            for obj in self.list(rt, namespace, labels, fields):
                watcher.offer(("ADDED", obj))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise errors.bad_request(f"invalid resource version {resource_version!r}") from None
            if since < self._compacted_rv:
                raise errors.gone(f"too old resource version: {since} ({self._compacted_rv})")
            for change in self._history:
                if change.rv > since and change.rtype.key == rt.key:
                    event = watcher.translate(change)
                    if event is not None:
                        watcher.offer(event)
        self._watchers.setdefault(rt.key, set()).add(watcher)
        return watcher

    def stop_watch(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.rtype.key, set()).discard(watcher)
        watcher.close()

    def drop_all_watches(self) -> int:
        """Fault injection: close every open watch connection."""
        count = 0
        for watchers in self._watchers.values():
            for watcher in list(watchers):
                watcher.close()
                count += 1
            watchers.clear()
        return count

    def compact(self) -> None:
        """Fault injection: forget the watch history so every older resourceVersion is 410."""
        self._history.clear()
        self._compacted_rv = self._rv

    def set_history_window(self, size: int) -> None:
        self._history = deque(self._history, maxlen=size)
        if self._history:
            self._compacted_rv = max(self._compacted_rv, self._history[0].rv - 1)

    # --- helpers -------------------------------------------------------------------------------

    @property
    def _ns_type(self) -> ResourceType:
        rt = self.registry.get("", "v1", "namespaces")
        assert rt is not None
        return rt

    def _bucket(self, rt: ResourceType) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(rt.key, {})

    def type(self, plural: str, group: str = "", version: str = "v1") -> ResourceType:
        rt = self.registry.get(group, version, plural)
        if rt is None:
            raise KeyError(f"unknown resource {group}/{version}/{plural}")
        return rt


def _without_rv(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}
