"""Names and resources of gpuops' Prefect events, built in one place.

Events are `gpuops.<object>.<what-happened>`; the resource id is
`k8s.<cluster>.<kind>.<namespace>.<name>` (namespace `_` for cluster-scoped objects) so one
Prefect server can serve many clusters.
"""

from __future__ import annotations

import re

_NAME_PART = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def event_name(obj: str, what: str) -> str:
    for part, label in ((obj, "object"), (what, "what-happened")):
        if not _NAME_PART.match(part):
            raise ValueError(f"event {label} {part!r} must be lowercase words joined by '-'")
    return f"gpuops.{obj}.{what}"


def resource_id(cluster: str, kind: str, namespace: str | None, name: str) -> str:
    return f"k8s.{cluster}.{kind.lower()}.{namespace or '_'}.{name}"


def k8s_resource(cluster: str, kind: str, namespace: str | None, name: str,
                 **labels: str) -> dict[str, str]:
    resource = {"prefect.resource.id": resource_id(cluster, kind, namespace, name),
                "prefect.resource.name": f"{namespace}/{name}" if namespace else name,
                "gpuops.cluster": cluster, "gpuops.kind": kind}
    if namespace:
        resource["gpuops.namespace"] = namespace
    resource.update({k: str(v) for k, v in labels.items()})
    return resource


def related(role: str, resource_id_: str, **labels: str) -> dict[str, str]:
    return {"prefect.resource.id": resource_id_, "prefect.resource.role": role, **labels}
