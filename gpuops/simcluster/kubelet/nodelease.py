"""Node leases: each kubelet's heartbeat, a coordination.k8s.io/v1 Lease in `kube-node-lease`.

A kubelet creates a Lease named after its node (holder the node, 40 s duration, owned by the
Node so that it goes with it) and renews it every 10 s; `kubectl describe node` shows it
(HolderIdentity, RenewTime) and tools read its renewTime as the node's liveness. A node whose
kubelet has stopped posting (not Ready: the `node-notready` fault) is not renewed, so its
lease goes stale as on a real cluster. kube-apiserver creates the namespace at start-up; here
the first lease does (a cluster without nodes has none, as scenarios expect).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..core.admission import admit_create
from ..core.clock import VirtualClock
from ..core.store import Store
from .node import node_alive

Obj = dict[str, Any]
NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40  # the kubelet's nodeLeaseDurationSeconds default
RENEW_SECONDS = 10.0  # a quarter of the duration, as the kubelet renews


class NodeLeases:
    name = "node-leases"

    def __init__(self, store: Store, clock: VirtualClock,
                 renew_seconds: float = RENEW_SECONDS) -> None:
        self.store = store
        self.clock = clock
        self.renew_seconds = renew_seconds
        self.leases = store.type("leases", "coordination.k8s.io")
        self.nodes = store.type("nodes")

    async def run(self) -> None:
        while True:
            self.step()
            await self.clock.sleep(self.renew_seconds, min_real=0.5)

    def step(self) -> None:
        """Create or renew the lease of every node whose kubelet is up."""
        now = _micro_time(self.clock.time())
        for node in self.store.list(self.nodes):
            if not node_alive(node):
                continue
            name = node["metadata"]["name"]
            if self.store.find(self.leases, NAMESPACE, name) is None:
                self._ensure_namespace()
                self.store.create(self.leases, _lease(node, now), NAMESPACE)
            else:
                self.store.mutate(self.leases, NAMESPACE, name,
                                  lambda lease: lease["spec"].update(renewTime=now))

    def _ensure_namespace(self) -> None:
        ns_type = self.store.type("namespaces")
        if self.store.find(ns_type, None, NAMESPACE) is None:
            self.store.create(ns_type, admit_create(self.store, ns_type,
                                                    {"metadata": {"name": NAMESPACE}}))


def _lease(node: Obj, now: str) -> Obj:
    meta = node["metadata"]
    return {"metadata": {"name": meta["name"], "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}]},
            "spec": {"holderIdentity": meta["name"],
                     "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": now}}


def _micro_time(ts: float) -> str:
    """metav1.MicroTime, as a Lease's times are written."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
