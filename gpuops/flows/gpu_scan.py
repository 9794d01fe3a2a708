"""The scheduled GPU scan: the cluster's GPUs as a table, every few minutes, changing nothing.

Why a flow of its own next to the watcher's gauges: a person looking at a stranded-GPU
episode (or at a repack's approval) wants the picture per node — what each has, what is free,
how fragmented — at a known time, in the Prefect UI, and a history of it; Prometheus keeps
the totals, the artifacts keep the rows. The assessment is the watcher's
(`tasks/rebalance/stranded`), from fresh lists rather than watch caches.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from gpuops.blocks.connections import KubernetesCluster
from gpuops.blocks.loading import load_block
from gpuops.tasks.rebalance.from_kube import cluster_view
from gpuops.tasks.rebalance.stranded import assess_gpus, failed_for_gpus, node_rows


@task(retries=2, retry_delay_seconds=5)
def read_cluster(kube: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return kube.list_nodes(), kube.list_pods()


def _summary(assessment: Any, cluster: str) -> str:
    state = "Stranded GPUs: an episode" if assessment.stranded else "No stranded-GPU episode"
    lines = [f"# GPU scan of {cluster}", "", f"**{state}** — {assessment.why}.", "",
             "| measure | GPUs |", "|---|---|",
             f"| stranded (free where no pending GPU pod fits) | {assessment.stranded_gpus} |",
             f"| FGD fragmentation (Weng et al., ATC'23) | {assessment.fragmentation_gpus} |",
             f"| free where the stranded pods may run | {assessment.free_gpus_usable} |", ""]
    if assessment.pending_by_shape:
        lines += ["| pending shape | pods |", "|---|---|"]
        lines += [f"| `{shape}` | {', '.join(pods)} |"
                  for shape, pods in sorted(assessment.pending_by_shape.items())]
    else:
        lines.append("No GPU pod is pending.")
    return "\n".join(lines) + "\n"


@flow(name="gpu-scan", log_prints=True)
async def gpu_scan(cluster_block: str = "") -> dict[str, Any]:
    """Measure the cluster's GPUs (stranded GPUs, FGD fragmentation, pending GPU pods by
    shape) and publish them as a table per node and a summary.

    Args:
        cluster_block: A saved `gpuops-kubernetes-cluster` Block; empty: KUBECONFIG and
            GPUOPS_* settings.
    """
    cluster = await load_block(KubernetesCluster, cluster_block)
    nodes, pods = read_cluster(cluster.kube())
    view = cluster_view(nodes, pods)
    failed = {f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p in pods
              if failed_for_gpus(p)}
    assessment = assess_gpus(view.cluster, failed)
    await acreate_table_artifact(table=node_rows(view.cluster, assessment), key="gpu-scan-nodes",
                                 description="GPU nodes: GPUs, free, FGD fragmentation")
    await acreate_markdown_artifact(markdown=_summary(assessment, cluster.cluster_name),
                                    key="gpu-scan-summary", description="GPU scan summary")
    print(assessment.why)
    return {"stranded": assessment.stranded, "stranded_gpus": assessment.stranded_gpus,
            "gpu_fragmentation": assessment.fragmentation_gpus,
            "pending_gpu_pods_by_shape": assessment.pending_by_shape}
