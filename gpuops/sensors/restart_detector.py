"""Which container restarts a pod update reveals (pure), and what was already reported.

A restart's identity is (pod uid, container, restartCount). Init, sidecar (init containers
with `restartPolicy: Always`) and app containers all count, each under its own name.

A container that failed in a pod that will not restart it (restartPolicy Never, as training
Jobs use, or a pod that has gone Failed) shows no restart at all: its failure is in
`state.terminated`, and its log is still the current one. It is reported like a restart
("terminated"), once per container instance (its containerID, else its finishedAt), so a Job
whose pods are retried reports each pod's failure once. A container killed because its pod
is being deleted or taken away is not a failure of its own (the pod's trigger covers that).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from gpuops.tasks.restarts.evidence import parse_timestamp

ContainerKind = Literal["init", "sidecar", "app"]
Trigger = Literal["restart", "pod-failed", "waiting", "terminated"]
LogSource = Literal["previous", "current", "none"]

# Waiting reasons that mean the container cannot start at all: no restartCount will ever
# show them, so they are reported once per (pod, container, reason).
STUCK_WAITING = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError"}


@dataclass(frozen=True)
class DetectedRestart:
    namespace: str
    pod: str
    pod_uid: str
    container: str
    kind: ContainerKind
    restart_count: int
    missed: int  # earlier restarts not seen (no evidence left for them)
    trigger: Trigger = "restart"
    reason: str = ""  # for pod-failed / waiting: the pod's or the container's reason
    instance: str = ""  # for terminated: the container instance that ended

    @property
    def identity(self) -> str:
        base = f"{self.pod_uid}/{self.container}/{self.restart_count}"
        if self.trigger == "restart":
            return base
        if self.trigger == "terminated":  # as RestartEvidence.identity
            return f"{base}/terminated-{self.instance}"
        return f"{base}/{self.trigger}-{self.reason}"

    @property
    def key(self) -> str:
        """What `ReportedStore` counts per: a container's restarts, or a one-off trigger."""
        base = f"{self.pod_uid}/{self.container}"
        if self.trigger == "restart":
            return base
        if self.trigger == "terminated":
            return f"{base}#terminated-{self.instance}"
        return f"{base}#{self.trigger}-{self.reason}"

    @property
    def log_source(self) -> LogSource:
        """Which log holds what the ended instance wrote: the previous instance's after a
        restart, the current one when none followed (it is still there), none for a
        container that never started."""
        if self.trigger == "waiting":
            return "none"
        if self.trigger == "restart":
            return "previous" if self.restart_count > 0 else "none"
        return "current"


def container_kinds(pod: dict[str, Any]) -> dict[str, ContainerKind]:
    spec = pod.get("spec") or {}
    kinds: dict[str, ContainerKind] = {}
    for c in spec.get("initContainers") or []:
        kinds[c["name"]] = "sidecar" if c.get("restartPolicy") == "Always" else "init"
    for c in spec.get("containers") or []:
        kinds[c["name"]] = "app"
    return kinds


def detect_restarts(pod: dict[str, Any], reported: dict[str, int]) -> list[DetectedRestart]:
    """Restarts in `pod` newer than what `reported` (container key -> restartCount) holds.

    A restart needs a `lastState.terminated` (that is what the evidence is about); a jump of
    several counts is one restart to report, with the others counted as missed."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    kinds = container_kinds(pod)
    ident = (meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""))
    found = []
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses")
                                                              or [])
    for cs in statuses:
        count = int(cs.get("restartCount") or 0)
        kind = kinds.get(cs["name"], "app")
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason", "")
        if waiting in STUCK_WAITING:
            stuck = DetectedRestart(*ident, cs["name"], kind, count, 0, "waiting", waiting)
            if reported.get(stuck.key, 0) < 1:
                found.append(stuck)
        if count <= 0 or not (cs.get("lastState") or {}).get("terminated"):
            continue
        last = reported.get(f"{ident[2]}/{cs['name']}", 0)
        if count > last:
            found.append(DetectedRestart(*ident, cs["name"], kind, count,
                                         missed=max(0, count - last - 1)))
    failed = pod_failure_reason(pod)
    if not failed:
        for cs in statuses:
            ended = failed_termination(pod, cs, kinds.get(cs["name"], "app"))
            if ended:
                done = DetectedRestart(*ident, cs["name"], kinds.get(cs["name"], "app"),
                                       int(cs.get("restartCount") or 0), 0, "terminated",
                                       instance=ended)
                if reported.get(done.key, 0) < 1:
                    found.append(done)
    if failed and statuses:
        main = next((cs for cs in status.get("containerStatuses") or []), statuses[0])
        gone = DetectedRestart(*ident, main["name"], kinds.get(main["name"], "app"),
                               int(main.get("restartCount") or 0), 0, "pod-failed", failed)
        if reported.get(gone.key, 0) < 1:
            found.append(gone)
    return found


def will_not_restart(pod: dict[str, Any], kind: ContainerKind) -> bool:
    """Whether the kubelet will leave a terminated container as it is: the pod has ended,
    or its restartPolicy is Never (an init container of an OnFailure pod is restarted)."""
    if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        return True
    if kind == "sidecar":
        return False
    return ((pod.get("spec") or {}).get("restartPolicy") or "Always") == "Never"


def _killed_by_deletion(pod: dict[str, Any], finished_at: str) -> bool:
    """Whether the container ended after its pod was asked to go (a delete, a Job giving up,
    a scale-down): then the pod's deletion, not the container, is the story. Kubernetes sets
    `deletionTimestamp` to the request time plus the grace period."""
    meta = pod.get("metadata") or {}
    deleting = meta.get("deletionTimestamp")
    if not deleting:
        return False
    try:
        asked = parse_timestamp(deleting) - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds")
                                                         or 0))
        return not finished_at or parse_timestamp(finished_at) >= asked
    except ValueError:
        return True  # unreadable times: do not report a deletion as a failure


def failed_termination(pod: dict[str, Any], cs: dict[str, Any], kind: ContainerKind) -> str:
    """The instance tag (containerID, else finishedAt) of a container that failed and will
    not be restarted, or "" when there is none: it exited non-zero (or was OOMKilled...), the
    kubelet leaves it terminated, and its pod was not being deleted when it ended. Sidecars
    are stopped by the kubelet when their pod ends: not failures of their own."""
    term = (cs.get("state") or {}).get("terminated") or {}
    if not term or kind == "sidecar" or not will_not_restart(pod, kind):
        return ""
    if int(term.get("exitCode") or 0) == 0 and term.get("reason") in (None, "", "Completed"):
        return ""
    if _killed_by_deletion(pod, term.get("finishedAt") or ""):
        return ""
    container_id = str(term.get("containerID") or "")
    return container_id.rsplit("/", 1)[-1][:16] or str(term.get("finishedAt") or "unknown")


def pod_failure_reason(pod: dict[str, Any]) -> str:
    """Why a pod was taken away (evicted, preempted, node shutdown...), or "" if it was not.

    These end a pod rather than restart a container: the workload replaces the pod, and the
    cause is still a restart of the workload that a person wants explained."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed" and status.get("reason"):
        return str(status["reason"])
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "DisruptionTarget")
    return ""


class ReportedStore:
    """container key -> last reported restartCount, persisted atomically to a JSON file so a
    restarted watcher picks up where it left off (nothing lost, nothing twice)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self.loaded = False
        if path is not None and path.exists():
            self._counts = {k: int(v) for k, v in json.loads(path.read_text())["reported"].items()}
            self.loaded = True

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def get(self, key: str) -> int:
        with self._lock:
            return self._counts.get(key, 0)

    def mark_all(self, counts: dict[str, int]) -> None:
        """Record reported restarts (key -> restartCount) with one write of the file."""
        with self._lock:
            raised = {k: n for k, n in counts.items() if n > self._counts.get(k, 0)}
            if raised:
                self._counts.update(raised)
                self._save()

    def pod_uids(self) -> set[str]:
        with self._lock:
            return {key.split("/", 1)[0] for key in self._counts}

    def forget_pods(self, pod_uids: set[str]) -> None:
        """Drop what is kept for pods that are gone (the store stays as big as the cluster)."""
        if not pod_uids:
            return
        with self._lock:
            gone = [k for k in self._counts if k.split("/", 1)[0] in pod_uids]
            for key in gone:
                del self._counts[key]
            if gone:
                self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".reported-")
        with os.fdopen(fd, "w") as f:
            json.dump({"reported": self._counts}, f)
        os.replace(tmp, self.path)
