"""The restart trigger rests while a restart-diagnostics run is up.

A run that is up follows restart events live (events.py). A trigger that kept firing
meanwhile (once per window, all through a storm) would only create runs that queue behind
it for its deployment's one slot and are then taken over: a run list full of runs that
never ran (30 of 36 on the dashboard). So the run that is up pauses its deployment's
restart trigger (the Prefect automation the deployment's `DeploymentEventTrigger` became)
and resumes it when it leaves:

- in its own `finally`, before its last read of the events, so that what comes after that
  read starts a new run;
- when its process is cancelled or crashes, in the flow's `on_cancellation` / `on_crashed`
  hooks, which Prefect's runner runs after stopping the process;
- `serve` (and so `gpuops up`) re-creates a deployment's triggers, enabled, every time it
  starts: a trigger paused by a run that vanished with its machine comes back with the stack.

Pausing loses nothing: what arrives while no run reads is read back from the stored events
by the next run (its cursor). Runs started by the schedule come as before.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.events.schemas.automations import EventTrigger

from gpuops.tasks.restarts.events import RESTARTED

log = logging.getLogger("gpuops.restart_trigger")


def _is_restart_trigger(automation: Any) -> bool:
    trigger = automation.trigger
    return isinstance(trigger, EventTrigger) and RESTARTED in (trigger.expect or set())


async def restart_triggers(deployment_id: UUID) -> list[Any]:
    """The deployment's automations that start it on `gpuops.pod.restarted`."""
    async with get_client() as client:
        found = await client.read_resource_related_automations(
            f"prefect.deployment.{deployment_id}")
    return [a for a in found if _is_restart_trigger(a)]


async def set_restart_trigger(deployment_id: UUID | None, *, enabled: bool) -> int:
    """Pause (`enabled=False`) or resume the deployment's restart trigger; how many
    automations changed. Nothing to do for a run without a deployment."""
    if deployment_id is None:
        return 0
    changed = 0
    async with get_client() as client:
        for automation in await restart_triggers(deployment_id):
            if automation.enabled == enabled:
                continue
            if enabled:
                await client.resume_automation(automation.id)
            else:
                await client.pause_automation(automation.id)
            changed += 1
    return changed


async def wake_restart_trigger_hook(flow: Any, flow_run: Any, state: Any) -> None:
    """`on_cancellation` / `on_crashed`: a run that is gone no longer reads the events."""
    try:
        await set_restart_trigger(getattr(flow_run, "deployment_id", None), enabled=True)
    except Exception as e:  # noqa: BLE001 - a hook must not fail the runner; serve re-creates it
        log.warning("the restart trigger of flow run %s was not resumed: %s", flow_run.id, e)
