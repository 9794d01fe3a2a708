"""Steps that are whole gpuops jobs: a rebalance, a serving rollback. Each runs the
deployment `gpuops up` serves (by name: runbooks sit below flows and deployments and import
neither) and waits for its run; that run asks its own approvals and leaves its own
artifacts. The names are checked against what `serve_all` serves by a test."""

from __future__ import annotations

from typing import Any

from prefect.deployments import arun_deployment

from gpuops.common.errors import PermanentError
from gpuops.runbooks.bindings import Prediction, predicts, runs
from gpuops.runbooks.catalog import FlowRunOutput, RebalanceArgs, RollbackArgs
from gpuops.runbooks.context import StepContext

REBALANCE = "gpu-rebalance/on-stranded"
ROLLBACK = "serving-rollout-abort/on-demand"
DRY_RUN_STATE = "DryRun"
ROLLED_BACK = ("Aborted", "NothingToAbort")  # the abort flow's Completed states


async def _run(name: str, parameters: dict[str, Any]) -> FlowRunOutput:
    run = await arun_deployment(name, parameters=parameters, as_subflow=True)
    state = run.state
    return FlowRunOutput(flow_run=str(run.id), state=state.name if state else "Unknown",
                         message=(state.message or "") if state else "")


def _rebalance_parameters(ctx: StepContext, args: RebalanceArgs) -> dict[str, Any]:
    parameters: dict[str, Any] = {"dry_run": args.dry_run or ctx.dry_run,
                                  **ctx.deployment_parameters}
    if args.max_moves is not None:
        parameters["max_moves"] = args.max_moves
    return parameters


@runs("rebalance")
async def rebalance(ctx: StepContext, args: RebalanceArgs) -> FlowRunOutput:
    return await _run(REBALANCE, _rebalance_parameters(ctx, args))


@predicts("rebalance")
async def predict_rebalance(ctx: StepContext, args: RebalanceArgs) -> Prediction:
    mode = "plan only" if args.dry_run else "plan, ask, and repack"
    return Prediction(FlowRunOutput(flow_run="", state=DRY_RUN_STATE),
                      (f"run {REBALANCE} ({mode})",))


@runs("rollback-serving")
async def rollback(ctx: StepContext, args: RollbackArgs) -> FlowRunOutput:
    cluster = {k: v for k, v in ctx.deployment_parameters.items() if k == "cluster_block"}
    out = await _run(ROLLBACK, {"pool": args.pool, "reason": args.reason or
                                f"runbook {ctx.runbook}", "requested_by": "gpuops runbook",
                                **cluster})
    if out.state not in ROLLED_BACK:  # a rollout that would not stop fails the step
        raise PermanentError(f"{ROLLBACK} run {out.flow_run} ended {out.state}: {out.message}")
    return out


@predicts("rollback-serving")
async def predict_rollback(ctx: StepContext, args: RollbackArgs) -> Prediction:
    return Prediction(FlowRunOutput(flow_run="", state=DRY_RUN_STATE),
                      (f"roll back the serving rollout of {args.pool} ({ROLLBACK})",))
