"""Render a pod's runtime state as the `status` the kubelet writes, in real Kubernetes shapes.

Pure: it takes the runtime and the pod's current status (to keep what other components own,
such as the scheduler's PodScheduled condition, `qosClass` or `nominatedNodeName`) and
returns the new status dict. The kubelet writes it only when it differs from the stored one.
"""

from __future__ import annotations

from typing import Any

from .runtime import ContainerRuntime, PodRuntime, timestamp

_OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


def container_status(c: ContainerRuntime) -> dict[str, Any]:
    inst = c.instance
    state: dict[str, Any]
    last: dict[str, Any] | None = c.last_terminated
    if c.stage == "running" and inst is not None:
        state = {"running": {"startedAt": timestamp(inst.started_at)}}
    elif c.stage in ("exited", "completed") and c.terminated is not None:
        state = {"terminated": dict(c.terminated)}
    else:
        waiting: dict[str, Any] = {"reason": c.waiting_reason or "ContainerCreating"}
        if c.waiting_message:
            waiting["message"] = c.waiting_message
        state = {"waiting": waiting}
        if c.terminated is not None:
            last = c.terminated
    status: dict[str, Any] = {
        "name": c.name,
        "image": c.spec.image,
        "imageID": c.image_id,
        "ready": c.ready if c.spec.role != "init" else c.stage == "completed",
        "started": bool(c.stage == "running" and inst is not None and inst.started),
        "restartCount": c.restart_count,
        "state": state,
        "lastState": {"terminated": dict(last)} if last else {},
    }
    cid = inst.container_id if inst is not None else (c.terminated or {}).get("containerID")
    if cid:
        status["containerID"] = cid
    return status


def _conditions(pod: PodRuntime, existing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ours = [pod.conditions[k] for k in _OWNED_CONDITIONS if k in pod.conditions]
    extra_types = {c["type"] for c in pod.extra_conditions}
    theirs = [c for c in existing
              if c.get("type") not in _OWNED_CONDITIONS and c.get("type") not in extra_types]
    if not any(c.get("type") == "PodScheduled" for c in theirs):
        theirs.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                       "lastTransitionTime": timestamp(pod.admitted_at)})
    return [dict(c) for c in pod.extra_conditions] + ours + theirs


def render_status(pod: PodRuntime, existing: dict[str, Any] | None) -> dict[str, Any]:
    existing = existing or {}
    status = {k: v for k, v in existing.items()
              if k not in ("reason", "message", "initContainerStatuses")}
    status["phase"] = pod.phase
    status["conditions"] = _conditions(pod, existing.get("conditions") or [])
    status["hostIP"] = pod.host_ip
    status["hostIPs"] = [{"ip": pod.host_ip}]
    if pod.sandbox_ready_at is not None:
        status["podIP"] = pod.pod_ip
        status["podIPs"] = [{"ip": pod.pod_ip}]
    status["startTime"] = timestamp(pod.admitted_at)
    inits = [container_status(c) for c in pod.containers if c.spec.role != "app"]
    if inits:
        status["initContainerStatuses"] = inits
    status["containerStatuses"] = [container_status(c) for c in pod.app()]
    if pod.failure:
        status["reason"], status["message"] = pod.failure
    return status
