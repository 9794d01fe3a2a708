"""The rollout's object reads and the route write (thin I/O over `tasks/clients/kube`).

Everything decided with these is pure (`objects`, `weights`). List answers carry no `kind` or
`apiVersion` on their items (a real API server leaves them out), so each read stamps them
before parsing: the pool's shape is told by its apiVersion.
"""

from __future__ import annotations

from typing import Any

from gpuops.common.errors import ConfigError, KubeNotFound
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rollout.objects import (
    LWS_NAME,
    ApiVersion,
    HTTPRoute,
    InferencePool,
    PoolView,
    ServedApis,
    parse_pool,
    parse_route,
    pool_view,
    served_apis,
)
from gpuops.tasks.rollout.weights import Patch
from gpuops.tasks.rollout.workloads import api_of

Obj = dict[str, Any]


def read_served_apis(kube: Kube) -> ServedApis:
    return served_apis(kube.api_groups())


def _list(kube: Kube, api: ApiVersion, kind: str, namespace: str, plural: str) -> list[Obj]:
    return [{**item, "apiVersion": api.api_version, "kind": kind}
            for item in kube.list_custom(api.group, api.version, namespace, plural)]


def read_pool(kube: Kube, apis: ServedApis, namespace: str, name: str, *,
              field: str = "pool") -> InferencePool:
    """One InferencePool; a `ConfigError` on `field` naming the pools there are if absent."""
    api = apis.inference_pool
    try:
        obj = kube.get_custom(api.group, api.version, namespace, "inferencepools", name)
    except KubeNotFound:
        names = sorted(p["metadata"]["name"] for p in
                       _list(kube, api, "InferencePool", namespace, "inferencepools"))
        raise ConfigError(field, f"no InferencePool {name!r} in namespace {namespace!r} "
                          f"({api.api_version}); there: {', '.join(names) or 'none'}") from None
    return parse_pool({**obj, "apiVersion": api.api_version, "kind": "InferencePool"})


def read_routes(kube: Kube, apis: ServedApis, namespace: str) -> list[HTTPRoute]:
    """The namespace's HTTPRoutes (a route elsewhere would need a ReferenceGrant to reach a
    pool here; gpuops does not look for those)."""
    return [parse_route(r) for r in _list(kube, apis.http_route, "HTTPRoute", namespace,
                                          "httproutes")]


def read_route(kube: Kube, apis: ServedApis, namespace: str, name: str) -> HTTPRoute:
    api = apis.http_route
    obj = kube.get_custom(api.group, api.version, namespace, "httproutes", name)
    return parse_route({**obj, "apiVersion": api.api_version, "kind": "HTTPRoute"})


def read_pool_view(kube: Kube, apis: ServedApis, namespace: str, name: str, *,
                   field: str = "pool") -> PoolView:
    """A pool with its model servers, member pods and the routes that name it."""
    pool = read_pool(kube, apis, namespace, name, field=field)
    workloads = _list(kube, ApiVersion("apps", "v1"), "Deployment", namespace, "deployments")
    if apis.leader_worker_set is not None:
        workloads += _list(kube, apis.leader_worker_set, "LeaderWorkerSet", namespace,
                           "leaderworkersets")
    pods = kube.list_pods(namespace, label_selector=pool.label_selector) if pool.selector else []
    sets = sorted({str(((p.get("metadata") or {}).get("labels") or {})[LWS_NAME]) for p in pods
                   if LWS_NAME in ((p.get("metadata") or {}).get("labels") or {})})
    lws_pods = kube.list_pods(namespace, label_selector=f"{LWS_NAME} in ({','.join(sets)})") \
        if sets else []
    return pool_view(pool, workloads, pods, read_routes(kube, apis, namespace), lws_pods)


def read_workload(kube: Kube, kind: str, namespace: str, name: str) -> Obj:
    """A model server as stored (a Deployment or a LeaderWorkerSet), kind and apiVersion
    stamped."""
    api = api_of(kind)
    obj = kube.get_deployment(namespace, name) if kind == "Deployment" else \
        kube.get_custom(api.group, api.version, namespace, api.plural, name)
    return {**obj, "apiVersion": api.api_version, "kind": kind}


def patch_route(kube: Kube, apis: ServedApis, route: HTTPRoute, patch: Patch) -> HTTPRoute:
    """Apply a `weights.weight_patch` (a JSON patch: its tests make a concurrent edit a
    `KubeInvalid`, nothing changed); the route as the server now has it."""
    api = apis.http_route
    obj = kube.patch_custom(api.group, api.version, route.namespace, "httproutes", route.name,
                            patch)
    return parse_route({**obj, "apiVersion": api.api_version, "kind": "HTTPRoute"})
