"""GPUs as dcgm-exporter shows them: the per-GPU series of every Ready GPU node.

Which pod holds which GPU is `core/gpus.py`'s (the kubelet needs the same answer). The series
carry dcgm-exporter's labels (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`,
and `container`, `namespace`, `pod` for a GPU a pod holds). A GPU shared by several pods
(`gpuops.io/gpu-milli` shares) has one series per pod, as dcgm-exporter reports a shared GPU
with its Kubernetes mapping: each carries the device's values, to which each pod adds its
share of the work (a pod holding 0.3 of a GPU busy at 90 % adds 27 points).
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.gpus import (
    MILLI_PER_GPU,
    PCI_BUS_IDS,
    PRODUCT_LABEL,
    XID_ANNOTATION,
    GpuAllocations,
    Holder,
    gpu_capacity,
)
from ..core.resources import ResourceType
from ..core.store import Store

if TYPE_CHECKING:
    from .servingindex import PodView

LABEL_MEMORY = "nvidia.com/gpu.memory"  # GPU feature discovery's node label, MiB
ANN_GPU_UTIL = "sim.gpuops.io/gpu-util"  # pod: pin its GPUs' utilisation (percent)
TRAINING_UTIL = 90.0  # a GPU pod that serves no InferencePool is taken for a training job

# (product substring, framebuffer MiB, max power W); the first match wins.
_GPU_SPECS = (("B200", 183359, 1000.0), ("H200", 143771, 700.0), ("H100", 81559, 700.0),
              ("A100-SXM4-40GB", 40960, 400.0), ("A100-PCIE-40GB", 40960, 250.0),
              ("A100", 81920, 400.0), ("L40S", 46068, 350.0), ("L40", 46068, 300.0),
              ("L4", 23034, 72.0), ("A10G", 23028, 300.0), ("A10", 23028, 150.0),
              ("T4", 15360, 70.0))
_DEFAULT_SPEC = (81920, 400.0)


@dataclass(frozen=True)
class NodeGpus:
    """The static part of a GPU node's series."""

    capacity: int
    memory_mib: int
    max_power_w: float
    labels: tuple[str, ...]  # each GPU's exporter labels, rendered


def node_gpus(node: dict[str, Any]) -> NodeGpus | None:
    """A Ready node's GPUs (None: no GPUs advertised, or not Ready — no exporter answers)."""
    status = node.get("status") or {}
    capacity = gpu_capacity(node)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    if capacity <= 0 or not ready:
        return None
    name = node["metadata"]["name"]
    node_labels = node["metadata"].get("labels") or {}
    product = node_labels.get(PRODUCT_LABEL, "NVIDIA-GPU")
    memory, power = next(((m, p) for key, m, p in _GPU_SPECS if key in product), _DEFAULT_SPEC)
    memory_label = str(node_labels.get(LABEL_MEMORY, ""))
    if memory_label.isdigit():  # else (absent or malformed) the product's known size
        memory = int(memory_label)
    return NodeGpus(capacity, memory, power, _static_labels(name, capacity, product))


@functools.lru_cache(maxsize=65536)
def _static_labels(node: str, capacity: int, product: str) -> tuple[str, ...]:
    """Each GPU's exporter labels, rendered once: they never change for a node."""
    model_name = product.replace("-", " ")  # GFD's label has dashes where nvidia-smi has spaces
    return tuple(render_labels({"gpu": str(i), "UUID": gpu_uuid(node, i),
                                "pci_bus_id": "0000" + PCI_BUS_IDS[i % len(PCI_BUS_IDS)],
                                "device": f"nvidia{i}", "modelName": model_name,
                                "Hostname": node})
                 for i in range(capacity))


@functools.lru_cache(maxsize=65536)
def _holder_labels(holder: Holder) -> str:
    """A held GPU's `container`, `namespace` and `pod` labels, rendered once per holder."""
    return render_labels({"container": holder.container, "namespace": holder.namespace,
                          "pod": holder.name})


def render_labels(labels: dict[str, str]) -> str:
    return ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'simcluster/{node}/{index}')}"


def last_xids(annotation: str | None) -> dict[int, int]:
    """GPU index -> the last Xid recorded in the node's `sim.gpuops.io/xid-events`."""
    if not annotation:
        return {}
    try:
        events = json.loads(annotation)
    except ValueError:
        return {}  # not ours to repair: a malformed annotation shows no Xid
    out: dict[int, int] = {}
    if isinstance(events, list):
        for event in events:
            if (isinstance(event, dict) and isinstance(event.get("xid"), int)
                    and isinstance(event.get("gpu", 0), int)):
                out[event.get("gpu", 0)] = event["xid"]
    return out


@functools.lru_cache(maxsize=131072)
def _jitter(uid: str, index: int, spread: float) -> float:
    """A stable offset in [-spread, spread] per GPU of a pod: busy GPUs do not all read 90 %."""
    digest = hashlib.blake2b(f"{uid}/{index}".encode(), digest_size=2).digest()
    return (int.from_bytes(digest, "big") / 65535.0 - 0.5) * 2.0 * spread


def shared_usage(holders: tuple[Holder, ...], pods: Mapping[str, PodView], index: int,
                 memory_mib: int, serving_util: Callable[[PodView], float | None]
                 ) -> tuple[float, int]:
    """(utilisation %, framebuffer used MiB) of one GPU with its holders (none: idle): each
    pod's usage weighted by the share it holds."""
    util, used = 0.0, 0
    for holder in holders:
        pod_util, pod_used = gpu_usage(pods.get(holder.uid), index, memory_mib, serving_util)
        share = holder.milli / MILLI_PER_GPU
        util += pod_util * share
        used += int(pod_used * share)
    return min(util, 100.0), min(used, memory_mib)


def gpu_usage(pod: PodView | None, index: int, memory_mib: int,
              serving_util: Callable[[PodView], float | None]) -> tuple[float, int]:
    """(utilisation %, framebuffer used MiB) of one GPU, held by `pod` (None: idle)."""
    if pod is None or not pod.running:
        return 0.0, 0
    served = serving_util(pod)
    pinned = pod.annotations.get(ANN_GPU_UTIL)
    util: float
    if pinned is not None:
        try:
            util = min(100.0, max(0.0, float(pinned)))
        except ValueError:
            util = TRAINING_UTIL
    elif served is not None:
        util = served
    else:
        util = TRAINING_UTIL + _jitter(pod.uid, index, 5.0)
    if served is not None:
        used = int(memory_mib * 0.9)  # vLLM reserves --gpu-memory-utilization (0.9) up front
    else:
        used = int(memory_mib * (0.8 + _jitter(pod.uid, index, 0.05)))
    return util, used


GPU_FAMILIES = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
)


def render_gpu_metrics(store: Store, node_type: ResourceType, allocations: GpuAllocations,
                       pods: Mapping[str, PodView],
                       serving_util: Callable[[PodView], float | None]) -> str:
    """The DCGM families in the Prometheus text format (0.0.4).

    Rendered here rather than by prometheus_client's `generate_latest`: 5,000 nodes x 8 GPUs x
    5 families is 200,000 samples, which generate_latest (escaping every label of every sample)
    turns into ~8 s of blocked event loop per scrape; with each GPU's labels rendered once and
    cached it is well under a second.
    """
    lines: list[list[str]] = [[] for _ in GPU_FAMILIES]
    util_l, used_l, free_l, xid_l, power_l = lines
    for node in store.list(node_type):
        gpus = node_gpus(node)
        if gpus is None:
            continue
        name = node["metadata"]["name"]
        holders = allocations.holders(name, gpus.capacity)
        xids = last_xids((node["metadata"].get("annotations") or {}).get(XID_ANNOTATION))
        idle_w = 0.12 * gpus.max_power_w
        for i, static in enumerate(gpus.labels):
            held = holders.get(i, ())
            util, used = shared_usage(held, pods, i, gpus.memory_mib, serving_util)
            power = idle_w + (gpus.max_power_w - idle_w) * util / 100.0
            for labels in [f"{static},{_holder_labels(h)}" for h in held] or [static]:
                util_l.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {round(util)}\n")
                used_l.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {used}\n")
                free_l.append(f"DCGM_FI_DEV_FB_FREE{{{labels}}} {gpus.memory_mib - used}\n")
                xid_l.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xids.get(i, 0)}\n")
                power_l.append(f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {power:.3f}\n")
    out: list[str] = []
    for (family, doc), samples in zip(GPU_FAMILIES, lines):
        out.append(f"# HELP {family} {doc}\n# TYPE {family} gauge\n")
        out.extend(samples)
    return "".join(out)
