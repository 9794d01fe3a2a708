"""What each node's kubelet knows of its node: address, pod IPs, readiness, GPU Xid history.

Deterministic fake addresses: a node without an InternalIP gets one from its index, and pod
IPs come from the node's `spec.podCIDR` (or a /24 derived from its index), handed out in turn.
The Xid history is what the GPU stack leaves on a node: a Warning event and the annotation
`sim.gpuops.io/xid-events` (a JSON list of `{"xid", "gpu", "pciBusId", "time", "message",
"pod"}`, newest last) that the metrics export as DCGM_FI_DEV_XID_ERRORS.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from ..core.clock import rfc3339
from ..core.gpus import PCI_BUS_IDS, PRODUCT_LABEL, XID_ANNOTATION
from ..core.recorder import Recorder
from ..core.store import Store
from .containerlogs import XID_DESCRIPTIONS

Obj = dict[str, Any]
MAX_XID_RECORDS = 100


def node_alive(node: Obj) -> bool:
    """Is a kubelet posting this node's status? (Ready True; no conditions counts as up.)"""
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


def internal_ip(node: Obj) -> str | None:
    for address in (node.get("status") or {}).get("addresses") or ():
        if address.get("type") == "InternalIP" and address.get("address"):
            return address["address"]
    return None


@dataclass
class NodeInfo:
    index: int
    host_ip: str
    alive: bool
    gpu_product: str
    pod_cidr: str | None
    next_ip: int = 0

    @classmethod
    def of(cls, node: Obj, index: int) -> NodeInfo:
        host_ip = internal_ip(node) or \
            f"172.{16 + index // 62500}.{(index // 250) % 250}.{index % 250 + 2}"
        return cls(index, host_ip, node_alive(node),
                   (node["metadata"].get("labels") or {}).get(PRODUCT_LABEL, ""),
                   (node.get("spec") or {}).get("podCIDR"))

    def update(self, node: Obj) -> bool:
        """Follow the node object; True when it has just become alive again."""
        self.gpu_product = (node["metadata"].get("labels") or {}).get(PRODUCT_LABEL, "")
        self.host_ip = internal_ip(node) or self.host_ip
        alive = node_alive(node)
        revived = alive and not self.alive
        self.alive = alive
        return revived

    def allocate_ip(self) -> str:
        host = 2 + self.next_ip % 252
        self.next_ip += 1
        if self.pod_cidr:
            try:
                network = ipaddress.ip_network(self.pod_cidr, strict=False)
                return str(network[host % max(network.num_addresses - 1, 1)])
            except (ValueError, IndexError):
                pass  # an unusable podCIDR: fall back to the derived range below
        i = self.index
        return f"10.{1 + (i // 256) % 250}.{i % 256}.{host}"


def record_xid(store: Store, recorder: Recorder, node: str, xid: int, gpu: int, ts: float,
               pod: str | None) -> None:
    """A GPU Xid on `node`: the kernel monitor's Warning event and the node's Xid history."""
    nodes = store.type("nodes")
    obj = store.find(nodes, None, node)
    if obj is None:
        return
    bus = PCI_BUS_IDS[gpu % len(PCI_BUS_IDS)]
    description = XID_DESCRIPTIONS.get(xid, "Unknown Xid error")
    recorder.record(obj, "GPUXid", f"Xid {xid}: {description} (GPU {gpu}, PCI {bus})",
                    type="Warning", component="kernel-monitor", host=node)
    entry: dict[str, Any] = {"xid": xid, "gpu": gpu, "pciBusId": bus, "time": rfc3339(ts),
                             "message": description}
    if pod:
        entry["pod"] = pod

    def add(n: Obj) -> None:
        annotations = n["metadata"].setdefault("annotations", {})
        try:
            history = json.loads(annotations.get(XID_ANNOTATION) or "[]")
        except ValueError:
            history = []  # a hand-edited annotation that is not JSON: start a new history
        if not isinstance(history, list):
            history = []
        annotations[XID_ANNOTATION] = json.dumps((history + [entry])[-MAX_XID_RECORDS:])

    store.mutate(nodes, None, node, add)
