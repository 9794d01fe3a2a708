"""WATCH: a chunked stream of events from a resourceVersion on, with bookmarks and 410 Gone.

The store keeps the history and translates each change for the watcher's selectors; this is
the HTTP side: batching events that are already queued into one write, a BOOKMARK every 5 s
when asked, closing at `timeoutSeconds` (30 min by default), and an ERROR event with the 410
Status when the resourceVersion is older than the history.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from ..core import errors
from ..core.resources import ResourceType
from ..core.selectors import parse_field_selector, parse_label_selector, selecting_name
from ..core.store import Store, Watcher
from .codecs import JSON, query_float
from .routing import Target
from .views import View

BOOKMARK_EVERY_S = 5.0
DEFAULT_TIMEOUT_S = 1800.0
BATCH_EVENTS = 500  # queued events sent in one write at most


async def watch(store: Store, request: web.Request, t: Target, view: View
                ) -> web.StreamResponse:
    q = request.query
    labels = parse_label_selector(q.get("labelSelector"))
    fields = parse_field_selector(q.get("fieldSelector"), t.rtype.kind)
    if t.name:
        fields.append(selecting_name(t.name))
    timeout = query_float(q, "timeoutSeconds") or DEFAULT_TIMEOUT_S
    bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
    response = web.StreamResponse(headers={"Content-Type": JSON})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        watcher = store.watch(t.rtype, t.namespace, q.get("resourceVersion"), labels, fields)
    except errors.ApiError as e:
        if e.code != 410:
            raise
        await response.write(orjson.dumps({"type": "ERROR", "object": e.status()}) + b"\n")
        return response
    deadline = time.monotonic() + timeout
    try:
        await _stream(store, response, watcher, t.rtype, deadline, bookmarks, view)
    except ConnectionResetError:
        pass  # the client went away
    finally:
        store.stop_watch(watcher)
    return response


async def _stream(store: Store, response: web.StreamResponse, watcher: Watcher,
                  rt: ResourceType, deadline: float, bookmarks: bool, view: View) -> None:
    next_bookmark = time.monotonic() + BOOKMARK_EVERY_S
    while True:
        now = time.monotonic()
        wait = min(deadline, next_bookmark if bookmarks else deadline) - now
        if now >= deadline:
            return
        try:
            event = await asyncio.wait_for(watcher.queue.get(), timeout=max(wait, 0.001))
        except TimeoutError:
            if bookmarks and time.monotonic() >= next_bookmark:
                await response.write(orjson.dumps(_bookmark(store, rt)) + b"\n")
                next_bookmark = time.monotonic() + BOOKMARK_EVERY_S
            continue
        if event is None:
            return  # closed by the server: dropped watch or a slow consumer
        chunk = view.watch_lines([event])
        while not watcher.queue.empty() and len(chunk) < BATCH_EVENTS:
            more = watcher.queue.get_nowait()
            if more is None:
                if chunk:
                    await response.write(b"\n".join(chunk) + b"\n")
                return
            chunk += view.watch_lines([more])
        if chunk:
            await response.write(b"\n".join(chunk) + b"\n")


def _bookmark(store: Store, rt: ResourceType) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {
        "kind": rt.kind, "apiVersion": rt.api_version,
        "metadata": {"resourceVersion": str(store.resource_version)}}}
