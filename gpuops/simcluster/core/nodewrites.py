"""The node writes both the node lifecycle controller and the node pools make.

A node whose kubelet posts status again (Ready, its not-ready taints removed), and a node gone
for good, removed with its pods: the lifecycle controller does these for the `node-ready` and
`node-shutdown` faults, the node pools when a provisioned node turns Ready or a scale-in ends.
"""

from __future__ import annotations

from typing import Any

from .nodeindex import NodeIndex
from .nodes import mark_ready, remove_taints
from .recorder import Recorder
from .store import Store

Obj = dict[str, Any]


def remove_node(store: Store, recorder: Recorder, index: NodeIndex, name: str) -> list[str]:
    """Delete a node that is gone for good and its pods at once (pod GC's orphan cleanup:
    no kubelet is left to finalize them). Returns the pods deleted as `ns/name`."""
    deleted = []
    for pod in index.pods_on(name):
        ns, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if store.find(index.pods_type, ns, pod_name) is None:
            continue
        if pod["metadata"].get("deletionTimestamp"):
            store.finalize_deletion(index.pods_type, ns, pod_name)
        else:
            store.delete(index.pods_type, ns, pod_name, grace_period=0)
        deleted.append(f"{ns}/{pod_name}")
    node = store.find(index.nodes_type, None, name)
    if node is not None:
        recorder.record(node, "RemovingNode",
                        f"Node {name} event: Removing Node {name} from Controller",
                        component="node-controller")
        store.delete(index.nodes_type, None, name)
    return deleted


def report_ready(store: Store, recorder: Recorder, index: NodeIndex, name: str, now: str,
                 *taints: str) -> Obj:
    """The kubelet posts status again: Ready=True, the given not-ready `taints` removed, a
    `NodeReady` event. Returns the node as it is now."""
    store.mutate(index.nodes_type, None, name,
                 lambda n: mark_ready(n.setdefault("status", {}), now), subresource="status")
    node = store.mutate(index.nodes_type, None, name,
                        lambda n: remove_taints(n.setdefault("spec", {}), *taints))
    recorder.record(node, "NodeReady", f"Node {name} status is now: NodeReady",
                    component="kubelet", host=name)
    return node
