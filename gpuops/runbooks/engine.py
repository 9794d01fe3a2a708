"""Running a runbook: preconditions, the plan from live state, then the steps, compensating
what was done when a step fails or an approval says no.

Order of a run:
1. parameters are checked (arguments.py) and the preconditions read the cluster; one that
   does not hold stops the run before anything changes;
2. the plan: every step's `when:` and arguments rendered, and its binding's prediction of
   what it would change and return (a later step reads the predicted output). A dry run
   stops here, with the plan as its artifact;
3. each step runs as a task run named after the step (retried as its `retry:` says). An
   approval step runs in the flow itself (Prefect pauses flows, not tasks) and shows the
   plan of the steps after it, made when it asks (so it includes what the steps before it
   did); after a "yes" those steps are planned again, and if what they would change is not
   what was shown the run stops ("plan-changed"). A run an approval suspended runs again
   from the top when answered: the steps done before it reuse their results (step_cache.py);
4. a failing step runs its `on_failure:` steps, then every `undo:` of the steps done so
   far, last first; so does a "no" (nothing after it runs);
5. each undo is written to the run's journal on the Prefect server before its step runs
   (journal.py), and the journal goes when the run ends: a run whose process died leaves
   it, and `recover` undoes what it did.

So before its preconditions a run undoes, with `recover`, what earlier runs of the same
runbook that have ended (Crashed, Failed, Cancelled, gone) left (leftovers.py), and says so
in its artifact; a dry run only says what it would undo.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact
from prefect.exceptions import MissingContextError
from prefect.logging import get_logger
from pydantic import BaseModel, ValidationError

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.errors import ConfigError, GpuopsError, PermanentError
from gpuops.common.flow_runs import flow_run_state
from gpuops.runbooks.arguments import bind_values
from gpuops.runbooks.bindings import Binding, load_bindings
from gpuops.runbooks.catalog import CATALOG, ApprovalOutput, CheckResult
from gpuops.runbooks.context import StepContext
from gpuops.runbooks.journal import Journal, forget_journal, read_journal
from gpuops.runbooks.leftovers import decide, leftover_journals, runs_of
from gpuops.runbooks.loader import LoadedRunbook
from gpuops.runbooks.located import dotted
from gpuops.runbooks.plan import Plan, PlannedStep, RunRecord, StepRecord, run_markdown
from gpuops.runbooks.registry import Registry
from gpuops.runbooks.schema import Call, Runbook, Step
from gpuops.runbooks.step_cache import key_parameter, step_key
from gpuops.runbooks.templates import evaluate, render_value
from gpuops.tasks.actions.perform import recording_actions
from gpuops.tasks.clients.aws import Aws
from gpuops.tasks.clients.kube import Kube

APPROVAL = "request-approval"


class StepError(PermanentError):
    """A step's arguments could not be rendered or do not fit its action once rendered."""


@dataclass
class Services:
    """What runs use: the cluster, Slack and the approval policy (None when the runbook
    needs neither), the runbooks a `run-runbook` may name, the deployments' Block names."""

    kube: Kube
    slack: SlackConnection | None = None
    policy: ApprovalPolicy | None = None
    runbooks: Registry[LoadedRunbook] | None = None
    run_id: str = ""
    deployment_parameters: Mapping[str, Any] = field(default_factory=dict)
    depth: int = 0
    capacity: CapacityConfig | None = None
    aws: Aws | None = None
    started_by: str = ""  # who started the run (declared: Prefect has no user identity)
    separate_approver: bool = False  # a runbook running this one requires it
    path: tuple[str, ...] = ()  # the run-runbook steps this run is nested in (cache keys)


def context_for(runbook: Runbook, values: Mapping[str, Any], outputs: Mapping[str, Any],
                dry_run: bool, **extra: Any) -> dict[str, Any]:
    """What templates read: the parameters, `steps.<name>`, `dry_run`, `runbook`."""
    return {**values, "steps": dict(outputs), "dry_run": dry_run, "runbook": runbook.name,
            **extra}


def _binding(action: str) -> Binding:
    binding = load_bindings().get(action)
    if binding is None:
        raise PermanentError(f"action {action!r} is declared but this gpuops cannot run it "
                             "yet (no binding)")
    return binding


def _args(call: Call, where: str, context: Mapping[str, Any]) -> BaseModel:
    spec = CATALOG.get(call.action)
    assert spec is not None  # the loader checked it
    try:
        rendered = render_value(dict(call.args), context)
        return spec.args.model_validate(rendered)
    except ValidationError as e:
        first = e.errors()[0]
        raise StepError(f"{where}.args.{dotted(first['loc'])}: {first['msg']} (once "
                        "rendered)") from None
    except GpuopsError:
        raise
    except Exception as e:  # noqa: BLE001 - a template's own error (undefined, sandbox, 1/0)
        raise StepError(f"{where}.args: {type(e).__name__}: {e}") from None


def _when(step: Step, where: str, context: Mapping[str, Any]) -> bool:
    if step.when is None:
        return True
    try:
        return evaluate(step.when, context)
    except Exception as e:  # noqa: BLE001 - as for arguments
        raise StepError(f"{where}.when: {type(e).__name__}: {e}") from None


def _step_context(runbook: Runbook, services: Services, dry_run: bool, step: str,
                  plan: Plan | None = None) -> StepContext:
    return StepContext(kube=services.kube, dry_run=dry_run, runbook=runbook.name, step=step,
                       run_id=services.run_id, plan=plan.text() if plan else "",
                       targets=plan.targets() if plan else (), slack=services.slack,
                       policy=services.policy,
                       run_runbook=_inner_runner(services, _separate(runbook, services),
                                                 f"{runbook.name}.{step}"),
                       deployment_parameters=services.deployment_parameters,
                       capacity=services.capacity, aws=services.aws,
                       started_by=services.started_by,
                       separate_approver=_separate(runbook, services))


def _separate(runbook: Runbook, services: Services) -> bool:
    return services.separate_approver or runbook.approval.separate_approver


async def check_preconditions(runbook: Runbook, values: Mapping[str, Any],
                              services: Services) -> tuple[tuple[str, bool, str], ...]:
    context = context_for(runbook, values, {}, True)
    results = []
    for i, pre in enumerate(runbook.preconditions):
        args = _args(Call(action=pre.check, args=pre.args), f"preconditions[{i}]", context)
        result = await _binding(pre.check).run(
            _step_context(runbook, services, True, f"precondition-{i}"), args)
        assert isinstance(result, CheckResult)
        results.append((pre.check, result.ok, result.detail))
    return tuple(results)


async def plan_steps(runbook: Runbook, values: Mapping[str, Any], services: Services, *,
                     start: int = 0, outputs: Mapping[str, Any] | None = None
                     ) -> tuple[PlannedStep, ...]:
    """Each step from `start` on as it would go now, later steps reading earlier ones'
    predicted outputs (`outputs`: the real ones of the steps already done)."""
    known = dict(outputs or {})
    planned = []
    for i, step in enumerate(runbook.steps[start:], start):
        where = f"steps[{i}]"
        context = context_for(runbook, values, known, True)
        if not _when(step, where, context):
            planned.append(PlannedStep(step.name, step.action, {}, skipped=f"when: {step.when}"))
            continue
        args = _args(step, where, context)
        prediction = await _binding(step.action).predict(
            _step_context(runbook, services, True, step.name), args)
        known[step.name] = prediction.output.model_dump()
        planned.append(PlannedStep(step.name, step.action, args.model_dump(),
                                   changes=prediction.changes, warnings=prediction.warnings,
                                   output=known[step.name]))
    return tuple(planned)


async def make_plan(runbook: Runbook, values: Mapping[str, Any], services: Services) -> Plan:
    checks = await check_preconditions(runbook, values, services)
    steps = await plan_steps(runbook, values, services) if all(ok for _, ok, _ in checks) \
        else ()
    return Plan(runbook.name, dict(values), checks, steps)


@task(name="runbook-step", cache_key_fn=key_parameter, persist_result=True)
async def _run_step(binding: Binding, ctx: StepContext, args: BaseModel,
                    key: str | None) -> dict[str, Any]:
    """`key`: the step's cache key in this flow run (step_cache.py)."""
    output = await binding.run(ctx, args)
    return output.model_dump()


async def _call(call: Call, name: str, runbook: Runbook, services: Services,
                context: Mapping[str, Any], *, where: str, plan: Plan | None,
                retries: int = 0, delay: float = 0) -> tuple[BaseModel, dict[str, Any]]:
    args = _args(call, where, context)
    binding = _binding(call.action)
    ctx = _step_context(runbook, services, False, name, plan)
    if call.action == APPROVAL:  # Prefect pauses flow runs, not task runs
        return args, (await binding.run(ctx, args)).model_dump()
    runner = _run_step.with_options(name=name, task_run_name=name, retries=retries,
                                    retry_delay_seconds=delay)
    key = step_key(services.run_id, (*services.path, where, name), call.action,
                   args.model_dump(mode="json"))
    return args, await runner(binding, ctx, args, key)


async def execute(runbook: Runbook, given: Mapping[str, Any], services: Services, *,
                  dry_run: bool, publish: bool = True) -> RunRecord:
    """Run (or, with `dry_run`, plan) the runbook; the record says how it went. Bad
    parameters raise `ParametersInvalid` before anything is read."""
    values = bind_values(runbook, given)
    if not dry_run and _separate(runbook, services) and not services.started_by.strip():
        raise ConfigError("started_by", f"runbook {runbook.name!r} must be approved by "
                          "someone other than whoever starts it, so a run must say who "
                          "starts it: `gpuops runbook run --as <your Slack user ID>` (or "
                          "GPUOPS_RUNBOOKS_STARTED_BY), the `started_by` field of the "
                          "Prefect UI form; nothing was started")
    record = RunRecord(runbook.name, values, dry_run, started_by=services.started_by)
    if services.run_id and not services.depth:  # a nested run shares its outer run's id
        record.earlier = await compensate_earlier(runbook.name, services, dry_run=dry_run)
    plan = await make_plan(runbook, values, services)
    try:
        failed = [(c, d) for c, ok, d in plan.checks if not ok]
        if failed:
            record.outcome = "precondition-failed"
            record.message = "; ".join(f"{c}: {d}" for c, d in failed)
        elif dry_run:
            record.outcome = "dry-run"
            record.message = f"{len(plan.changes())} change(s) planned"
            record.plan = plan.text()
            record.outputs = {s.name: s.output for s in plan.steps if s.output is not None}
        else:
            journal = Journal(services.run_id, runbook.name, services.kube)
            async with recording_actions():
                await _run(runbook, values, services, plan, record, journal)
            await journal.close()  # every outcome compensated as it said: nothing left
    finally:
        if publish:
            await acreate_markdown_artifact(markdown=run_markdown(record, plan),
                                            description=f"Runbook {runbook.name}")
    return record


async def _run(runbook: Runbook, values: Mapping[str, Any], services: Services, plan: Plan,
               record: RunRecord, journal: Journal) -> None:
    outputs: dict[str, Any] = {}
    done: list[tuple[Step, dict[str, Any]]] = []  # steps with an undo, in the order done
    for i, step in enumerate(runbook.steps):
        where = f"steps[{i}]"
        context = context_for(runbook, values, outputs, False)
        started = time.monotonic()
        try:
            if not _when(step, where, context):
                record.steps.append(StepRecord(step.name, step.action, {}, "skipped",
                                               detail=f"when: {step.when}"))
                continue
            retries = (step.retry.attempts - 1) if step.retry else 0
            delay = step.retry.delay if step.retry else 0
            if step.undo is not None:  # written before the step: a dead run can be undone
                await journal.will_run(step.name, step.undo.action,
                                       _undo_args(step, f"{where}.undo", context))
            shown = plan
            if step.action == APPROVAL:  # what the steps after it would do now, from here
                shown = Plan(runbook.name, values, plan.checks, await plan_steps(
                    runbook, values, services, start=i + 1, outputs=outputs))
            args, output = await _call(step, step.name, runbook, services, context,
                                       where=where, plan=shown, retries=retries, delay=delay)
        except Exception as e:  # noqa: BLE001 - any failure is compensated, then reported
            record.steps.append(StepRecord(step.name, step.action, {}, "failed",
                                           time.monotonic() - started, _describe(e)))
            record.outcome, record.message = "failed", f"step {step.name}: {_describe(e)}"
            await _on_failure(runbook, step, values, outputs, services, record, e)
            await _compensate(runbook, values, outputs, done, services, record)
            return
        outputs[step.name] = output
        record.outputs = dict(outputs)
        record.steps.append(StepRecord(step.name, step.action, args.model_dump(), "done",
                                       time.monotonic() - started, _summary(output)))
        if step.undo is not None:
            done.append((step, output))
            after = context_for(runbook, values, outputs, False)
            await journal.ran(step.name, _undo_args(step, f"{where}.undo", after) or {})
        if step.action == APPROVAL:
            answer = ApprovalOutput.model_validate(output)
            if not answer.approved:
                record.outcome = "not-approved"
                record.message = f"{step.name}: not approved by {answer.approver}" + (
                    f": {answer.comment}" if answer.comment else "")
                await _compensate(runbook, values, outputs, done, services, record)
                return
            record.approver = answer.approver
            drift = await _drifted(runbook, values, services, shown, i + 1, outputs)
            if drift:
                record.outcome = "plan-changed"
                record.message = f"the plan changed since it was approved: {drift}"
                await _compensate(runbook, values, outputs, done, services, record)
                return
    record.message = f"{sum(s.outcome == 'done' for s in record.steps)} step(s) done"


async def _drifted(runbook: Runbook, values: Mapping[str, Any], services: Services,
                   shown: Plan, start: int, outputs: Mapping[str, Any]) -> str:
    """What the steps after an approval would change now and the plan it showed (those
    steps, planned when it asked) did not say, or the other way round; "" when it holds."""
    approved = [c for s in shown.steps for c in s.changes]
    now = [c for s in await plan_steps(runbook, values, services, start=start,
                                       outputs=outputs) for c in s.changes]
    if approved == now:
        return ""
    added = [c for c in now if c not in approved]
    gone = [c for c in approved if c not in now]
    return "; ".join([*(f"now also: {c}" for c in added), *(f"no longer: {c}" for c in gone)])


async def _on_failure(runbook: Runbook, step: Step, values: Mapping[str, Any],
                      outputs: Mapping[str, Any], services: Services, record: RunRecord,
                      error: Exception) -> None:
    context = context_for(runbook, values, outputs, False, error=_describe(error))
    for j, failure in enumerate(step.on_failure):
        started = time.monotonic()
        try:
            args, output = await _call(failure, failure.name, runbook, services, context,
                                       where=f"{step.name}.on_failure[{j}]", plan=None)
            record.steps.append(StepRecord(failure.name, failure.action, args.model_dump(),
                                           "compensation", time.monotonic() - started,
                                           _summary(output)))
        except Exception as e:  # noqa: BLE001 - recorded; the other compensations go on
            record.steps.append(StepRecord(failure.name, failure.action, {}, "failed",
                                           time.monotonic() - started, _describe(e)))


async def _compensate(runbook: Runbook, values: Mapping[str, Any], outputs: Mapping[str, Any],
                      done: list[tuple[Step, dict[str, Any]]], services: Services,
                      record: RunRecord) -> None:
    """Every done step's `undo:`, last first; one that fails is recorded and the rest
    still run (each undo is an idempotent desired state, safe to try again)."""
    for step, _ in reversed(done):
        assert step.undo is not None
        name = f"undo-{step.name}"
        context = context_for(runbook, values, outputs, False)
        started = time.monotonic()
        try:
            args, output = await _call(step.undo, name, runbook, services, context,
                                       where=f"{step.name}.undo", plan=None)
            record.steps.append(StepRecord(name, step.undo.action, args.model_dump(),
                                           "undone", time.monotonic() - started,
                                           _summary(output)))
        except Exception as e:  # noqa: BLE001 - recorded; the other undos go on
            record.steps.append(StepRecord(name, step.undo.action, {}, "undo-failed",
                                           time.monotonic() - started, _describe(e)))


def _undo_args(step: Step, where: str, context: Mapping[str, Any]) -> dict[str, Any] | None:
    """The step's undo call rendered in `context`; None when it cannot be yet (it reads
    the step's own output)."""
    assert step.undo is not None
    try:
        return _args(step.undo, where, context).model_dump()
    except StepError:
        return None


async def recover(run_id: str, services: Services) -> list[StepRecord]:
    """Undo what a run that died mid-way left, from its journal, last first; the journal
    goes once every undo held. Empty: nothing was left to undo."""
    journal = await read_journal(run_id, services.kube)
    if journal is None:
        return []
    records: list[StepRecord] = []
    failed = False
    for entry in reversed(journal.get("undo") or []):
        name, action, args = f"undo-{entry['step']}", entry["action"], entry.get("args")
        if args is None:
            records.append(StepRecord(name, action, {}, "skipped", detail="its undo reads "
                                      "the step's output, which died with the run"))
            continue
        spec = CATALOG.get(action)
        started = time.monotonic()
        try:
            assert spec is not None
            ctx = StepContext(kube=services.kube, dry_run=False,
                              runbook=str(journal.get("runbook")), step=name, run_id=run_id)
            output = await _binding(action).run(ctx, spec.args.model_validate(args))
            records.append(StepRecord(name, action, args, "undone",
                                      time.monotonic() - started, _summary(output.model_dump())))
        except Exception as e:  # noqa: BLE001 - recorded; the other undos go on
            failed = True
            records.append(StepRecord(name, action, args, "undo-failed",
                                      time.monotonic() - started, _describe(e)))
    if not failed:
        await forget_journal(run_id, services.kube)
    return records


async def compensate_earlier(runbook: str, services: Services, *, dry_run: bool
                             ) -> list[str]:
    """Undo (with `dry_run`, only list) what ended earlier runs of `runbook` left; one
    line per undo ("undid run X's cordon of gpu-3"), also logged."""
    bodies = await leftover_journals(services.kube)
    lines: list[str] = []
    for run in runs_of(runbook, bodies, services.run_id):
        decision = decide(await flow_run_state(run))
        if not decision.compensate:
            continue  # maybe alive (an approval waits): its own run or `recover` ends it
        if dry_run:
            lines += [f"would undo run {run}'s {e['step']}{_of(e.get('args'))} "
                      f"({decision.why})" for e in reversed(bodies[run].get("undo") or [])]
            continue
        for r in await recover(run, services):
            step = r.name.removeprefix("undo-")
            verb = {"undone": "undid", "skipped": "could not undo"}.get(r.outcome,
                                                                     "failed to undo")
            lines.append(f"{verb} run {run}'s {step}{_of(r.args)} ({decision.why})"
                         + (f": {r.detail}" if r.outcome != "undone" and r.detail else ""))
    for line in lines:
        _log(line)
    return lines


def _of(args: Mapping[str, Any] | None) -> str:
    node = (args or {}).get("node")
    return f" of {node}" if isinstance(node, str) and node else ""


def _log(line: str) -> None:
    try:
        get_run_logger().warning(line)
    except MissingContextError:  # outside a flow run (tests)
        get_logger("gpuops.runbooks").warning(line)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _summary(output: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v}" for k, v in output.items())
    return text if len(text) <= 300 else text[:297] + "..."


def _inner_runner(services: Services, separate: bool, step: str) -> Any:
    """`run-runbook`: the inner runbook keeps the run's starter, and its approvals the
    separation the outer one requires; its steps' cache keys say which step ran it."""
    async def run_inner(name: str, params: Mapping[str, Any], dry_run: bool
                        ) -> dict[str, Any]:
        loaded = services.runbooks.get(name) if services.runbooks is not None else None
        if loaded is None:
            raise PermanentError(f"no runbook named {name!r} is loaded")
        if services.depth >= 8:
            raise PermanentError("runbooks nested more than 8 deep")
        inner = Services(services.kube, services.slack, services.policy, services.runbooks,
                         services.run_id, services.deployment_parameters, services.depth + 1,
                         services.capacity, services.aws, services.started_by, separate,
                         (*services.path, step))
        result = await execute(loaded.runbook, params, inner, dry_run=dry_run, publish=False)
        return {"outcome": result.outcome, "steps": result.outputs}
    return run_inner
