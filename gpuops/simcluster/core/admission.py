"""Admission: what every write goes through before the store, the resource's strategy.

As kube-apiserver's `BeforeCreate` / `BeforeUpdate` / `BeforeDelete`: a create is defaulted
and validated on a copy of the request's object, an update and a delete may be refused. The
per-resource rules are the strategies' (`registry/`); the API server, the controllers that
create pods, the node pools and scenario loading all admit through here.
"""

from __future__ import annotations

import copy
from typing import Any

from .resources import ResourceType
from .store import Store

Obj = dict[str, Any]


def admit_create(store: Store, rt: ResourceType, obj: Obj) -> Obj:
    """The object to store for a create of `obj` (a defaulted copy); ApiError if refused."""
    obj = copy.deepcopy(obj)
    meta = obj.get("metadata") or {}
    rt.strategy.prepare_for_create(store, rt, obj, meta.get("name") or meta.get(
        "generateName", ""))
    return obj


def admit_update(rt: ResourceType, old: Obj, new: Obj) -> Obj:
    rt.strategy.validate_update(rt, old, new)
    return new


def admit_delete(rt: ResourceType, obj: Obj) -> None:
    rt.strategy.validate_delete(obj)
