"""The `scale` subresource (autoscaling/v1 Scale) of Deployments, ReplicaSets, StatefulSets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..core import errors
from ..core.store import Store
from .codecs import json_response
from .routing import Target


def scale_of(obj: dict) -> dict[str, Any]:
    meta = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    match = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "uid": meta["uid"], "resourceVersion": meta["resourceVersion"],
                         "creationTimestamp": meta["creationTimestamp"]},
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                       "selector": match}}


def set_scale(store: Store, t: Target, replicas: Any, *, dry_run: bool = False,
              track: Callable[[dict, dict], dict] | None = None) -> web.Response:
    """`track(old, new)`: `new`'s metadata with who scaled it recorded (the field manager)."""
    if not isinstance(replicas, int) or replicas < 0:
        raise errors.invalid("Scale", t.name or "", "spec.replicas",
                             f"Invalid value: {replicas!r}: must be greater than or "
                             "equal to 0")
    old = store.get(t.rtype, t.namespace, t.name or "")

    def change(o: dict) -> None:
        o.setdefault("spec", {})["replicas"] = replicas
        if track is not None:
            o["metadata"] = track(old, o)

    obj = store.mutate(t.rtype, t.namespace, t.name or "", change, dry_run=dry_run)
    return json_response(scale_of(obj))
