"""WATCH: a chunked stream of events from a resourceVersion on, with bookmarks and 410 Gone.

The store keeps the history and translates each change for the watcher's selectors; this is
the HTTP side: batching events that are already queued into one write, a BOOKMARK every 5 s
when asked, closing at `timeoutSeconds` (30 min by default), and an ERROR event with the 410
Status when the resourceVersion is older than the history. A streaming list
(`sendInitialEvents=true`, what client-go's WatchList and Helm's `--wait` send) gets the
current objects as ADDED events, then a BOOKMARK annotated `k8s.io/initial-events-end`
telling the client its initial list is complete.
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
    initial = q.get("sendInitialEvents") in ("true", "1")
    if initial and (q.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
        raise _invalid_list_options(q.get("resourceVersionMatch"), bookmarks)
    response = web.StreamResponse(headers={"Content-Type": JSON})
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        watcher = store.watch(t.rtype, t.namespace,
                              None if initial else q.get("resourceVersion"), labels, fields)
    except errors.ApiError as e:
        if e.code != 410:
            raise
        await response.write(orjson.dumps({"type": "ERROR", "object": e.status()}) + b"\n")
        return response
    deadline = time.monotonic() + timeout
    # (the store queued the initial ADDED events synchronously: they are the queue so far)
    initial_events = (watcher.queue.qsize(), str(store.resource_version)) if initial else None
    try:
        await _stream(store, response, watcher, t.rtype, deadline, bookmarks, view,
                      initial_events)
    except ConnectionResetError:
        pass  # the client went away
    finally:
        store.stop_watch(watcher)
    return response


async def _stream(store: Store, response: web.StreamResponse, watcher: Watcher,
                  rt: ResourceType, deadline: float, bookmarks: bool, view: View,
                  initial: tuple[int, str] | None = None) -> None:
    """`initial`: (how many queued events are the initial list, the resourceVersion it is
    at) of a streaming list, whose end is a bookmark."""
    next_bookmark = time.monotonic() + BOOKMARK_EVERY_S
    to_go, initial_rv = initial if initial is not None else (-1, "")
    while True:
        if to_go == 0:
            await response.write(orjson.dumps(_bookmark(store, rt, initial_rv)) + b"\n")
            to_go = -1
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
        to_go -= 1 if to_go > 0 else 0
        while not watcher.queue.empty() and len(chunk) < BATCH_EVENTS and to_go != 0:
            more = watcher.queue.get_nowait()
            to_go -= 1 if to_go > 0 else 0
            if more is None:
                if chunk:
                    await response.write(b"\n".join(chunk) + b"\n")
                return
            chunk += view.watch_lines([more])
        if chunk:
            await response.write(b"\n".join(chunk) + b"\n")


def _bookmark(store: Store, rt: ResourceType, initial_end: str | None = None
              ) -> dict[str, Any]:
    """A BOOKMARK at the store's resourceVersion, or the one ending a streaming list's
    initial events (`initial_end`, the version they are at)."""
    meta: dict[str, Any] = {"resourceVersion": initial_end or str(store.resource_version)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                           "metadata": meta}}


def _invalid_list_options(match: str | None, bookmarks: bool) -> errors.ApiError:
    """kube-apiserver's refusal of a streaming list without its companion options."""
    causes = []
    if match != "NotOlderThan":
        causes.append({"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                       "message": "Forbidden: sendInitialEvents requires setting "
                                  "resourceVersionMatch to NotOlderThan"})
    if not bookmarks:
        causes.append({"reason": "FieldValueRequired", "field": "allowWatchBookmarks",
                       "message": "Required value: allowWatchBookmarks must be set to true "
                                  "when sendInitialEvents is set"})
    text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    return errors.ApiError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: '
                           f"{'[' + text + ']' if len(causes) > 1 else text}",
                           details={"group": "meta.k8s.io", "kind": "ListOptions",
                                    "causes": causes})
