"""Discovery documents (`/version`, `/api`, `/apis`, group versions) built from the registry.

`/api` and `/apis` also answer aggregated discovery (apidiscovery.k8s.io, KEP 3352), which
client-go 1.33 asks for first: `Accept: application/json;g=apidiscovery.k8s.io;v=v2;
as=APIGroupDiscoveryList,...;v=v2beta1;...,application/json`. It recognises the answer by its
Content-Type alone (`discovery.ContentTypeIsGVK`), so the answer names that media type; one
request then gives every group, version and resource (verbs, short names, categories,
subresources), where the legacy documents take a request per group version. client-go drops
a resource or subresource without a `responseKind`, takes a group's first version as the
preferred one, and treats a version whose freshness is not `Current` as failed.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from ..core.resources import ResourceRegistry, ResourceType
from .openapi.documents import KUBE_VERSION

# The Kubernetes version simcluster imitates, as its OpenAPI documents name it too.
VERSION_INFO = {"major": "1", "minor": "33", "gitVersion": f"{KUBE_VERSION}-simcluster",
                "gitCommit": "simcluster", "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                "compiler": "gc", "platform": "linux/amd64"}

# Subresources whose kind differs from the parent's: (kind, group, version).
_SUBRESOURCE_KINDS = {"eviction": ("Eviction", "policy", "v1"), "binding": ("Binding", "", "v1"),
                      "scale": ("Scale", "autoscaling", "v1"),
                      "proxy": ("PodProxyOptions", "", "v1"),
                      "exec": ("PodExecOptions", "", "v1"),
                      "attach": ("PodAttachOptions", "", "v1"),
                      "portforward": ("PodPortForwardOptions", "", "v1")}
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"],
                      "log": ["get"], "eviction": ["create"], "binding": ["create"],
                      "finalize": ["update"],
                      "proxy": ["create", "delete", "get", "patch", "update"],
                      "exec": ["create", "get"], "attach": ["create", "get"],
                      "portforward": ["create", "get"]}


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: ResourceRegistry) -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, vs) for g, vs in registry.groups().items()]}


def api_group(registry: ResourceRegistry, group: str) -> dict[str, Any] | None:
    versions = registry.groups().get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(group, versions)}


def _resource_entry(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": rt.plural, "singularName": rt.singular,
                             "namespaced": rt.namespaced, "kind": rt.kind,
                             "verbs": list(rt.verbs)}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _subresource_entry(rt: ResourceType, sub: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": f"{rt.plural}/{sub}", "singularName": "",
                             "namespaced": rt.namespaced, "kind": rt.kind,
                             "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"])}
    found = _subresource_kind(rt, sub)
    if found is not None:
        kind, group, version = found
        entry.update(kind=kind, group=group, version=version)
    return entry


def _subresource_kind(rt: ResourceType, sub: str) -> tuple[str, str, str] | None:
    return _SUBRESOURCE_KINDS.get(f"{rt.plural}/{sub}") or _SUBRESOURCE_KINDS.get(sub)


def api_resource_list(registry: ResourceRegistry, group: str, version: str
                      ) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources = []
    for rt in types:
        resources.append(_resource_entry(rt))
        resources.extend(_subresource_entry(rt, sub) for sub in rt.subresources)
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


# --- aggregated discovery ----------------------------------------------------------------------

DISCOVERY_GROUP = "apidiscovery.k8s.io"
DISCOVERY_VERSIONS = ("v2", "v2beta1")


def aggregated_version(accept: str | None) -> str | None:
    """The apidiscovery version an Accept header prefers (`v2`, `v2beta1`), None when it
    prefers the legacy documents (plain JSON first) or names neither."""
    clauses = []
    for position, part in enumerate((accept or "").split(",")):
        media, *raw = [p.strip() for p in part.split(";")]
        params = {k.strip().lower(): v.strip() for k, _, v in (p.partition("=") for p in raw)}
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 1.0
        clauses.append((-q, position, media.lower(), params))
    for _, _, media, params in sorted(clauses):
        if media not in ("application/json", "*/*", "application/*"):
            continue  # protobuf: not served
        if not params:
            return None
        if (params.get("g") == DISCOVERY_GROUP and params.get("v") in DISCOVERY_VERSIONS
                and params.get("as") == "APIGroupDiscoveryList"):
            return params["v"]
    return None


def aggregated_response(registry: ResourceRegistry, version: str, *, legacy: bool
                        ) -> web.Response:
    """`/api` (legacy: the core group) or `/apis` as an APIGroupDiscoveryList."""
    groups = {"": ["v1"]} if legacy else registry.groups()
    items = [{"metadata": {"name": group, "creationTimestamp": None},
              "versions": [{"version": v, "freshness": "Current",
                            "resources": [_aggregated_resource(rt)
                                          for rt in registry.in_group_version(group, v)]}
                           for v in versions]}
             for group, versions in groups.items()]
    body = {"kind": "APIGroupDiscoveryList", "apiVersion": f"{DISCOVERY_GROUP}/{version}",
            "metadata": {}, "items": items}
    media = f"application/json;g={DISCOVERY_GROUP};v={version};as=APIGroupDiscoveryList"
    return web.Response(body=orjson.dumps(body), headers={"Content-Type": media,
                                                          "Vary": "Accept"})


def _aggregated_resource(rt: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": rt.plural, "singularResource": rt.singular,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster", "verbs": list(rt.verbs)}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subresources = []
    for sub in rt.subresources:
        kind, group, version = (_subresource_kind(rt, sub)
                                or (rt.kind, rt.group, rt.version))
        subresources.append({"subresource": sub,
                             "responseKind": {"group": group, "version": version,
                                              "kind": kind},
                             "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"])})
    if subresources:
        entry["subresources"] = subresources
    return entry
