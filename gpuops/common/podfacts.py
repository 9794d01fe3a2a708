"""Small facts about pods and nodes that several features read the same way.

A drain skips DaemonSet and mirror pods; capacity counts the GPUs that pods hold, leaving
DaemonSets and finished pods out; a rebalance needs the same GPU counts and each node's
allocatable GPUs. One reading of each fact keeps those features from disagreeing on a
corner (an init container asking for more GPUs than the main ones, a pod already
terminating). Pure: plain dicts in the Kubernetes API's shape in, plain values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuops.common.quantity import parse_quantity

GPU = "nvidia.com/gpu"
GPU_MILLI = "gpuops.io/gpu-milli"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds: the larger of its containers' sum and its largest init container
    (init containers run one at a time, before the others). A container's limit counts,
    else its request (for extended resources the two must be equal when both are set)."""
    return _asked(pod, GPU)


def pod_gpu_milli(pod: Mapping[str, Any]) -> int:
    """The share of one GPU a pod asks for, in milli-GPU (`gpuops.io/gpu-milli`, gpuops'
    and simcluster's shared-GPU resource); 0 when it asks for none. Counted as `pod_gpus`."""
    return _asked(pod, GPU_MILLI)


def _asked(pod: Mapping[str, Any], resource: str) -> int:
    spec = pod.get("spec") or {}

    def asked(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        wanted = (resources.get("limits") or {}).get(resource) or \
            (resources.get("requests") or {}).get(resource) or 0
        return int(parse_quantity(wanted))

    main = sum(asked(c) for c in spec.get("containers") or [])
    init = max((asked(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def holds_resources(pod: Mapping[str, Any]) -> bool:
    """Whether the pod still holds its node's resources: not finished, not terminating."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not \
        (pod.get("metadata") or {}).get("deletionTimestamp")


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    """Owned by a DaemonSet: evicting it is pointless (it comes straight back), and it is
    no workload demand."""
    return any(ref.get("kind") == "DaemonSet"
               for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    """A static pod's mirror: the kubelet manages it, the API server cannot evict it."""
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def node_allocatable_gpus(node: Mapping[str, Any]) -> int:
    """GPUs the node offers to pods (`status.allocatable`); 0 while its device plugin is
    not up yet, or on a CPU node."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return int(parse_quantity(allocatable.get(GPU) or 0))
