"""Since when a workload has been healthy: all its pods Ready, no container restarting."""

from __future__ import annotations

from datetime import datetime

from gpuops.common.errors import KubeError, KubeNotFound
from gpuops.tasks.clients.kube import Kube

_GROUPS = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "ReplicaSet": "apps/v1",
           "DaemonSet": "apps/v1", "Job": "batch/v1",
           "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}


def _ready_since(pod: dict) -> datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            if cond.get("status") != "True" or not cond.get("lastTransitionTime"):
                return None
            return datetime.fromisoformat(cond["lastTransitionTime"])
    return None


def workload_ready_since(kube: Kube, namespace: str, kind: str, name: str,
                         pod_hint: str = "") -> datetime | None:
    """The latest time any of the workload's pods became Ready, if all are Ready now; None
    while any is not (or the workload has no pod)."""
    try:
        if kind == "Pod":
            pods = [kube.get_pod(namespace, name or pod_hint)]
        else:
            owner = kube.get(_GROUPS.get(kind, "apps/v1"), kind, namespace, name)
            selector = (owner.get("spec") or {}).get("selector") or {}
            labels = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
            pods = kube.list_pods(namespace, label_selector=labels or None)
    except KubeNotFound:
        return None
    except KubeError:
        return None  # unknown: do not claim a recovery
    pods = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    times = [_ready_since(p) for p in pods]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)
