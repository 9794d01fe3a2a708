"""What a runbook run would have to undo, kept on the Prefect server while it runs.

Why on the server: compensation that lives in the run's memory is lost with its process. So
before a step with an `undo:` runs, the undo call (rendered as far as it can be: an undo
that reads the step's own output is rendered once the step has its output) is written to a
Prefect Variable named after the flow run; when the run ends, whatever its outcome, the
variable goes. A variable left behind is a run that died mid-way: `gpuops runbook recover
RUN` runs its undos, last first. Each undo is a desired state (uncordoned, untainted), so
running one whose step never happened, or running it twice, changes nothing.

The undos about a node are also written on the node (node_record.py), and read from the
nodes when the variable is gone.
"""

from __future__ import annotations

import asyncio
from typing import Any

from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound
from prefect.variables import Variable

from gpuops.runbooks.node_record import forget_on_nodes, read_from_nodes, record_on_nodes
from gpuops.tasks.clients.kube import Kube

PREFIX = "gpuops-runbook-undo-"


def journal_name(run_id: str) -> str:
    return PREFIX + run_id.lower()


class Journal:
    """One run's undo entries, written through to its Variable (no-op without a run id)."""

    def __init__(self, run_id: str, runbook: str, kube: Kube | None = None) -> None:
        self.run_id = run_id
        self.kube = kube  # given: undos about a node are recorded on the node too
        self.body: dict[str, Any] = {"runbook": runbook, "flow_run": run_id, "undo": []}
        self.saved = False

    async def _save(self) -> None:
        if self.run_id:
            self.saved = True
            await Variable.aset(journal_name(self.run_id), self.body, overwrite=True,
                                tags=["gpuops", "runbook-undo"])
            if self.kube is not None:
                await asyncio.to_thread(record_on_nodes, self.kube, self.run_id, self.body)

    async def will_run(self, step: str, action: str, args: dict[str, Any] | None) -> None:
        """Before the step: its undo (`args` None when it needs the step's output)."""
        self.body["undo"].append({"step": step, "action": action, "args": args,
                                  "state": "pending"})
        await self._save()

    async def ran(self, step: str, args: dict[str, Any]) -> None:
        """After the step: its undo rendered with the step's output."""
        for entry in self.body["undo"]:
            if entry["step"] == step:
                entry.update(args=args, state="done")
        await self._save()

    async def close(self) -> None:
        if self.saved:
            await forget_journal(self.run_id, self.kube)


async def read_journal(run_id: str, kube: Kube | None = None) -> dict[str, Any] | None:
    """The run's journal; without its variable, what the cluster's nodes recorded of it
    (`kube` given)."""
    getter: Any = Variable.aget  # typed as returning None by its dispatch decorator
    value = await getter(journal_name(run_id), default=None)
    if isinstance(value, dict):
        return value
    return await asyncio.to_thread(read_from_nodes, kube, run_id) if kube else None


async def forget_journal(run_id: str, kube: Kube | None = None) -> None:
    async with get_client() as client:
        try:
            await client.delete_variable_by_name(journal_name(run_id))
        except ObjectNotFound:
            pass  # already gone: nothing to undo
    if kube is not None:
        await asyncio.to_thread(forget_on_nodes, kube, run_id)
