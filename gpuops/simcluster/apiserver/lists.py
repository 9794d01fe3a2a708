"""LIST with label and field selectors, and pagination (`limit` / `continue`) as kube-apiserver
pages: keys in (namespace, name) order, a continue token naming the last key and the list's
resourceVersion, the order cached until an object of the type is added or removed."""

from __future__ import annotations

import base64
import bisect
import builtins  # `list` below is Lister.list in the class body's annotations
from typing import Any

import orjson
from aiohttp import web

from ..core import errors
from ..core.resources import ResourceType
from ..core.selectors import (
    FieldRequirement,
    Requirement,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from ..core.store import Store
from .codecs import query_int
from .routing import Target
from .views import View


class Lister:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._sorted_keys: dict[str, tuple[int, list[tuple[str, str]]]] = {}

    async def list(self, request: web.Request, t: Target, view: View) -> web.Response:
        q = request.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"), t.rtype.kind)
        limit = query_int(q, "limit") or 0
        if not limit:
            items = self.store.list(t.rtype, t.namespace, labels, fields)
            return view.list_response(self.body(t.rtype, items, None))
        start_after, snapshot_rv = _decode_continue(q.get("continue"))
        page, next_key = self._page(t, labels, fields, limit, start_after)
        token = None
        if next_key is not None:
            token = _encode_continue(next_key, snapshot_rv or self.store.resource_version)
        return view.list_response(self.body(t.rtype, page, token, snapshot_rv))

    def body(self, rt: ResourceType, items: builtins.list[dict], token: str | None,
             rv: int | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(rv or self.store.resource_version)}
        if token:
            meta["continue"] = token
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                "items": items}

    def _page(self, t: Target, labels: builtins.list[Requirement],
              fields: builtins.list[FieldRequirement],
              limit: int, start_after: tuple[str, str] | None
              ) -> tuple[builtins.list[dict], tuple[str, str] | None]:
        keys = self._sorted(t.rtype)
        i = bisect.bisect_right(keys, start_after) if start_after else 0
        page: list[dict] = []
        while i < len(keys) and len(page) < limit:
            ns, name = keys[i]
            i += 1
            if t.namespace and ns != t.namespace:
                continue
            obj = self.store.find(t.rtype, ns or None, name)
            if obj is None:
                continue
            if (labels or fields) and not (labels_match(labels, obj["metadata"].get("labels"))
                                           and fields_match(fields, obj)):
                continue
            page.append(obj)
        more = i < len(keys) and page
        return page, (keys[i - 1] if more else None)

    def _sorted(self, rt: ResourceType) -> builtins.list[tuple[str, str]]:
        """Keys in (namespace, name) order, re-sorted only when the set of keys changed."""
        version = self.store.keyset_version(rt)
        cached = self._sorted_keys.get(rt.key)
        if cached is None or cached[0] != version:
            cached = (version, self.store.sorted_keys(rt))
            self._sorted_keys[rt.key] = cached
        return cached[1]


def _encode_continue(last: tuple[str, str], rv: int) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"ns": last[0], "name": last[1], "rv": rv})
                                    ).decode()


def _decode_continue(token: str | None) -> tuple[tuple[str, str] | None, int | None]:
    if not token:
        return None, None
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return (data["ns"], data["name"]), int(data["rv"])
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        raise errors.bad_request(f"invalid continue token {token!r}") from None
