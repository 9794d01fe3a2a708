"""What a request path names: a resource type, a namespace, an object, a subresource, a watch.

Kubernetes paths are `/api/v1/...` for the core group and `/apis/<group>/<version>/...` for the
others, then `[watch/][namespaces/<ns>/]<plural>[/<name>[/<subresource>]]`; a `proxy`
subresource may go on with the path to forward (`pods/<name>:<port>/proxy/v1/models`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import errors
from ..core.resources import ResourceRegistry, ResourceType


def not_found(what: str = "") -> errors.ApiError:
    """A path that names nothing. Its Status carries empty details, as kube-apiserver's does:
    kubectl tells a missing route from a missing object by them (`kubectl debug` reads
    `details.name` without a nil check)."""
    return errors.ApiError(404, "NotFound", "the server could not find the requested "
                           f"resource{f' ({what})' if what else ''}", details={})


@dataclass
class Target:
    """What a request path names."""

    rtype: ResourceType
    namespace: str | None
    name: str | None = None
    subresource: str | None = None
    watch: bool = False
    proxy_path: str = ""  # after `proxy`: what the proxied server is asked for


def resolve(registry: ResourceRegistry, group: str, version: str, rest: list[str]) -> Target:
    """The target of `rest`, the path after the group version; 404 if it names nothing."""
    watch = False
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        rt = registry.get(group, version, rest[2])
        if rt is not None and rt.namespaced:
            namespace, rest = rest[1], rest[2:]
    rt = registry.get(group, version, rest[0])
    proxy_path = ""
    if len(rest) > 3 and rest[2] == "proxy":
        rest, proxy_path = rest[:3], "/" + "/".join(rest[3:])
    if rt is None or len(rest) > 3:
        raise not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in rt.subresources:
        raise not_found(f"{rt.plural}/{sub}")
    return Target(rt, namespace, name, sub, watch, proxy_path)
