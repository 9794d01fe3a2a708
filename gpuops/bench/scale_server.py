"""The sim-scale benchmark's server process: a bare simcluster API, populated in-process."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from gpuops.simcluster.bulk import populate, register_churn
from gpuops.simcluster.cluster import SimCluster
from gpuops.simcluster.config import SimConfig


async def _main(nodes: int, pods: int, kubeconfig: Path) -> None:
    cluster = SimCluster(SimConfig(scenario="empty", controllers=False, history_window=10_000))
    await cluster.start()
    populate(cluster, nodes, pods)
    register_churn(cluster)
    cluster.write_kubeconfig(kubeconfig)
    print("ready", cluster.url, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(_main(args.nodes, args.pods, args.kubeconfig))
