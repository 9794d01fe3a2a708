"""A list+watch loop over the official client that never misses an update.

It lists (paginated), then watches from the list's resourceVersion; after a dropped
connection it re-watches from the last resourceVersion it saw; on 410 Gone it relists and
hands the whole list to `on_relist` so the caller can reconcile what happened meanwhile.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger("gpuops.sensors.watch")

Obj = dict[str, Any]


class WatchLoop:
    def __init__(self, name: str, list_fn: Callable[..., Any], *,
                 on_event: Callable[[str, Obj], None],
                 on_relist: Callable[[list[Obj]], None],
                 page_size: int = 500, watch_timeout_s: int = 300,
                 stop: threading.Event | None = None) -> None:
        self.name = name
        self.list_fn = list_fn
        self.on_event = on_event
        self.on_relist = on_relist
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.stop = stop or threading.Event()
        self.resource_version: str | None = None
        self.relists = 0
        self.reconnects = 0

    def _list(self) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        token, rv = None, ""
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            body = json.loads(self.list_fn(**kwargs).data)
            items.extend(body["items"])
            rv = rv or body["metadata"]["resourceVersion"]
            token = body["metadata"].get("continue")
            if not token:
                return items, rv

    def relist(self) -> None:
        items, rv = self._list()
        self.relists += 1
        self.on_relist(items)
        self.resource_version = rv

    def run(self) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self._watch_once()
                backoff = 0.5
            except ApiException as e:
                if e.status == 410:
                    log.info("%s: resourceVersion %s expired (410); relisting", self.name,
                             self.resource_version)
                    self.resource_version = None
                    continue
                log.warning("%s: API error %s; retrying in %.1fs", self.name, e.status, backoff)
                self._pause(backoff)
                backoff = min(backoff * 2, 30)
            except Exception as e:  # noqa: BLE001 - connection faults of every flavour
                log.warning("%s: watch failed (%s); retrying in %.1fs", self.name, e, backoff)
                self._pause(backoff)
                backoff = min(backoff * 2, 30)

    def _pause(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def _watch_once(self) -> None:
        """One watch request, read line by line.

        Not `watch.Watch().stream(deserialize=False)`: in kubernetes 37.0.1 that path raises
        KeyError('raw_object') on an ERROR event (a 410), instead of an ApiException."""
        resp = self.list_fn(watch=True, resource_version=self.resource_version,
                            timeout_seconds=self.watch_timeout_s, allow_watch_bookmarks=True,
                            _preload_content=False, _request_timeout=self.watch_timeout_s + 30)
        self.reconnects += 1
        try:
            for line in iter_resp_lines(resp):
                if self.stop.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiException(status=obj.get("code", 500),
                                       reason=f"{obj.get('reason')}: {obj.get('message')}")
                if event.get("type") != "BOOKMARK":
                    self.on_event(event["type"], obj)
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = rv
        finally:
            resp.close()
            resp.release_conn()
