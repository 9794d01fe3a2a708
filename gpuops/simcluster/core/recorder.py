"""Kubernetes Events as the control plane writes them, with repeats compressed into `count`.

One `Recorder` per cluster, handed to every component that reports what it did (the
scheduler's `Scheduled`, the kubelet's `Pulled`, a controller's `SuccessfulCreate`), as
client-go's event recorder is handed to each controller.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .clock import VirtualClock, rfc3339
from .store import Store


class Recorder:
    def __init__(self, store: Store, clock: VirtualClock) -> None:
        self.store = store
        self.clock = clock
        self.events = store.type("events")

    def record(self, involved: dict[str, Any], reason: str, message: str, *,
               type: str = "Normal", component: str = "simcluster",
               host: str | None = None) -> dict[str, Any]:
        """Write (or bump the count of) a core/v1 Event about `involved`.

        Same object + reason + message within the retention window -> one Event with
        count += 1, as the kubelet and scheduler's event recorders do.
        """
        store, rt = self.store, self.events
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        digest = hashlib.sha1(f"{meta.get('uid')}|{reason}|{message}".encode()).hexdigest()[:10]
        name = f"{meta['name']}.{digest}"
        now = rfc3339(self.clock.now())
        existing = store.find(rt, namespace, name)
        if existing is not None:
            def bump(ev: dict[str, Any]) -> None:
                ev["count"] = ev.get("count", 1) + 1
                ev["lastTimestamp"] = now
            return store.mutate(rt, namespace, name, bump)
        event = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"kind": involved.get("kind"),
                               "apiVersion": involved.get("apiVersion"),
                               "namespace": meta.get("namespace"), "name": meta["name"],
                               "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": message, "type": type, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": component, **({"host": host} if host else {})},
            "reportingComponent": component, "reportingInstance": host or component,
        }
        return store.create(rt, event, namespace)
