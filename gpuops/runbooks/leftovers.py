"""What earlier runs of a runbook left to undo, found when a new run of it starts.

Why: a run whose process died (killed, its machine gone) leaves its journal (journal.py) and
its node records (node_record.py); `gpuops runbook recover RUN` undoes them when a person
asks, and the next run of the same runbook does it unasked, before it reads the cluster. A
run whose flow run is still Running, Paused or Suspended is left alone: it may be alive,
waiting for an approval. Prefect marks a run whose process died Crashed (`gpuops up` does so
for the runs a stop left, served_runs.py); until then it stays Running and is left alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prefect.client.orchestration import get_client

from gpuops.runbooks.journal import PREFIX
from gpuops.runbooks.node_record import UNDO_PREFIX
from gpuops.tasks.clients.kube import Kube

ENDED = frozenset({"CRASHED", "FAILED", "CANCELLED"})  # no process runs it any more


@dataclass(frozen=True)
class Decision:
    compensate: bool
    why: str


def decide(state: str | None) -> Decision:
    """A leftover journal's fate from its flow run's state type (None: the run is gone)."""
    if state is None:
        return Decision(True, "its flow run is gone")
    if state.upper() in ENDED:
        return Decision(True, f"its flow run is {state.lower()}")
    if state.upper() == "COMPLETED":  # its steps stand; only its close was lost
        return Decision(False, "its flow run completed")
    return Decision(False, f"its flow run is {state.lower()}: it may still be alive")


def runs_of(runbook: str, bodies: Mapping[str, Mapping[str, Any]], own: str) -> list[str]:
    """The run ids among `bodies` (run id -> journal body) of `runbook`, not `own` (pure)."""
    return sorted(run for run, body in bodies.items()
                  if body.get("runbook") == runbook and run != own.lower())


def _from_nodes(kube: Kube) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for node in kube.list_nodes():
        for key, text in ((node.get("metadata") or {}).get("annotations") or {}).items():
            if key.startswith(UNDO_PREFIX):
                try:
                    found.setdefault(key[len(UNDO_PREFIX):], json.loads(text))
                except ValueError:
                    continue  # edited by hand: left for a person
    return found


async def leftover_journals(kube: Kube) -> dict[str, dict[str, Any]]:
    """Every run id with a journal on the Prefect server or a record on a node -> its body."""
    found = await asyncio.to_thread(_from_nodes, kube)
    async with get_client() as client:
        for variable in await client.read_variables():
            if variable.name.startswith(PREFIX) and isinstance(variable.value, dict):
                found[variable.name[len(PREFIX):]] = variable.value
    return found
