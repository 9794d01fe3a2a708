"""Capacity pre-warm: forecast demand, plan nodes per pool per hour, hold this hour's targets.

Runs hourly (and on demand: `gpuops plan capacity`). Each run reads the demand history per
model from Prometheus, forecasts the next `horizon_hours`, solves the capacity plan from the
pools' current sizes, and derives what each pool must hold now so that capacity needed
`lead_time_hours` ahead is requested in time (`tasks/capacity/prewarm.py`). If that adds more than
`approval_cost_per_hour` $/h it waits for approval (Slack or the UI; no answer is a no);
then it applies through the safe-action layer (EKS minSize, ASG desired capacity, or
placeholder pods). `mode` says which: "dry-run" (the default, also of the hourly deployment
of a new install) computes and reports everything and changes nothing; "apply" changes pools.
The mode is logged first and named in the summary artifact and the final state message.
Artifacts: summary, plan (pool x hour), targets, costs, forecast-vs-actual chart, actions.
"""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any, Literal

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    acreate_image_artifact,
    acreate_markdown_artifact,
    acreate_table_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import (
    AwsConnection,
    KubernetesCluster,
    SlackConnection,
)
from gpuops.blocks.loading import load_block
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import TemporaryError
from gpuops.common.png import png_data_uri
from gpuops.common.settings import PrometheusSettings, get_settings
from gpuops.tasks.actions.perform import SafeAction, hold_targets, perform, recording_actions
from gpuops.tasks.actions.scale_in import ScaleInPool
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import not_approved_message, request_approval
from gpuops.tasks.capacity import report
from gpuops.tasks.capacity.demand import DemandHistory, read_demand
from gpuops.tasks.capacity.forecast import (
    Forecast,
    InvalidDemandSeries,
    forecast_demand,
    hourly_history,
)
from gpuops.tasks.capacity.plan import CapacityPlan, plan_capacity
from gpuops.tasks.capacity.pool_actions import prewarm_actions
from gpuops.tasks.capacity.pool_state import read_pool_states
from gpuops.tasks.capacity.prewarm import cost_summary, derive_targets
from gpuops.tasks.clients.aws import Aws
from gpuops.tasks.clients.prometheus import Prometheus

VERIFY_TIMEOUT_S = 300.0


def _temporary_only(task: Any, run: Any, state: Any) -> bool:
    """Retry what may pass later (unreachable, throttled), never a bad query or config."""
    return isinstance(state.result(raise_on_failure=False), TemporaryError)


_io: dict[str, Any] = {"retries": 2, "retry_delay_seconds": [2, 10], "retry_condition_fn": _temporary_only,
       "cache_policy": NO_CACHE}
read_demand_task = task(name="read-demand", task_run_name="read-demand-{model.name}",
                        **_io)(read_demand)
read_pool_states_task = task(name="read-pool-states", **_io)(read_pool_states)


@task(name="forecast-demand", task_run_name="forecast-{history.model}", cache_policy=NO_CACHE)
def forecast_model(history: DemandHistory, config: CapacityConfig, now: datetime
                   ) -> tuple[Forecast, report.ForecastRecord]:
    """The forecast to plan with, and the chart record (the forecast made `chart_days` ago
    against what happened since)."""
    future = forecast_demand(history.model, history.demand, now=now,
                             horizon_hours=config.horizon_hours, quantile=config.quantile,
                             per_minute=history.per_minute if config.headroom else None)
    hours = config.chart_days * 24
    actual = hourly_history(history.demand, now=now)[0].iloc[-hours:]
    try:
        past = forecast_demand(history.model, history.demand, now=actual.index[0].to_pydatetime(),
                               horizon_hours=len(actual), quantile=config.quantile)
    except InvalidDemandSeries:
        past = None  # not enough history before the chart's start
    return future, report.ForecastRecord(history.model, actual, past, future)


@task(name="plan-capacity", cache_policy=NO_CACHE)
def solve_plan(config: CapacityConfig, current: dict[str, int],
               forecasts: dict[str, Forecast]) -> CapacityPlan:
    return plan_capacity(config.node_pool_specs(current), config.model_profiles(),
                         {name: f.plan_demand() for name, f in forecasts.items()},
                         config.gpu_quotas(), config.plan_options())


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)


async def _publish_report(plan: CapacityPlan, config: CapacityConfig, targets: list, costs: Any,
                          forecasts: dict[str, Forecast], records: list, now: datetime,
                          dry_run: bool) -> None:
    import pandas as pd

    start = pd.Timestamp(now).floor("h")
    await acreate_markdown_artifact(
        markdown=report.summary_markdown(plan, targets, costs, forecasts, dry_run=dry_run),
        key="capacity-prewarm-summary",
        description=f"Capacity pre-warm ({_mode_title(dry_run)}): what and why")
    await acreate_table_artifact(table=report.plan_rows(plan, targets, start),
                                 key="capacity-plan", description="Nodes per pool per hour "
                                 f"(UTC, from {start:%Y-%m-%d %H:00}); `hold`: this run's target")
    await acreate_table_artifact(table=report.target_rows(targets), key="capacity-targets",
                                 description="Per-pool targets for this run's window")
    await acreate_table_artifact(table=costs.rows(), key="capacity-plan-cost",
                                 description=f"Cost over the next {plan.hours} h")
    png = await asyncio.to_thread(report.forecast_chart_png, records)
    await acreate_image_artifact(image_url=png_data_uri(png), key="capacity-forecast",
                                 description=f"Forecast vs actual demand, last "
                                 f"{config.chart_days} days, and the next {plan.hours} h")


CapacityMode = Literal["dry-run", "apply"]


def _mode_title(dry_run: bool) -> str:
    return "dry run" if dry_run else "apply"


@flow(name="capacity-prewarm", log_prints=True)
async def capacity_prewarm(mode: CapacityMode = "dry-run", config_block: str = "",
                           aws_block: str = "", cluster_block: str = "", slack_block: str = "",
                           policy_block: str = "", now: datetime | None = None):
    """Forecast, plan and pre-warm node pools.

    Args:
        mode: "dry-run" plans and reports and changes nothing; "apply" changes node pools
            (asking for approval above the config's approval_cost_per_hour).
    """
    dry_run = mode == "dry-run"
    get_run_logger().info("mode: %s (%s)", mode, "plans and reports, changes nothing"
                          if dry_run else "changes node pools")
    config: CapacityConfig = await load_block(CapacityConfig, config_block)
    cluster = await load_block(KubernetesCluster, cluster_block)
    now = _utc(now)
    kube = cluster.kube()
    aws = None
    if any(p.backing != "placeholder" for p in config.pools):
        aws = Aws.from_connection(await load_block(AwsConnection, aws_block))
    eks_cluster = config.eks_cluster_name or cluster.cluster_name
    prom = Prometheus(config.prometheus_url or get_settings(PrometheusSettings).url)

    histories = [read_demand_task(prom, m, now=now, history_days=config.history_days,
                                  scale=config.demand_scale,
                                  headroom_days=config.headroom_days if config.headroom else None)
                 for m in config.models]
    results = [forecast_model(h, config, now) for h in histories]
    forecasts = {f.model_name: f for f, _ in results}
    states = read_pool_states_task(config.pools, aws=aws, kube=kube, eks_cluster=eks_cluster)
    current = {name: s.current_size for name, s in states.items()}
    plan = solve_plan(config, current, forecasts)
    specs = config.node_pool_specs(current)
    targets = derive_targets(plan, specs, states, config.gpu_quotas())
    costs = cost_summary(plan, specs, targets)
    await _publish_report(plan, config, targets, costs, forecasts, [r for _, r in results], now,
                          dry_run)

    async with recording_actions():
        candidates = prewarm_actions(config, plan, targets, states, aws=aws, kube=kube,
                                     eks_cluster=eks_cluster)
        needed = [a for a in candidates if not await asyncio.to_thread(a.holds)]
        summary = {"mode": mode, "targets": {t.pool: t.target for t in targets},
                   "cost_change_per_hour": round(costs.change_per_hour, 2),
                   "changes": [a.describe() for a in needed], "plan_status": plan.status}
        if not needed:
            return Completed(message=f"{_mode_title(dry_run)}: no change, every pool holds its "
                             "target", data=summary)
        if not dry_run and costs.change_per_hour > config.approval_cost_per_hour:
            approval = await request_approval(ApprovalRequest(
                title=f"Capacity pre-warm: {costs.change_per_hour:+,.2f} $/h",
                summary="\n".join(f"• {a.describe()}" for a in needed),
                reason=f"Forecast demand for the next {plan.hours} h needs it (plan "
                       f"${costs.plan:,.2f} vs static peak ${costs.static_peak:,.2f}).",
                plan="\n".join(f"{t.pool}: {t.current} -> {t.target} (peak {t.planned} in the "
                               f"next {t.window_hours} h)" for t in targets),
                cost_impact=f"{costs.change_per_hour:+,.2f} $/h",
                targets=tuple(sorted({a.target for a in needed}))),
                policy=await load_block(ApprovalPolicy, policy_block),
                slack_conn=await load_block(SlackConnection, slack_block))
            if not approval.approved:
                return Completed(name="NotApproved", data={**summary, "applied": False},
                                 message=not_approved_message(approval))
        scale_in = await _apply(needed, dry_run)
        verb = "dry run: would change" if dry_run else "changed"
        return Completed(message=f"{verb} {len(needed)} pool setting(s): "
                         + "; ".join(a.describe() for a in needed)
                         + "".join(f"; {line}" for line in scale_in),
                         data={**summary, "applied": not dry_run, "scale_in": scale_in})


async def _apply(actions: list[SafeAction], dry_run: bool) -> list[str]:
    """Hold every pool's slot for the whole sequence; EKS applies scaling updates
    asynchronously, so the postcondition gets minutes, not seconds. A scale-in removes
    chosen nodes step by step (`ScaleInPool.run`); returns what each removal came to."""
    lines: list[str] = []
    async with hold_targets(sorted({a.target for a in actions})) if not dry_run \
            else nullcontext():
        for action in actions:
            if isinstance(action, ScaleInPool):
                lines += await action.run(dry_run=dry_run)
            else:
                await perform(action, dry_run=dry_run, verify_timeout_s=VERIFY_TIMEOUT_S)
    return lines

