"""`kubectl get pods`: NAME READY STATUS RESTARTS AGE, and wide IP NODE NOMINATED NODE
READINESS GATES, with STATUS worked out as kube-apiserver's pod printer does: the pod's reason
(or phase), then the first init container still in the way (`Init:0/1`,
`Init:CrashLoopBackOff`, `Init:Error`), then the app containers' waiting or terminated reason
(`ContainerCreating`, `CrashLoopBackOff`, `OOMKilled`, `Completed`, `ExitCode:3`), and
`Terminating` (or `Unknown` for a pod lost with its node) once deleted.
"""

from __future__ import annotations

from typing import Any

from .base import (
    AGE,
    NAME,
    Cells,
    Column,
    Obj,
    Printer,
    age,
    epoch,
    human_duration,
    integer,
    section,
    wide,
)

COLUMNS = (
    NAME,
    Column("Ready", description="The aggregate readiness state of this pod for accepting "
                                "traffic."),
    Column("Status", description="The aggregate status of the containers in this pod."),
    Column("Restarts", description="The number of times the containers in this pod have been "
                                   "restarted and when the last container in this pod has "
                                   "restarted."),
    AGE,
    wide("IP", "The pod's IP address."),
    wide("Node", "The node the pod is bound to."),
    wide("Nominated Node", "The node the scheduler nominated for the pod after preemption."),
    wide("Readiness Gates", "How many of the pod's readiness gates are true."),
)

_COMPLETED = {"Succeeded": ("Succeeded", "The pod has completed successfully."),
              "Failed": ("Failed", "The pod failed.")}
NODE_LOST = "NodeLost"  # the node lifecycle controller's reason for a pod of an unreachable node


def cells(pod: Obj, now: float) -> Cells:
    meta, spec, status = section(pod, "metadata"), section(pod, "spec"), section(pod, "status")
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(
        1 for c in init_specs.values() if _restartable(c))
    ready = restarts = sidecar_restarts = 0
    last_restart = sidecar_last_restart = 0.0

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        count = integer(cs.get("restartCount"))
        restarts += count
        finished = _last_finished(cs)
        last_restart = max(last_restart, finished)
        sidecar = _restartable(init_specs.get(cs.get("name")))
        if sidecar:
            sidecar_restarts += count
            sidecar_last_restart = max(sidecar_last_restart, finished)
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and integer(terminated.get("exitCode")) == 0:
            continue
        if sidecar and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if terminated:
            if terminated.get("reason"):
                reason = f"Init:{terminated['reason']}"
            elif integer(terminated.get("signal")):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{integer(terminated.get('exitCode'))}"
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _condition_true(status, "Initialized"):
        restarts, last_restart = sidecar_restarts, sidecar_last_restart
        running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += integer(cs.get("restartCount"))
            last_restart = max(last_restart, _last_finished(cs))
            state = cs.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = (f"Signal:{terminated['signal']}" if integer(terminated.get("signal"))
                          else f"ExitCode:{integer(terminated.get('exitCode'))}")
            elif cs.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _condition_true(status, "Ready") else "NotReady"

    if meta.get("deletionTimestamp"):
        if status.get("reason") == NODE_LOST:
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_cell = str(restarts)
    if restarts and last_restart:
        restarts_cell = f"{restarts} ({human_duration(now - last_restart)} ago)"
    return [meta.get("name", ""), f"{ready}/{total}", reason, restarts_cell, age(pod, now),
            _pod_ip(status), spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", _readiness_gates(spec, status)]


def conditions(pod: Obj) -> list[dict[str, Any]]:
    """Succeeded and Failed pods carry a Completed row condition."""
    phase = section(pod, "status").get("phase")
    if phase not in _COMPLETED:
        return []
    reason, message = _COMPLETED[phase]
    return [{"type": "Completed", "status": "True", "reason": reason, "message": message}]


PRINTER = Printer(COLUMNS, cells, conditions)


def _restartable(container: Obj | None) -> bool:
    """A sidecar: an init container with `restartPolicy: Always`."""
    return bool(container) and (container or {}).get("restartPolicy") == "Always"


def _condition_true(status: Obj, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in status.get("conditions") or [])


def _last_finished(cs: Obj) -> float:
    finished = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
    return (epoch(finished) or 0.0) if isinstance(finished, str) else 0.0


def _pod_ip(status: Obj) -> str:
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips and isinstance(ips[0], dict) else "") or ""
    return ip or "<none>"


def _readiness_gates(spec: Obj, status: Obj) -> str:
    gates = spec.get("readinessGates") or []
    if not gates:
        return "<none>"
    conds = status.get("conditions") or []
    true = 0
    for gate in gates:
        for cond in conds:
            if cond.get("type") == gate.get("conditionType"):
                true += cond.get("status") == "True"
                break
    return f"{true}/{len(gates)}"
