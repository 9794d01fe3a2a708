"""The deployments `gpuops up` serves: each flow with its schedule or event trigger."""

from __future__ import annotations

from prefect import serve
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.events import DeploymentEventTrigger

from gpuops.flows.capacity_prewarm import capacity_prewarm
from gpuops.flows.drain_node import drain_node
from gpuops.flows.restart_diagnostics import restart_diagnostics


def deployments() -> list:
    return [
        # One run at a time; triggered runs arriving while one is active are cancelled,
        # because the active run drains every restart event (see the flow's docstring).
        # The interval run posts "recovered" replies and picks up any straggler.
        restart_diagnostics.to_deployment(
            name="on-restart",
            triggers=[DeploymentEventTrigger(
                name="a pod restarted", expect={"gpuops.pod.restarted"},
                match={"prefect.resource.id": "k8s.*"},
                parameters={"event_id": "{{ event.id | string }}"})],
            interval=300,
            concurrency_limit=ConcurrencyLimitConfig(
                limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            tags=["gpuops", "restarts"],
            description="Classify restarts and keep one Slack thread per workload and cause."),
        drain_node.to_deployment(
            name="on-demand", tags=["gpuops", "maintenance"],
            description="Cordon and drain a node, with approval."),
        # Hourly, at the top of the hour: each run requests what is needed lead-time ahead.
        capacity_prewarm.to_deployment(
            name="hourly", cron="0 * * * *", tags=["gpuops", "capacity"],
            concurrency_limit=ConcurrencyLimitConfig(
                limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            description="Forecast demand, plan node pools, pre-warm them ahead of demand."),
    ]


def serve_all() -> None:
    serve(*deployments(), print_starting_message=True)
