"""The simcluster process: `gpuops sim serve` runs one cluster until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from .cluster import SimCluster
from .config import SimConfig


async def _serve(config: SimConfig, host: str, port: int, kubeconfig: Path) -> None:
    cluster = SimCluster(config)
    url = await cluster.start(host, port)
    cluster.write_kubeconfig(kubeconfig)
    print(f"simcluster {cluster.name!r} serving at {url}; kubeconfig: {kubeconfig}",
          flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await cluster.stop()


def serve_forever(*, host: str = "127.0.0.1", port: int = 0, kubeconfig: Path,
                  scenario: str = "default", speed: float = 1.0,
                  aws_endpoint: str | None = None, cluster_name: str = "sim") -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = SimConfig(cluster_name=cluster_name, scenario=scenario, speed=speed,
                       aws_endpoint=aws_endpoint)
    asyncio.run(_serve(config, host, port, Path(kubeconfig)))
