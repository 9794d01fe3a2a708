"""Read what each configured pool has now: its size in AWS (or the cluster) and its use.

Why both sources: AWS knows what was requested (desired, min, max), the cluster knows what
runs on the nodes. The plan starts from the first; "never below what is in use" needs the
second. One pod list serves every pool.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuops.blocks.capacity import PoolConfig
from gpuops.tasks.capacity.prewarm import PoolState, pool_usage
from gpuops.tasks.clients.aws import Aws
from gpuops.tasks.clients.kube import Kube


def read_pool_states(pools: Sequence[PoolConfig], *, aws: Aws | None, kube: Kube,
                     eks_cluster: str) -> dict[str, PoolState]:
    pods = kube.list_pods()
    states = {}
    for pool in pools:
        nodes = [n["metadata"]["name"] for n in kube.list_nodes(label_selector=pool.selector)]
        in_use, gpus = pool_usage(nodes, pods, pool.gpus_per_node)
        if pool.backing == "placeholder":
            states[pool.name] = PoolState(pool.name, len(nodes), in_use, gpus)
            continue
        if aws is None:
            raise ValueError(f"pool {pool.name!r} is backed by {pool.backing!r}: an AWS "
                             "connection is needed")
        group = (aws.describe_nodegroup(eks_cluster, pool.group_name) if pool.backing == "eks"
                 else aws.describe_asg(pool.group_name))
        states[pool.name] = PoolState(pool.name, group.effective_desired, in_use, gpus,
                                      aws_min=group.min_size if pool.backing == "asg" else None,
                                      aws_max=group.max_size)
    return states
