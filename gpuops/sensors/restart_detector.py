"""Which container restarts a pod update reveals (pure), and what was already reported.

A restart's identity is (pod uid, container, restartCount). Init, sidecar (init containers
with `restartPolicy: Always`) and app containers all count, each under its own name.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ContainerKind = Literal["init", "sidecar", "app"]


@dataclass(frozen=True)
class DetectedRestart:
    namespace: str
    pod: str
    pod_uid: str
    container: str
    kind: ContainerKind
    restart_count: int
    missed: int  # earlier restarts not seen (no evidence left for them)

    @property
    def identity(self) -> str:
        return f"{self.pod_uid}/{self.container}/{self.restart_count}"

    @property
    def key(self) -> str:
        return f"{self.pod_uid}/{self.container}"


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
    found = []
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        count = int(cs.get("restartCount") or 0)
        if count <= 0 or not (cs.get("lastState") or {}).get("terminated"):
            continue
        key = f"{meta.get('uid')}/{cs['name']}"
        last = reported.get(key, 0)
        if count > last:
            found.append(DetectedRestart(meta.get("namespace", ""), meta.get("name", ""),
                                         meta.get("uid", ""), cs["name"],
                                         kinds.get(cs["name"], "app"), count,
                                         missed=max(0, count - last - 1)))
    return found


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

    def mark(self, key: str, count: int) -> None:
        with self._lock:
            if count > self._counts.get(key, 0):
                self._counts[key] = count
                self._save()

    def forget_pod(self, pod_uid: str) -> None:
        with self._lock:
            for key in [k for k in self._counts if k.startswith(pod_uid + "/")]:
                del self._counts[key]
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".reported-")
        with os.fdopen(fd, "w") as f:
            json.dump({"reported": self._counts}, f)
        os.replace(tmp, self.path)
