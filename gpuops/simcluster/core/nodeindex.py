"""Pods by node, nodes by pool and nodes' NoExecute taints, kept current by a store listener.

The node pool and node lifecycle controllers read these instead of listing every pod or node
on each tick: with 100,000 pods, a drain or a taint change must cost the pods of one node.
"""

from __future__ import annotations

from typing import Any

from .nodes import POOL_LABEL
from .resources import ResourceType
from .store import Store

Obj = dict[str, Any]
PodKey = tuple[str, str]  # (namespace, name)


class NodeIndex:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.pods_type = store.type("pods")
        self.nodes_type = store.type("nodes")
        self._pods: dict[str, dict[PodKey, Obj]] = {}  # node name -> its pods (latest objects)
        self._pool_nodes: dict[str, set[str]] = {}
        self._no_execute: dict[str, list[Obj]] = {}  # node name -> its NoExecute taints
        # Work for the taint manager: nodes whose NoExecute taints changed, pods newly bound
        # to a node that has some.
        self.dirty_nodes: set[str] = set()
        self.dirty_pods: set[PodKey] = set()
        for node in store.list(self.nodes_type):
            self._on_node(self.nodes_type, "ADDED", node, None)
        for pod in store.list(self.pods_type):
            self._on_pod(self.pods_type, "ADDED", pod, None)
        store.add_listener(self._on_pod, self.pods_type)
        store.add_listener(self._on_node, self.nodes_type)

    # --- reading -------------------------------------------------------------------------------

    def pods_on(self, node: str) -> list[Obj]:
        return list(self._pods.get(node, {}).values())

    def pod_count(self, node: str) -> int:
        return len(self._pods.get(node, ()))

    def pool_nodes(self, pool: str) -> set[str]:
        return self._pool_nodes.get(pool, set())

    def no_execute_taints(self, node: str) -> list[Obj]:
        return self._no_execute.get(node, [])

    # --- keeping current -----------------------------------------------------------------------

    def _on_pod(self, _rt: ResourceType, event: str, pod: Obj, old: Obj | None) -> None:
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        node = (pod.get("spec") or {}).get("nodeName")
        old_node = ((old or {}).get("spec") or {}).get("nodeName")
        if old_node and old_node != node:
            self._pods.get(old_node, {}).pop(key, None)
        if event == "DELETED":
            if node:
                pods = self._pods.get(node)
                if pods is not None:
                    pods.pop(key, None)
                    if not pods:
                        del self._pods[node]
            self.dirty_pods.discard(key)
            return
        if node:
            self._pods.setdefault(node, {})[key] = pod
            if node != old_node and self._no_execute.get(node):
                self.dirty_pods.add(key)

    def _on_node(self, _rt: ResourceType, event: str, node: Obj, old: Obj | None) -> None:
        name = node["metadata"]["name"]
        pool = (node["metadata"].get("labels") or {}).get(POOL_LABEL)
        old_pool = (((old or {}).get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
        if old_pool and old_pool != pool:
            self._pool_nodes.get(old_pool, set()).discard(name)
        if event == "DELETED":
            if pool:
                self._pool_nodes.get(pool, set()).discard(name)
            self._no_execute.pop(name, None)
            self.dirty_nodes.discard(name)
            return
        if pool:
            self._pool_nodes.setdefault(pool, set()).add(name)
        taints = [t for t in (node.get("spec") or {}).get("taints") or []
                  if t.get("effect") == "NoExecute"]
        if taints != self._no_execute.get(name, []):
            if taints:
                self._no_execute[name] = taints
            else:
                self._no_execute.pop(name, None)
            self.dirty_nodes.add(name)
