"""The watcher's Prometheus metrics: stranded GPUs, FGD fragmentation, pending GPU pods.

So that they can be graphed next to DCGM's: one registry of our own (the process's default
one also carries Python's process metrics, which nobody asked for here), served on
`GPUOPS_WATCHER_METRICS_PORT` by the sensor process (`gpuops sensor cluster`).
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from gpuops.tasks.rebalance.stranded import GpuAssessment


class GpuGauges:
    def __init__(self, cluster: str, registry: CollectorRegistry | None = None) -> None:
        self.cluster = cluster
        self.registry = registry or CollectorRegistry()
        self.stranded = Gauge(
            "gpuops_stranded_gpus", "Free GPUs on nodes where no pending GPU pod fits, while "
            "GPU pods are pending (whole-GPU units; a 500m share is 0.5).", ["cluster"],
            registry=self.registry)
        self.fragmentation = Gauge(
            "gpuops_gpu_fragmentation", "FGD fragmentation (Weng et al., ATC'23): free GPUs "
            "that the workload's typical pod shapes cannot use, summed over nodes (GPUs).",
            ["cluster"], registry=self.registry)
        self.pending = Gauge(
            "gpuops_pending_gpu_pods", "Pending GPU pods by shape (`8-gpu`, `500m-gpu`).",
            ["cluster", "shape"], registry=self.registry)
        self.episode = Gauge(
            "gpuops_gpu_stranded_episode", "1 while a stranded-GPU episode goes on (reported "
            "or waiting for its debounce), else 0.", ["cluster"], registry=self.registry)
        self._lock = threading.Lock()

    def update(self, assessment: GpuAssessment, *, in_episode: bool) -> None:
        with self._lock:
            self.stranded.labels(self.cluster).set(assessment.stranded_gpus)
            self.fragmentation.labels(self.cluster).set(assessment.fragmentation_gpus)
            self.episode.labels(self.cluster).set(1 if in_episode else 0)
            self.pending.clear()
            for shape, pods in assessment.pending_by_shape.items():
                self.pending.labels(self.cluster, shape).set(len(pods))


def serve_metrics(registry: CollectorRegistry, *, host: str, port: int) -> Any:
    """Serve `registry` on http://host:port/metrics (a daemon thread); returns the server
    (`shutdown()` stops it)."""
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
