"""The rebalance's reads (thin I/O): the cluster into the planner's model, an earlier run's
state. Everything it decides with these is pure (`from_kube`, `leftovers`, `execution`)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound

from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rebalance.from_kube import ClusterView, ConversionPolicy, cluster_view


def read_objects(kube: Kube) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                      list[dict[str, Any]]]:
    """Nodes, pods and PodDisruptionBudgets of the whole cluster, as the API returns them."""
    return kube.list_nodes(), kube.list_pods(), kube.list_pdbs()


def read_cluster(kube: Kube, policy: ConversionPolicy | None = None) -> ClusterView:
    nodes, pods, pdbs = read_objects(kube)
    return cluster_view(nodes, pods, pdbs, policy=policy)


async def run_is_active(run_id: str) -> bool:
    """Is the flow run `run_id` still going (scheduled, running, paused)? A run the server
    does not know, or an id that is not one, is not."""
    try:
        uid = UUID(run_id)
    except ValueError:
        return False
    async with get_client() as client:
        try:
            run = await client.read_flow_run(uid)
        except ObjectNotFound:
            return False
    return run.state is not None and not run.state.is_final()
