"""GPUs as dcgm-exporter shows them: which pod holds which GPU, and the per-GPU series.

Kubernetes does not say which device a pod got; the NVIDIA device plugin picks. simcluster
picks deterministically and sticks to it: the first free indices of the node, in the order the
pods were seen bound, released when a pod finishes or goes. The series carry dcgm-exporter's
labels (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, and `container`,
`namespace`, `pod` for a GPU a pod holds).
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuops.common.quantity import parse_quantity

from ..kubelet.containerlogs import PCI_BUS_IDS  # the bus ids the kubelet's Xid log lines name

if TYPE_CHECKING:
    from ..core.resources import ResourceType
    from ..core.store import Store
    from .servingindex import PodView

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_PRODUCT = "nvidia.com/gpu.product"  # GPU feature discovery's node labels
LABEL_MEMORY = "nvidia.com/gpu.memory"  # MiB
ANN_GPU_UTIL = "sim.gpuops.io/gpu-util"  # pod: pin its GPUs' utilisation (percent)
ANN_XID_EVENTS = "sim.gpuops.io/xid-events"  # node: JSON list of {"xid", "time", "gpu"}
TRAINING_UTIL = 90.0  # a GPU pod that serves no InferencePool is taken for a training job

# (product substring, framebuffer MiB, max power W); the first match wins.
_GPU_SPECS = (("B200", 183359, 1000.0), ("H200", 143771, 700.0), ("H100", 81559, 700.0),
              ("A100-SXM4-40GB", 40960, 400.0), ("A100-PCIE-40GB", 40960, 250.0),
              ("A100", 81920, 400.0), ("L40S", 46068, 350.0), ("L40", 46068, 300.0),
              ("L4", 23034, 72.0), ("A10G", 23028, 300.0), ("A10", 23028, 150.0),
              ("T4", 15360, 70.0))
_DEFAULT_SPEC = (81920, 400.0)


def gpu_requests(spec: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """(container, GPUs) for the containers that ask for `nvidia.com/gpu`, in order."""
    out = []
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        raw = (resources.get("limits") or {}).get(GPU_RESOURCE) or \
            (resources.get("requests") or {}).get(GPU_RESOURCE)
        if raw is None:
            continue
        try:
            count = int(raw) if isinstance(raw, int) or raw.isdigit() else int(parse_quantity(raw))
        except (ValueError, AttributeError):
            continue  # admission would have refused it; such a pod holds no GPU here
        if count > 0:
            out.append((container.get("name", ""), count))
    return tuple(out)


class Holder(NamedTuple):
    pod: PodView
    labels: str  # `container`, `namespace` and `pod`, rendered


class GpuAssigner:
    """Sticky first-fit assignment of GPU indices to the GPU pods bound to each node."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, PodView]] = {}
        # node -> pod uid -> ((GPU index, rendered holder labels), ...)
        self.assigned: dict[str, dict[str, tuple[tuple[int, str], ...]]] = {}
        self.dirty: set[str] = set()

    def pod_changed(self, node: str, view: PodView) -> None:
        self.pods.setdefault(node, {})[view.uid] = view
        if view.uid not in self.assigned.get(node, {}):
            self.dirty.add(node)

    def pod_gone(self, node: str, uid: str) -> None:
        self.pods.get(node, {}).pop(uid, None)
        if self.assigned.get(node, {}).pop(uid, None) is not None:
            self.dirty.add(node)  # a waiting pod may fit now

    def node_changed(self, node: str) -> None:
        self.dirty.add(node)

    def holders(self, node: str, capacity: int) -> dict[int, Holder]:
        if node in self.dirty:
            self._assign(node, capacity)
        pods = self.pods.get(node, {})
        return {index: Holder(pods[uid], labels)
                for uid, slots in self.assigned.get(node, {}).items()
                for index, labels in slots}

    def _assign(self, node: str, capacity: int) -> None:
        self.dirty.discard(node)
        assigned = self.assigned.setdefault(node, {})
        used = {i for slots in assigned.values() for i, _ in slots}
        waiting = sorted((v for uid, v in self.pods.get(node, {}).items() if uid not in assigned),
                         key=lambda v: (v.created, v.name))
        for view in waiting:
            containers = [name for name, count in view.gpus for _ in range(count)]
            free = [i for i in range(capacity) if i not in used][:len(containers)]
            if len(free) < len(containers):
                self.dirty.add(node)  # over-committed: try again when something changes
                continue
            assigned[view.uid] = tuple(
                (index, render_labels({"container": container, "namespace": view.namespace,
                                       "pod": view.name}))
                for index, container in zip(free, containers))
            used.update(free)


@dataclass(frozen=True)
class NodeGpus:
    """The static part of a GPU node's series."""

    capacity: int
    memory_mib: int
    max_power_w: float
    labels: tuple[str, ...]  # each GPU's exporter labels, rendered


def gpu_capacity(node: dict[str, Any]) -> int:
    """The node's `nvidia.com/gpu` capacity (allocatable when capacity is not set)."""
    status = node.get("status") or {}
    raw = (status.get("capacity") or {}).get(GPU_RESOURCE) or \
        (status.get("allocatable") or {}).get(GPU_RESOURCE)
    if not raw:
        return 0
    try:
        return int(raw) if str(raw).isdigit() else int(parse_quantity(raw))
    except ValueError:
        return 0  # not a quantity: the device plugin advertises nothing usable


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
    product = node_labels.get(LABEL_PRODUCT, "NVIDIA-GPU")
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


def gpu_usage(holder: Holder | None, index: int, memory_mib: int,
              serving_util: Callable[[PodView], float | None]) -> tuple[float, int]:
    """(utilisation %, framebuffer used MiB) of one GPU."""
    if holder is None or not holder.pod.running:
        return 0.0, 0
    pod = holder.pod
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


def render_gpu_metrics(store: Store, node_type: ResourceType, assigner: GpuAssigner,
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
        holders = assigner.holders(name, gpus.capacity)
        xids = last_xids((node["metadata"].get("annotations") or {}).get(ANN_XID_EVENTS))
        idle_w = 0.12 * gpus.max_power_w
        for i, static in enumerate(gpus.labels):
            holder = holders.get(i)
            labels = static if holder is None else f"{static},{holder.labels}"
            util, used = gpu_usage(holder, i, gpus.memory_mib, serving_util)
            power = idle_w + (gpus.max_power_w - idle_w) * util / 100.0
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
