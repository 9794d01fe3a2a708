"""A container's GPUs and its node's recent Xids, read from DCGM exporter series.

Why: matching an Xid to the GPU the container was given (`conditions.xid_on_container_gpu`)
needs to know that GPU. The scheduler's `gpuops.io/gpu-index` annotation says it on
simcluster, but a real cluster has no such record on the pod; what it has is NVIDIA's DCGM
exporter (the GPU Operator's), whose series carry `pod`, `namespace` and `container` for a
GPU a pod holds (its Kubernetes pod mapping), with `gpu`, `UUID` and `pci_bus_id`. Its
`DCGM_FI_DEV_XID_ERRORS` is the value of the last Xid each GPU reported, so a change of that
value over the look-back is an Xid, at the first sample that shows it.

The queries and the reading of their answers are pure (`*_query`, `gpus_from_samples`,
`xids_from_series`); `read_container_gpus` and `read_node_xids` do the two Prometheus calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import pandas as pd

from gpuops.tasks.clients.prometheus import Prometheus, RangeSeries
from gpuops.tasks.restarts.evidence import GpuDevice, XidEvent

GPU_SERIES = "DCGM_FI_DEV_XID_ERRORS"  # every GPU has it; a held one with the pod's labels
#: how far before the termination Xids are read: the longest rule window (gpu-lost-after-xid)
XID_LOOKBACK = timedelta(days=1)
#: how far back an instant query looks for the pod's series (a pod gone since has none now)
MAPPING_LOOKBACK = "10m"


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def container_gpus_query(namespace: str, pod: str) -> str:
    """The DCGM series of the GPUs a pod holds, as last seen in the mapping look-back."""
    return (f'last_over_time({GPU_SERIES}{{namespace="{_label_value(namespace)}",'
            f'pod="{_label_value(pod)}"}}[{MAPPING_LOOKBACK}])')


def node_xids_query(node: str, step: timedelta) -> str:
    """Every GPU's last-Xid series of one node (dcgm-exporter's `Hostname` is the node's),
    as the highest value of each step, so a value held for less than a step is not missed."""
    window = f"{max(1, int(step.total_seconds()))}s"
    return (f'max by (gpu, pci_bus_id) (max_over_time('
            f'{GPU_SERIES}{{Hostname="{_label_value(node)}"}}[{window}]))')


def gpus_from_samples(samples: Iterable[tuple[Mapping[str, str], float]],
                      container: str) -> list[GpuDevice]:
    """The container's GPUs from the pod's series: those labelled with its name, else (an
    exporter without the `container` label) every GPU the pod holds."""
    held: dict[tuple[str, str], GpuDevice] = {}
    own: dict[tuple[str, str], GpuDevice] = {}
    for labels, _ in samples:
        index = labels.get("gpu", "")
        gpu = GpuDevice(index=int(index) if index.isdigit() else None,
                        pci_bus_id=labels.get("pci_bus_id", ""), uuid=labels.get("UUID", ""))
        key = (index, gpu.pci_bus_id)
        held.setdefault(key, gpu)
        if labels.get("container") == container:
            own.setdefault(key, gpu)
    chosen = own or held
    return [chosen[k] for k in sorted(chosen, key=lambda k: (len(k[0]), k))]


def xids_from_series(series: Iterable[RangeSeries], *, start: datetime) -> list[XidEvent]:
    """An Xid each time a GPU's last-Xid value changes to a non-zero one. A value already there
    at the first sample happened at or before `start`, so it is dated `start` (at least that
    old) rather than now."""
    found: list[XidEvent] = []
    for s in series:
        index, bus = s.labels.get("gpu", ""), s.labels.get("pci_bus_id", "")
        previous: float | None = None
        for at, value in s.values.items():
            if value and value != previous:
                first = previous is None
                when = start if first else pd.Timestamp(at).to_pydatetime()
                xid = int(value)
                found.append(XidEvent(
                    xid=xid, gpu=int(index) if index.isdigit() else None, pci_bus_id=bus,
                    time=when,
                    message=(f"{GPU_SERIES}={xid} on GPU {index or '?'} (PCI {bus or '?'})"
                             + (" already at the start of the look-back" if first else ""))))
            previous = value
    return sorted(found, key=lambda x: (x.time is None, x.time or start))


def read_container_gpus(prometheus: Prometheus, namespace: str, pod: str, container: str,
                        at: datetime | None = None) -> list[GpuDevice]:
    return gpus_from_samples(prometheus.query(container_gpus_query(namespace, pod), at=at),
                             container)


def read_node_xids(prometheus: Prometheus, node: str, end: datetime,
                   step: timedelta = timedelta(seconds=15)) -> list[XidEvent]:
    """The node's Xids of the day before `end`, dated to within `step` (a day at 15 s is
    5,760 points a GPU, one request)."""
    start = end - XID_LOOKBACK
    return xids_from_series(prometheus.query_range(node_xids_query(node, step), start, end,
                                                   step),
                            start=start)
