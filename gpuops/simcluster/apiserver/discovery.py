"""Discovery documents (`/version`, `/api`, `/apis`, group versions) built from the registry."""

from __future__ import annotations

from typing import Any

from ..core.resources import ResourceRegistry, ResourceType

VERSION_INFO = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-simcluster",
                "gitCommit": "simcluster", "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                "compiler": "gc", "platform": "linux/amd64"}

# Subresources whose kind differs from the parent's: (kind, group, version).
_SUBRESOURCE_KINDS = {"eviction": ("Eviction", "policy", "v1"), "binding": ("Binding", "", "v1"),
                      "scale": ("Scale", "autoscaling", "v1"),
                      "proxy": ("PodProxyOptions", "", "v1")}
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"],
                      "log": ["get"], "eviction": ["create"], "binding": ["create"],
                      "finalize": ["update"],
                      "proxy": ["create", "delete", "get", "patch", "update"]}


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
    if sub in _SUBRESOURCE_KINDS:
        kind, group, version = _SUBRESOURCE_KINDS[sub]
        entry.update(kind=kind, group=group, version=version)
    return entry


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
