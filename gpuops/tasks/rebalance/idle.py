"""Which nodes' allocated GPUs are idle, from DCGM exporter samples (pure).

dcgm-exporter reports `DCGM_FI_DEV_GPU_UTIL` per GPU, with `pod`, `namespace` and `container`
labels on a GPU a pod holds (one series per pod when pods share a GPU) and `Hostname` naming
the node. A node is idle when it has GPUs allocated to pods and every one of them is at or
below the threshold: the pods hold GPUs (and their framebuffer) without using them, which
consolidation can reclaim. A node whose pods use one GPU and leave the others idle is not idle
(it is a packing question, the stranded-GPU measure's). Nodes without allocated GPUs do not
appear: no pod is wasting anything there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NODE_LABEL = "Hostname"
UTIL_QUERY = 'DCGM_FI_DEV_GPU_UTIL{pod!=""}'


@dataclass(frozen=True)
class NodeGpuUse:
    node: str
    gpus: int  # allocated GPUs seen (distinct `gpu` labels)
    max_util_pct: float
    pods: tuple[str, ...]  # namespace/name holding them

    def idle(self, threshold_pct: float) -> bool:
        return self.gpus > 0 and self.max_util_pct <= threshold_pct


def node_gpu_use(samples: Iterable[tuple[Mapping[str, str], float]],
                 node_label: str = NODE_LABEL) -> dict[str, NodeGpuUse]:
    """Per node, from (labels, value) samples of `UTIL_QUERY`."""
    gpus: dict[str, set[str]] = {}
    peak: dict[str, float] = {}
    pods: dict[str, set[str]] = {}
    for labels, value in samples:
        node = labels.get(node_label)
        if not node or not labels.get("pod"):
            continue
        gpus.setdefault(node, set()).add(labels.get("gpu") or labels.get("UUID") or "?")
        peak[node] = max(peak.get(node, 0.0), float(value))
        pods.setdefault(node, set()).add(f"{labels.get('namespace', '')}/{labels['pod']}")
    return {node: NodeGpuUse(node, len(gpus[node]), peak[node], tuple(sorted(pods[node])))
            for node in gpus}
