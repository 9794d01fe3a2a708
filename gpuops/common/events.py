"""Names and resources of gpuops' Prefect events, built in one place.

Events are `gpuops.<object>.<what-happened>`; the resource id is
`k8s.<cluster>.<kind>.<namespace>.<name>` (namespace `_` for cluster-scoped objects, and for
what gpuops groups itself, such as a node pool) so one Prefect server can serve many
clusters. An event about a flow run itself (an approval) names Prefect's own resource,
`prefect.flow-run.<id>`, so it shows on the run's page. Every emitter builds names and
resources here; nothing else spells a resource id.
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


def flow_run_resource(flow_run_id: object, **labels: str) -> dict[str, str]:
    """The resource of an event about a flow run itself (Prefect's own id for it)."""
    return {"prefect.resource.id": f"prefect.flow-run.{flow_run_id}", **labels}


def flow_run_related(flow_run_id: object) -> dict[str, str]:
    """The run an event happened in, as a related resource."""
    return related("flow-run", f"prefect.flow-run.{flow_run_id}")


def workload_related(cluster: str, kind: str, namespace: str, name: str) -> dict[str, str]:
    """The workload (Deployment, Job, ...) a pod's event belongs to, as a related resource."""
    return related("workload", resource_id(cluster, kind, namespace, name),
                   **{"prefect.resource.name": f"{namespace}/{name}"})
