"""Services: kube-apiserver's defaults and the cluster IP and node ports it allocates.

A Service created without `clusterIP` gets one from the service range (10.96.0.0/12, as
kubeadm and EKS default), `None` makes it headless, an ExternalName has none; NodePort and
LoadBalancer Services get a node port per port (30000-32767). The type, session affinity, IP
families, traffic policies and each port's protocol and targetPort are defaulted as the API
server defaults them. An update that leaves an allocated value out keeps it (kube's
`patchAllocatedValues`: a client that replaces the Service whole, or a server-side apply of
a manifest without them, does not lose the IP); changing an allocated cluster IP is refused.

Addresses are picked by a hash of the Service's namespace and name, moving on when taken, so
the same cluster gets the same addresses run after run.
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import TYPE_CHECKING, Any

from .. import errors
from .strategy import Strategy

if TYPE_CHECKING:
    from ..resources import ResourceType
    from ..store import Store

Obj = dict[str, Any]
SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)
WITH_CLUSTER_IP = ("ClusterIP", "NodePort", "LoadBalancer")


class ServiceStrategy(Strategy):
    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        super().prepare_for_create(store, rt, obj, name)
        spec = obj.setdefault("spec", {})
        _default(spec)
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', name)}"
        taken_ips, taken_ports = _taken(store, rt)
        if spec["type"] in WITH_CLUSTER_IP and not spec.get("clusterIP"):
            ip = _pick_ip(key, taken_ips)
            spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
        elif spec.get("clusterIP") and not spec.get("clusterIPs"):
            spec["clusterIPs"] = [spec["clusterIP"]]
        if spec["type"] in ("NodePort", "LoadBalancer"):
            for i, port in enumerate(spec.get("ports") or []):
                if isinstance(port, dict) and not port.get("nodePort"):
                    port["nodePort"] = _pick_port(f"{key}/{i}", taken_ports)
                    taken_ports.add(port["nodePort"])

    def validate_update(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        spec = new.setdefault("spec", {})
        before = old.get("spec") or {}
        _default(spec)
        if spec["type"] in WITH_CLUSTER_IP and before.get("clusterIP") not in (None, "", "None"):
            if not spec.get("clusterIP"):
                spec["clusterIP"] = before["clusterIP"]
                spec["clusterIPs"] = list(before.get("clusterIPs") or [before["clusterIP"]])
            elif spec["clusterIP"] != before["clusterIP"]:
                given = spec.get("clusterIPs") or [spec["clusterIP"]]
                listed = ", ".join(f'"{ip}"' for ip in given)
                raise errors.invalid(rt.kind, (new.get("metadata") or {}).get("name", ""),
                                     "spec.clusterIPs[0]", f"Invalid value: []string"
                                     f"{{{listed}}}: may not change once set")
            elif not spec.get("clusterIPs"):
                spec["clusterIPs"] = list(before.get("clusterIPs") or [spec["clusterIP"]])
        if spec["type"] in ("NodePort", "LoadBalancer"):
            kept = {(p.get("port"), p.get("protocol")): p.get("nodePort")
                    for p in before.get("ports") or [] if isinstance(p, dict)}
            for port in spec.get("ports") or []:
                if isinstance(port, dict) and not port.get("nodePort"):
                    found = kept.get((port.get("port"), port.get("protocol")))
                    if found:
                        port["nodePort"] = found


def _default(spec: Obj) -> None:
    spec.setdefault("type", "ClusterIP")
    kind = spec["type"]
    if kind == "ExternalName":
        return
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if kind == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


def _taken(store: Store, rt: ResourceType) -> tuple[set[str], set[int]]:
    ips: set[str] = set()
    ports: set[int] = set()
    for svc in store.list(rt):
        spec = svc.get("spec") or {}
        ips.update(ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip)
        ports.update(p["nodePort"] for p in spec.get("ports") or []
                     if isinstance(p, dict) and isinstance(p.get("nodePort"), int))
    return ips, ports


def _pick_ip(key: str, taken: set[str]) -> str:
    size = SERVICE_RANGE.num_addresses
    start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % size
    for step in range(size):
        offset = (start + step) % size
        if offset in (0, 1, size - 1):  # network, the `kubernetes` Service's, broadcast
            continue
        ip = str(SERVICE_RANGE.network_address + offset)
        if ip not in taken:
            return ip
    raise errors.ApiError(500, "InternalError", "failed to allocate a serviceIP: range is full")


def _pick_port(key: str, taken: set[int]) -> int:
    start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % len(NODE_PORTS)
    for step in range(len(NODE_PORTS)):
        port = NODE_PORTS[(start + step) % len(NODE_PORTS)]
        if port not in taken:
            return port
    raise errors.ApiError(500, "InternalError", "failed to allocate a nodePort: range is full")
