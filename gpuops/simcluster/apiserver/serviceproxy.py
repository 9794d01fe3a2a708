"""`services/[scheme:]<name>[:port]/proxy/<path>`: kube-apiserver's service proxy, forwarded
to one Ready pod behind the Service, the way `kubectl get --raw` or a browser through
`kubectl proxy` reaches an in-cluster server without a port-forward (which needs a kubelet).

The port is the Service port's name or number (or none, for a Service with one port); it maps
to the port's targetPort (a number, or a container port name looked up on the pod). The pod
is the first Ready one the selector matches, by name; none is kube's 503 `no endpoints
available for service`. What then answers is the pod proxy's (`pods.py`).
"""

from __future__ import annotations

from typing import Any

from ..core import errors
from ..core.store import Store

Obj = dict[str, Any]


def split_target(name: str) -> tuple[str, str]:
    """(service name, port) from `[scheme:]name[:port]`."""
    parts = name.split(":")
    if len(parts) == 3 or (len(parts) == 2 and parts[0] in ("http", "https")):
        parts = parts[1:]
    return parts[0], parts[1] if len(parts) > 1 else ""


def endpoint(store: Store, namespace: str, name: str) -> str:
    """The pod proxy target (`<pod>:<port>`) a service proxy request goes to."""
    service_name, port = split_target(name)
    svc = store.get(store.type("services"), namespace, service_name)
    spec = svc.get("spec") or {}
    ports = spec.get("ports") or []
    chosen = _service_port(ports, port, service_name)
    selector = spec.get("selector") or {}
    if not selector:
        raise _no_endpoints(service_name)
    pods = sorted((p for p in store.list(store.type("pods"), namespace)
                   if _selects(selector, p["metadata"].get("labels") or {})
                   and _ready(p) and not p["metadata"].get("deletionTimestamp")),
                  key=lambda p: p["metadata"]["name"])
    if not pods:
        raise _no_endpoints(service_name)
    pod = pods[0]
    return f'{pod["metadata"]["name"]}:{_target_port(pod, chosen)}'


def _service_port(ports: list[Obj], wanted: str, service: str) -> Obj:
    if not wanted:
        if len(ports) == 1:
            return ports[0]
        raise _no_endpoints(service)
    for p in ports:
        if wanted in (str(p.get("port")), p.get("name")):
            return p
    raise _no_endpoints(service)


def _target_port(pod: Obj, port: Obj) -> str:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int) or str(target).isdigit():
        return str(target)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for cp in c.get("ports") or []:
            if cp.get("name") == target:
                return str(cp.get("containerPort"))
    return str(target)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _no_endpoints(service: str) -> errors.ApiError:
    return errors.ApiError(503, "ServiceUnavailable",
                           f'no endpoints available for service "{service}"')
