"""The Gateway API implementation's status: what istio (the default scenario's class) writes on
the Gateways and HTTPRoutes it serves, so `kubectl get gateways` shows an ADDRESS and
PROGRAMMED True and `kubectl describe httproute` shows whether each parent accepted the route
and its backends resolved.

- A Gateway: an address in the VPC (an internal load balancer's, derived from its name),
  Accepted and Programmed, and per listener the routes attached to it.
- An HTTPRoute: per parentRef, Accepted (False, `NoMatchingParent`, when no such Gateway
  exists) and ResolvedRefs (False, `BackendNotFound`, when a backendRef names a Service or
  InferencePool that does not exist).

Conditions carry no observedGeneration (optional in the Gateway API), and a status is
written only when what it says changes, never on every spec change: the rollout's weight
patches cause no extra writes. Pure functions compute the status; `step` writes it.
"""

from __future__ import annotations

import zlib
from typing import Any

from ..core.clock import VirtualClock, rfc3339
from ..core.store import Store

Obj = dict[str, Any]
CONTROLLER = "istio.io/gateway-controller"
GROUP = "gateway.networking.k8s.io"
_BACKENDS = {("", "Service"): ("services", ""),
             ("inference.networking.k8s.io", "InferencePool"):
                 ("inferencepools", "inference.networking.k8s.io")}


class GatewayStatusController:
    name = "gateway-status"

    def __init__(self, store: Store, clock: VirtualClock, tick_seconds: float = 1.0) -> None:
        self.store = store
        self.clock = clock
        self.tick_seconds = tick_seconds
        self.gateways = store.type("gateways", GROUP)
        self.routes = store.type("httproutes", GROUP)

    async def run(self) -> None:
        while True:
            self.step()
            await self.clock.sleep(self.tick_seconds, min_real=0.2)

    def step(self) -> None:
        now = rfc3339(self.clock.now())
        routes = self.store.list(self.routes)
        for gw in self.store.list(self.gateways):
            self._write(self.gateways, gw, gateway_status(gw, routes), now)
        for route in self.store.list(self.routes):
            self._write(self.routes, route, route_status(route, self._exists), now)

    def _exists(self, group: str, kind: str, namespace: str, name: str) -> bool:
        if (group, kind) == (GROUP, "Gateway"):
            return self.store.find(self.gateways, namespace, name) is not None
        plural = _BACKENDS.get((group, kind))
        if plural is None:
            return True  # a kind this controller does not resolve: taken as it is
        rt = self.store.registry.get(plural[1], "v1", plural[0])
        return rt is not None and self.store.find(rt, namespace, name) is not None

    def _write(self, rt: Any, obj: Obj, status: Obj, now: str) -> None:
        old = obj.get("status") or {}
        if _without_times(old) == _without_times(status):
            return
        stamped = _with_times(status, old, now)
        meta = obj["metadata"]
        self.store.mutate(rt, meta.get("namespace"), meta["name"],
                          lambda o: o.__setitem__("status", stamped), subresource="status")


def _condition(ctype: str, ok: bool, reason: str, message: str) -> Obj:
    return {"type": ctype, "status": "True" if ok else "False", "reason": reason,
            "message": message}


def gateway_address(gw: Obj) -> str:
    meta = gw["metadata"]
    h = zlib.crc32(f'{meta.get("namespace")}/{meta["name"]}'.encode())
    return f"10.0.255.{1 + h % 254}"


def _attaches(route: Obj, gw: Obj) -> bool:
    meta = gw["metadata"]
    for ref in (route.get("spec") or {}).get("parentRefs") or []:
        if (ref.get("kind", "Gateway") == "Gateway" and ref.get("name") == meta["name"]
                and ref.get("namespace", route["metadata"].get("namespace"))
                == meta.get("namespace")):
            return True
    return False


def gateway_status(gw: Obj, routes: list[Obj]) -> Obj:
    attached = sum(1 for r in routes if _attaches(r, gw))
    listeners = [{
        "name": listener.get("name", ""), "attachedRoutes": attached,
        "supportedKinds": [{"group": GROUP, "kind": "HTTPRoute"}],
        "conditions": [_condition("Accepted", True, "Accepted", "No errors found"),
                       _condition("Programmed", True, "Programmed", "No errors found"),
                       _condition("ResolvedRefs", True, "ResolvedRefs", "No errors found")]}
        for listener in (gw.get("spec") or {}).get("listeners") or []]
    return {"addresses": [{"type": "IPAddress", "value": gateway_address(gw)}],
            "conditions": [_condition("Accepted", True, "Accepted", "Resource accepted"),
                           _condition("Programmed", True, "Programmed",
                                      "Resource programmed, assigned to its load balancer")],
            "listeners": listeners}


def route_status(route: Obj, exists: Any) -> Obj:
    """`exists(group, kind, namespace, name)` says whether a referenced object exists."""
    namespace = route["metadata"].get("namespace", "")
    missing = [
        f'{ref.get("kind", "Service")} {ref.get("name")}'
        for rule in (route.get("spec") or {}).get("rules") or []
        for ref in rule.get("backendRefs") or []
        if not exists(ref.get("group", ""), ref.get("kind", "Service"),
                      ref.get("namespace", namespace), ref.get("name", ""))]
    resolved = (_condition("ResolvedRefs", True, "ResolvedRefs", "Resolved all the Object "
                           "references for the Route") if not missing else
                _condition("ResolvedRefs", False, "BackendNotFound",
                           f"backend(s) not found: {', '.join(missing)}"))
    parents = []
    for ref in (route.get("spec") or {}).get("parentRefs") or []:
        found = exists(ref.get("group", GROUP), ref.get("kind", "Gateway"),
                       ref.get("namespace", namespace), ref.get("name", ""))
        accepted = (_condition("Accepted", True, "Accepted", "Route was valid") if found else
                    _condition("Accepted", False, "NoMatchingParent",
                               f'parent gateway {ref.get("name")} not found'))
        parents.append({"parentRef": ref, "controllerName": CONTROLLER,
                        "conditions": [accepted, resolved]})
    return {"parents": parents}


def _conditions_in(status: Obj) -> list[list[Obj]]:
    lists = [status.get("conditions") or []]
    lists += [x.get("conditions") or [] for x in status.get("listeners") or []]
    lists += [x.get("conditions") or [] for x in status.get("parents") or []]
    return lists


def _without_times(status: Obj) -> Any:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "lastTransitionTime"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(status)


def _with_times(status: Obj, old: Obj, now: str) -> Obj:
    """Each condition's lastTransitionTime: kept from the old status while its status holds."""
    before = {(c.get("type"), c.get("status")): c.get("lastTransitionTime")
              for conditions in _conditions_in(old) for c in conditions}
    for conditions in _conditions_in(status):
        for c in conditions:
            c["lastTransitionTime"] = before.get((c["type"], c["status"])) or now
    return status
