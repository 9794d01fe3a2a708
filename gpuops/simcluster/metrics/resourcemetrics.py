"""metrics.k8s.io/v1beta1: NodeMetrics and PodMetrics, what metrics-server serves and `kubectl
top` reads, from the use `resourceusage.py` simulates.

In a cluster this group is an aggregated API (an APIService in front of metrics-server): the
group and its two resources are in discovery like any other (kubectl top checks for it there
first), their objects are made at each read and never stored, and only `get` and `list` are
served. So the types are registered for discovery while the requests are answered here, on a
route the cluster registers before the API server's own. Each object carries the labels of
its node or pod (label and field selectors apply to those), the read's time as its timestamp
and creationTimestamp, and a 15 s window; CPU is in nanocores and memory in Ki, as
metrics-server writes them. Nodes that are not Ready and pods with no running container have
no metrics (a get answers 404 as metrics-server does).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from gpuops.common.quantity import format_bytes

from ..core import errors
from ..core.clock import VirtualClock, rfc3339
from ..core.resources import ResourceRegistry, ResourceType
from ..core.selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from ..core.store import Store
from .metricstable import cpu_quantity, metrics_table
from .resourceusage import Usage, node_usage, pod_usage

GROUP, VERSION = "metrics.k8s.io", "v1beta1"
READ_ONLY = ("get", "list")
NODE_METRICS = ResourceType(GROUP, VERSION, "NodeMetrics", "nodes", False, (), (), READ_ONLY)
POD_METRICS = ResourceType(GROUP, VERSION, "PodMetrics", "pods", True, (), (), READ_ONLY)
WINDOW = "15s"
Obj = dict[str, Any]


class ResourceMetricsApi:
    def __init__(self, store: Store, clock: VirtualClock) -> None:
        self.store = store
        self.clock = clock
        self.nodes = store.type("nodes")
        self.pods = store.type("pods")

    @staticmethod
    def register(registry: ResourceRegistry) -> None:
        """The group's resources, for discovery."""
        for rt in (NODE_METRICS, POD_METRICS):
            registry.register(rt)

    def add_routes(self, app: web.Application) -> None:
        """Before the API server's catch-all: the group version's own discovery document
        stays the API server's."""
        app.router.add_get(f"/apis/{GROUP}/{VERSION}/{{tail:.+}}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        parts = [p for p in request.match_info["tail"].split("/") if p]
        query = request.query
        if query.get("watch") in ("true", "1"):  # metrics-server's storage has no watch
            raise errors.method_not_allowed("the server does not allow this method on the "
                                            "requested resource")
        if parts[:1] == ["nodes"] and len(parts) <= 2:
            name = parts[1] if len(parts) == 2 else None
            return _answer(request, NODE_METRICS, name, self.node_metrics(
                None if name else query.get("labelSelector"),
                None if name else query.get("fieldSelector"), name))
        namespace = None
        if parts[:1] == ["namespaces"] and len(parts) >= 3:
            namespace, parts = parts[1], parts[2:]
        if parts[:1] == ["pods"] and len(parts) <= 2:
            name = parts[1] if len(parts) == 2 else None
            return _answer(request, POD_METRICS, name, self.pod_metrics(
                namespace, None if name else query.get("labelSelector"),
                None if name else query.get("fieldSelector"), name), namespace)
        raise errors.not_found("", request.path)

    # --- the objects ---------------------------------------------------------------------------

    def node_metrics(self, label_selector: str | None, field_selector: str | None,
                     name: str | None = None) -> list[Obj]:
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, "Node")
        t, stamp = self.clock.time(), rfc3339(self.clock.now())
        by_node: dict[str, list[Obj]] = {}
        for pod in self.store.list(self.pods):
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                by_node.setdefault(node, []).append(pod)
        items = []
        for node in self._candidates(self.nodes, None, name):
            meta = node["metadata"]
            if not (_ready(node) and labels_match(labels, meta.get("labels") or {})
                    and fields_match(fields, node)):
                continue
            usage = node_usage(by_node.get(meta["name"], []), t)
            items.append({"kind": "NodeMetrics", "apiVersion": f"{GROUP}/{VERSION}",
                          "metadata": _meta(meta, stamp), "timestamp": stamp,
                          "window": WINDOW, "usage": _quantities(usage)})
        return items

    def pod_metrics(self, namespace: str | None, label_selector: str | None,
                    field_selector: str | None, name: str | None = None) -> list[Obj]:
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, "Pod")
        t, stamp = self.clock.time(), rfc3339(self.clock.now())
        items = []
        for pod in self._candidates(self.pods, namespace, name):
            meta = pod["metadata"]
            if not (labels_match(labels, meta.get("labels") or {}) and fields_match(fields, pod)):
                continue
            containers = pod_usage(pod, t)
            if not containers:
                continue
            items.append({"kind": "PodMetrics", "apiVersion": f"{GROUP}/{VERSION}",
                          "metadata": _meta(meta, stamp), "timestamp": stamp,
                          "window": WINDOW,
                          "containers": [{"name": c, "usage": _quantities(u)}
                                         for c, u in containers.items()]})
        return items

    def _candidates(self, rt: ResourceType, namespace: str | None, name: str | None
                    ) -> list[Obj]:
        if name is None:
            return self.store.list(rt, namespace)
        found = self.store.find(rt, namespace, name)
        return [] if found is None else [found]


def _answer(request: web.Request, rt: ResourceType, name: str | None, items: list[Obj],
            namespace: str | None = None) -> web.Response:
    """A list, one object, or a Table of either; a named object without metrics is a 404
    with metrics-server's resource names (a pod's name with its namespace)."""
    if name is not None and not items:
        raise errors.not_found(rt.singular, name if namespace is None
                               else f"{namespace}/{name}", GROUP)
    table = _table_version(request.headers.get("Accept", ""))
    if table is not None:
        body = metrics_table(items, table, request.query.get("includeObject") or "Metadata")
    elif name is None:
        body = {"kind": f"{rt.kind}List", "apiVersion": f"{GROUP}/{VERSION}",
                "metadata": {}, "items": items}
    else:
        body = items[0]
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _table_version(accept: str) -> str | None:
    """`meta.k8s.io/v1` (or v1beta1) when the Accept header asks for a Table, as kubectl get
    does."""
    for part in accept.split(","):
        params = dict(p.strip().partition("=")[::2] for p in part.split(";")[1:])
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return f"meta.k8s.io/{params.get('v', 'v1')}"
    return None


def _ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _meta(meta: Obj, stamp: str) -> Obj:
    out: Obj = {"name": meta["name"], "creationTimestamp": stamp}
    if meta.get("namespace"):
        out["namespace"] = meta["namespace"]
    if meta.get("labels"):
        out["labels"] = dict(meta["labels"])
    return out


def _quantities(usage: Usage) -> dict[str, str]:
    """In Quantity's canonical form, as metrics-server's JSON has them (memory in whole Ki,
    a working set being pages)."""
    return {"cpu": cpu_quantity(usage.cpu_nanocores),
            "memory": format_bytes(usage.memory_bytes // 1024 * 1024)}
