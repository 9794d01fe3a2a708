"""Kubernetes Events as the control plane writes them, with repeats compressed into `count`."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from .clock import rfc3339

if TYPE_CHECKING:
    from ..cluster import SimCluster


def record_event(cluster: SimCluster, involved: dict[str, Any], reason: str, message: str, *,
                 type: str = "Normal", component: str = "simcluster",
                 host: str | None = None) -> dict[str, Any]:
    """Write (or bump the count of) a core/v1 Event about `involved`.

    Same object + reason + message within the retention window -> one Event with count += 1,
    as the kubelet and scheduler's event recorders do.
    """
    store = cluster.store
    rt = store.type("events")
    meta = involved["metadata"]
    namespace = meta.get("namespace") or "default"
    digest = hashlib.sha1(f"{meta.get('uid')}|{reason}|{message}".encode()).hexdigest()[:10]
    name = f"{meta['name']}.{digest}"
    now = rfc3339(cluster.clock.now())
    existing = store.find(rt, namespace, name)
    if existing is not None:
        def bump(ev: dict[str, Any]) -> None:
            ev["count"] = ev.get("count", 1) + 1
            ev["lastTimestamp"] = now
        return store.mutate(rt, namespace, name, bump)
    event = {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": involved.get("kind"), "apiVersion": involved.get("apiVersion"),
                           "namespace": meta.get("namespace"), "name": meta["name"],
                           "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message, "type": type, "count": 1,
        "firstTimestamp": now, "lastTimestamp": now,
        "source": {"component": component, **({"host": host} if host else {})},
        "reportingComponent": component, "reportingInstance": host or component,
    }
    return store.create(rt, event, namespace)
