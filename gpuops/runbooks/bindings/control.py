"""Control: wait until a check holds (or fail at the timeout), run another runbook."""

from __future__ import annotations

import asyncio
import time

from gpuops.common.errors import PermanentError
from gpuops.runbooks.bindings import BINDINGS, Prediction, predicts, runs
from gpuops.runbooks.catalog import (
    CATALOG,
    CheckResult,
    RunbookOutput,
    RunRunbookArgs,
    WaitArgs,
    WaitOutput,
)
from gpuops.runbooks.context import StepContext


class WaitTimedOut(PermanentError):
    """`wait-until`'s check did not hold within its timeout."""


async def _check_once(ctx: StepContext, args: WaitArgs) -> CheckResult:
    spec, binding = CATALOG.get(args.check), BINDINGS.get(args.check)
    if spec is None or binding is None or not spec.check:
        raise PermanentError(f"{args.check!r} is not a check this gpuops has")
    result = await binding.run(ctx, spec.args.model_validate(args.args))
    assert isinstance(result, CheckResult)
    return result


@runs("wait-until")
async def wait_until(ctx: StepContext, args: WaitArgs) -> WaitOutput:
    start = time.monotonic()
    while True:
        result = await _check_once(ctx, args)
        waited = time.monotonic() - start
        if result.ok:
            return WaitOutput(ok=True, waited_s=round(waited, 1), detail=result.detail)
        if waited >= args.timeout:
            raise WaitTimedOut(f"{args.check} did not hold within {args.timeout} s: "
                               f"{result.detail}")
        await asyncio.sleep(min(args.interval, max(0.0, args.timeout - waited)))


@predicts("wait-until")
async def predict_wait(ctx: StepContext, args: WaitArgs) -> Prediction:
    result = await _check_once(ctx, args)
    if result.ok:
        return Prediction(WaitOutput(ok=True, waited_s=0, detail=result.detail))
    warning = f"would wait up to {args.timeout} s for {args.check}: {result.detail} now"
    return Prediction(WaitOutput(ok=True, waited_s=args.timeout, detail=result.detail),
                      warnings=(warning,))


async def _run_inner(ctx: StepContext, args: RunRunbookArgs, dry_run: bool) -> RunbookOutput:
    if ctx.run_runbook is None:
        raise RuntimeError("run-runbook needs the engine's runner and the run has none")
    outcome = await ctx.run_runbook(args.runbook, args.params, dry_run)
    return RunbookOutput.model_validate(outcome)


@runs("run-runbook")
async def run_runbook(ctx: StepContext, args: RunRunbookArgs) -> RunbookOutput:
    return await _run_inner(ctx, args, False)


@predicts("run-runbook")
async def predict_run_runbook(ctx: StepContext, args: RunRunbookArgs) -> Prediction:
    output = await _run_inner(ctx, args, True)
    return Prediction(output, (f"run runbook {args.runbook}",))
