"""What earlier rebalance runs left on the cluster, read from the objects themselves (pure).

A run records every temporary change on the object it changes (`common/annotations.py`:
the taint's value and `gpuops.io/rebalance-run` are the run's id, `gpuops.io/rebalance-
expires` when the change may be presumed abandoned, `gpuops.io/rebalance-nominated` the node
a pod was nominated to). A run that crashed (killed, its machine lost) cannot undo them;
the next run reads them here, grouped by run, and removes those of every run that is no
longer running — or whose expiry has passed, in case the crashed run still looks alive on
the Prefect server (a killed process never reports its end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuops.common.annotations import (
    REBALANCE_EXPIRES,
    REBALANCE_NOMINATED,
    REBALANCE_RUN,
    REBALANCE_TAINT,
)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class LeftPod:
    key: str
    uid: str
    nominated_to: str  # the node the run nominated it to ("" if none recorded)


@dataclass
class RunLeftovers:
    """One run's temporary changes still on the cluster."""

    run_id: str
    nodes: list[str] = field(default_factory=list)  # tainted (or still annotated) nodes
    pods: list[LeftPod] = field(default_factory=list)
    expires: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and now >= self.expires

    def describe(self) -> str:
        parts = []
        if self.nodes:
            parts.append(f"taint on {', '.join(self.nodes)}")
        if self.pods:
            parts.append(f"nomination/record on {', '.join(p.key for p in self.pods)}")
        return "; ".join(parts) or "nothing"


def find_leftovers(nodes: Iterable[Obj], pods: Iterable[Obj]) -> dict[str, RunLeftovers]:
    """Per run id, the nodes and pods that still carry its temporary changes."""
    runs: dict[str, RunLeftovers] = {}

    def run(run_id: str) -> RunLeftovers:
        return runs.setdefault(run_id, RunLeftovers(run_id))

    for node in nodes:
        meta = node["metadata"]
        annotations = meta.get("annotations") or {}
        ids = {t.get("value") or "" for t in (node.get("spec") or {}).get("taints") or []
               if t.get("key") == REBALANCE_TAINT}
        if annotations.get(REBALANCE_RUN):
            ids.add(annotations[REBALANCE_RUN])
        for run_id in sorted(ids):
            entry = run(run_id)
            entry.nodes.append(meta["name"])
            _note_expiry(entry, annotations.get(REBALANCE_EXPIRES)
                         if annotations.get(REBALANCE_RUN) == run_id else None)
    for pod in pods:
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        run_id = annotations.get(REBALANCE_RUN)
        if not run_id:
            continue
        entry = run(run_id)
        entry.pods.append(LeftPod(f"{meta.get('namespace') or 'default'}/{meta['name']}",
                                  meta.get("uid", ""), annotations.get(REBALANCE_NOMINATED, "")))
        _note_expiry(entry, annotations.get(REBALANCE_EXPIRES))
    return runs


def _note_expiry(entry: RunLeftovers, raw: str | None) -> None:
    if not raw:
        return
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        return  # unreadable: the run's state alone decides
    if entry.expires is None or at > entry.expires:
        entry.expires = at
