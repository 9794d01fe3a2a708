"""The rebalance's reads (thin I/O): the cluster into the planner's model, an earlier run's
state. Everything it decides with these is pure (`from_kube`, `leftovers`, `execution`)."""

from __future__ import annotations

from typing import Any

from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rebalance.from_kube import ClusterView, ConversionPolicy, cluster_view


def read_objects(kube: Kube) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                      list[dict[str, Any]]]:
    """Nodes, pods and PodDisruptionBudgets of the whole cluster, as the API returns them."""
    return kube.list_nodes(), kube.list_pods(), kube.list_pdbs()


def read_cluster(kube: Kube, policy: ConversionPolicy | None = None) -> ClusterView:
    nodes, pods, pdbs = read_objects(kube)
    return cluster_view(nodes, pods, pdbs, policy=policy)
