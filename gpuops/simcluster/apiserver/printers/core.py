"""Printers of the core group's other resources, with kube-apiserver's columns: nodes
(STATUS `Ready`/`NotReady`/`Unknown`, `,SchedulingDisabled` when cordoned; ROLES from the
node-role labels), namespaces, services, events (both `v1` and `events.k8s.io/v1`),
configmaps, secrets and serviceaccounts."""

from __future__ import annotations

from typing import Any

from .base import (
    AGE,
    NAME,
    Cells,
    Column,
    Obj,
    Printer,
    age,
    epoch,
    format_labels,
    human_duration,
    name,
    section,
    since,
    wide,
)

ROLE_PREFIX = "node-role.kubernetes.io/"
ROLE_LABEL = "kubernetes.io/role"

# --- nodes ------------------------------------------------------------------------------------

NODE_COLUMNS = (
    NAME, Column("Status", description="The status of the node"),
    Column("Roles", description="The roles of the node"), AGE,
    Column("Version", description="The kubelet version the node reports."),
    wide("Internal-IP", "The node's first InternalIP address."),
    wide("External-IP", "The node's first ExternalIP address."),
    wide("OS-Image", "The OS image the node reports."),
    wide("Kernel-Version", "The kernel version the node reports."),
    wide("Container-Runtime", "The container runtime version the node reports."),
)


def node_cells(node: Obj, now: float) -> Cells:
    status = section(node, "status")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready")
    states = [] if ready is None else ["Ready" if ready.get("status") == "True"
                                       else "NotReady"]
    states = states or ["Unknown"]
    if section(node, "spec").get("unschedulable"):
        states.append("SchedulingDisabled")
    info = section(node, "status", "nodeInfo")
    return [name(node), ",".join(states), ",".join(node_roles(node)) or "<none>",
            age(node, now), info.get("kubeletVersion", ""),
            _address(status, "InternalIP"), _address(status, "ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def node_roles(node: Obj) -> list[str]:
    """Roles from `node-role.kubernetes.io/<role>` labels and `kubernetes.io/role=<role>`."""
    roles = set()
    for key, value in (section(node, "metadata").get("labels") or {}).items():
        if key.startswith(ROLE_PREFIX) and key[len(ROLE_PREFIX):]:
            roles.add(key[len(ROLE_PREFIX):])
        elif key == ROLE_LABEL and value:
            roles.add(value)
    return sorted(roles)


def _address(status: Obj, kind: str) -> str:
    for address in status.get("addresses") or []:
        if address.get("type") == kind:
            return str(address.get("address", ""))
    return "<none>"


# --- namespaces, configmaps, secrets, serviceaccounts ----------------------------------------

NAMESPACE_COLUMNS = (NAME, Column("Status", description="The status of the namespace"), AGE)
CONFIGMAP_COLUMNS = (NAME, Column("Data", "integer", "Number of keys in data and binaryData."),
                     AGE)
SECRET_COLUMNS = (NAME, Column("Type", description="Used to facilitate programmatic handling "
                                                   "of secret data."),
                  Column("Data", "integer", "Number of keys in data."), AGE)
SERVICEACCOUNT_COLUMNS = (NAME, Column("Secrets", "integer", "Number of listed secrets."), AGE)


def namespace_cells(ns: Obj, now: float) -> Cells:
    return [name(ns), section(ns, "status").get("phase", ""), age(ns, now)]


def configmap_cells(cm: Obj, now: float) -> Cells:
    return [name(cm), len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
            age(cm, now)]


def secret_cells(secret: Obj, now: float) -> Cells:
    return [name(secret), secret.get("type") or "Opaque", len(secret.get("data") or {}),
            age(secret, now)]


def serviceaccount_cells(sa: Obj, now: float) -> Cells:
    return [name(sa), len(sa.get("secrets") or []), age(sa, now)]


# --- services ---------------------------------------------------------------------------------

SERVICE_COLUMNS = (
    NAME, Column("Type", description="How the service is exposed."),
    Column("Cluster-IP", description="The IP address of the service in the cluster."),
    Column("External-IP", description="The external IPs or load balancer addresses."),
    Column("Port(s)", description="The ports the service exposes."), AGE,
    wide("Selector", "The pod labels the service routes traffic to."),
)


def service_cells(svc: Obj, now: float) -> Cells:
    spec = section(svc, "spec")
    kind = spec.get("type") or "ClusterIP"
    ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    ports = ",".join(_port(p) for p in spec.get("ports") or [])
    return [name(svc), kind, ips[0] if ips else "<none>", _external_ip(svc, kind),
            ports or "<none>", age(svc, now), format_labels(spec.get("selector"))]


def _port(port: Obj) -> str:
    protocol = port.get("protocol") or "TCP"
    if port.get("nodePort"):
        return f"{port.get('port')}:{port['nodePort']}/{protocol}"
    return f"{port.get('port')}/{protocol}"


def _external_ip(svc: Obj, kind: str) -> str:
    external = section(svc, "spec").get("externalIPs") or []
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if kind == "LoadBalancer":
        ingress = section(svc, "status", "loadBalancer").get("ingress") or []
        lb = sorted({i.get("ip") or i.get("hostname") for i in ingress
                     if i.get("ip") or i.get("hostname")})
        text = ",".join(lb)
        if external:
            return ",".join([*lb, *external])
        return text or "<pending>"  # never clipped: the server prints wide
    if kind == "ExternalName":
        return str(section(svc, "spec").get("externalName", ""))
    return "<unknown>"


# --- events -----------------------------------------------------------------------------------

EVENT_COLUMNS = (
    Column("Last Seen", description="The time at which the most recent occurrence of this "
                                    "event was recorded."),
    Column("Type", description="Type of this event (Normal, Warning)."),
    Column("Reason", description="Why the action was taken."),
    Column("Object", description="The object this event is about."),
    wide("Subobject", "The part of the object this event is about."),
    wide("Source", "The component reporting this event."),
    Column("Message", description="A human-readable description of the event."),
    wide("First Seen", "The time at which the event was first recorded."),
    wide("Count", "The number of times this event has occurred."),
    Column("Name", format="name", priority=1, description="The event's name."),
)


def event_cells(event: Obj, now: float) -> Cells:
    """A core/v1 Event."""
    first = _since_or_none(event.get("firstTimestamp"), now) or since(
        event.get("eventTime"), now)
    last = _since_or_none(event.get("lastTimestamp"), now) or first
    count = event.get("count") or 0
    series = event.get("series")
    if isinstance(series, dict):
        last = since(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif not count:
        count = 1  # a singleton event of the new API has no count
    source = event.get("source") or {}
    return _event_row(event, last, first, count, event.get("involvedObject") or {},
                      event.get("message") or "",
                      source.get("component") or event.get("reportingController") or "",
                      source.get("host") or event.get("reportingInstance") or "")


def events_v1_cells(event: Obj, now: float) -> Cells:
    """An events.k8s.io/v1 Event: the same columns, from its renamed fields (kube-apiserver
    stores both versions as one type)."""
    first = _since_or_none(event.get("deprecatedFirstTimestamp"), now) or since(
        event.get("eventTime"), now)
    last = _since_or_none(event.get("deprecatedLastTimestamp"), now) or first
    count = event.get("deprecatedCount") or 0
    series = event.get("series")
    if isinstance(series, dict):
        last = since(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif not count:
        count = 1
    source = event.get("deprecatedSource") or {}
    return _event_row(event, last, first, count, event.get("regarding") or {},
                      event.get("note") or "",
                      source.get("component") or event.get("reportingController") or "",
                      source.get("host") or event.get("reportingInstance") or "")


def _event_row(event: Obj, last: str, first: str, count: Any, regarding: Obj, message: str,
               component: str, instance: str) -> Cells:
    kind = str(regarding.get("kind", "")).lower()
    target = f"{kind}/{regarding['name']}" if regarding.get("name") else kind
    source = f"{component}, {instance}" if instance else component
    return [last, event.get("type", ""), event.get("reason", ""), target,
            regarding.get("fieldPath", ""), source, str(message).strip(), first, count,
            name(event)]


def _since_or_none(timestamp: Any, now: float) -> str:
    """Empty for a missing time, so that the caller falls back to the next one."""
    if not isinstance(timestamp, str) or not timestamp:
        return ""
    at = epoch(timestamp)
    return "<invalid>" if at is None else human_duration(now - at)


PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "Node"): Printer(NODE_COLUMNS, node_cells),
    ("", "Namespace"): Printer(NAMESPACE_COLUMNS, namespace_cells),
    ("", "Service"): Printer(SERVICE_COLUMNS, service_cells),
    ("", "Event"): Printer(EVENT_COLUMNS, event_cells),
    ("events.k8s.io", "Event"): Printer(EVENT_COLUMNS, events_v1_cells),
    ("", "ConfigMap"): Printer(CONFIGMAP_COLUMNS, configmap_cells),
    ("", "Secret"): Printer(SECRET_COLUMNS, secret_cells),
    ("", "ServiceAccount"): Printer(SERVICEACCOUNT_COLUMNS, serviceaccount_cells),
}
