"""Each runbook as a Prefect flow of its own, whose parameters are the runbook's.

Why not one generic flow with `params: dict`: the Prefect UI's form comes from the flow's
signature, so each runbook gets a signature built from its declaration (types, bounds,
patterns, allowed values, descriptions, defaults) and the form refuses a bad value before
a run starts; the engine checks them again (arguments.py) for runs started elsewhere.
Every runbook flow also takes `dry_run`, the Block names of the cluster, Slack and the
approval policy (empty: settings), as the other gpuops flows do, and `started_by`: Prefect
OSS has no user identity, so who starts a run says so (required when the runbook, or one
it runs, must be approved by someone else; a triggered run is started by its event).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from prefect import Flow
from prefect.events import DeploymentEventTrigger
from prefect.runtime import flow_run as runtime_flow_run
from prefect.states import Completed, Failed, State
from pydantic import Field

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import AwsConnection, KubernetesCluster, SlackConnection
from gpuops.blocks.loading import load_block
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.common.settings import RunbookSettings, get_settings
from gpuops.runbooks.arguments import annotation
from gpuops.runbooks.engine import Services, execute
from gpuops.runbooks.loader import LoadedRunbook, load_files, shipped_files
from gpuops.runbooks.plan import RunRecord
from gpuops.runbooks.registry import Registry
from gpuops.runbooks.schema import Runbook
from gpuops.tasks.clients.aws import Aws

DEPLOYMENT = "runbook"  # each runbook's deployment is `<runbook>/runbook`
ENTRYPOINT_PREFIX = "runbook_"
PEOPLE_ACTIONS = ("slack-post", "request-approval")
POOL_ACTIONS = ("scale-node-pool",)
ENGINE_PARAMETERS: dict[str, tuple[type, Any, str]] = {
    "dry_run": (bool, False, "Plan from live state and report; change nothing."),
    "cluster_block": (str, "", "The KubernetesCluster Block (empty: settings)."),
    "slack_block": (str, "", "The SlackConnection Block (empty: settings)."),
    "policy_block": (str, "", "The ApprovalPolicy Block (empty: settings)."),
    "capacity_block": (str, "", "The CapacityConfig Block: its pools (empty: settings)."),
    "aws_block": (str, "", "The AwsConnection Block (empty: settings)."),
    "started_by": (str, "", ("Who starts this run: your Slack user ID. A runbook that "
                             "must be approved by someone else refuses your own Approve.")),
}
STARTED_BY_TRIGGER = "event {{ event.event }}"  # a triggered run: no person started it


def _calls(runbook: Runbook) -> Iterable[str]:
    for step in runbook.steps:
        yield step.action
        yield from (f.action for f in step.on_failure)
        if step.undo is not None:
            yield step.undo.action


def uses(runbook: Runbook, runbooks: Registry[LoadedRunbook] | None,
         actions: tuple[str, ...], depth: int = 0) -> bool:
    """Does the runbook (or one it runs) call any of `actions`? (Its Blocks are loaded
    only then: a runbook that posts nothing needs no Slack.)"""
    if any(action in actions for action in _calls(runbook)):
        return True
    inner = [str(s.args.get("runbook")) for s in runbook.steps if s.action == "run-runbook"]
    return runbooks is not None and depth < 8 and any(
        uses(loaded.runbook, runbooks, actions, depth + 1) for name in inner
        if (loaded := runbooks.get(name)) is not None)


def separates(runbook: Runbook, runbooks: Registry[LoadedRunbook] | None,
              depth: int = 0) -> bool:
    """Must the runbook (or one it runs) be approved by someone other than its starter?"""
    if runbook.approval.separate_approver:
        return True
    inner = [str(s.args.get("runbook")) for s in runbook.steps if s.action == "run-runbook"]
    return runbooks is not None and depth < 8 and any(
        separates(loaded.runbook, runbooks, depth + 1) for name in inner
        if (loaded := runbooks.get(name)) is not None)


def signature_of(runbook: Runbook, runbooks: Registry[LoadedRunbook] | None = None
                 ) -> inspect.Signature:
    params = []
    for name, param in runbook.parameters.items():
        kind = annotation(param)
        default: Any
        if param.required:
            default = Field(description=param.description or None)
        else:
            default = Field(param.default, description=param.description or None)
            if param.default is None:
                kind = kind | None
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                        default=default, annotation=kind))
    for name, (kind, value, description) in ENGINE_PARAMETERS.items():
        field = Field(value, description=description)
        annotated: Any = kind
        if name == "started_by" and separates(runbook, runbooks):  # the form asks for it
            field = Field(description=description)
            annotated = Annotated[str, Field(min_length=1, pattern=r"\S")]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                        default=field, annotation=annotated))
    return inspect.Signature(params)


def state_of(record: RunRecord) -> State:
    if record.outcome == "completed":
        return Completed(message=record.message)
    if record.outcome == "dry-run":
        return Completed(name="DryRun", message=record.message, data=record.plan)
    if record.outcome == "not-approved":
        return Completed(name="NotApproved", message=record.message)
    if record.outcome == "plan-changed":
        return Completed(name="PlanChanged", message=record.message)
    return Failed(message=f"{record.outcome}: {record.message}")


def runbook_flow(loaded: LoadedRunbook, runbooks: Registry[LoadedRunbook] | None = None
                 ) -> Flow[..., Any]:
    runbook = loaded.runbook

    async def run(**values: Any) -> State:
        engine = {name: values.pop(name) for name in ENGINE_PARAMETERS}
        dry_run = bool(engine["dry_run"])
        cluster = await load_block(KubernetesCluster, engine["cluster_block"])
        slack = policy = capacity = aws = None
        if not dry_run and uses(runbook, runbooks, PEOPLE_ACTIONS):
            slack = await load_block(SlackConnection, engine["slack_block"])
            policy = await load_block(ApprovalPolicy, engine["policy_block"])
        if uses(runbook, runbooks, POOL_ACTIONS):  # the dry run reads the pools too
            capacity = await load_block(CapacityConfig, engine["capacity_block"])
            aws = Aws.from_connection(await load_block(AwsConnection, engine["aws_block"]))
        services = Services(cluster.kube(), slack, policy, runbooks,
                            str(runtime_flow_run.id or ""),
                            {k: v for k, v in engine.items()
                             if k in ("cluster_block", "slack_block", "policy_block") and v},
                            capacity=capacity, aws=aws, started_by=engine["started_by"])
        given = {k: v for k, v in values.items() if v is not None}
        return state_of(await execute(runbook, given, services, dry_run=dry_run))

    run.__signature__ = signature_of(runbook, runbooks)  # type: ignore[attr-defined]
    # The deployment's entrypoint is `<this file>:<qualname>`; the module's `__getattr__`
    # answers that name, so a process that loads the flow from its entrypoint finds it.
    run.__name__ = run.__qualname__ = entrypoint_name(runbook.name)
    run.__doc__ = runbook.description or f"Runbook {runbook.name}."
    return Flow(run, name=runbook.name, description=runbook.description or None,
                log_prints=True)


def entrypoint_name(runbook: str) -> str:
    return ENTRYPOINT_PREFIX + runbook.replace("-", "_")


def __getattr__(name: str) -> Any:
    """`runbook_drain_gpu_node` -> the flow of runbook drain-gpu-node, shipped or in the
    runbooks folder (built when asked: nothing is read at import)."""
    if name.startswith(ENTRYPOINT_PREFIX):
        runbooks = load_runbooks()
        for runbook, loaded in runbooks.items():
            if entrypoint_name(runbook) == name:
                return runbook_flow(loaded, runbooks)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def runbook_files() -> list[Path]:
    """The shipped runbooks and those in `GPUOPS_RUNBOOKS_DIR`."""
    folder = get_settings(RunbookSettings).dir
    return [*shipped_files(), *(sorted(folder.glob("*.yaml")) if folder else [])]


def load_runbooks(paths: Iterable[Any] = ()) -> Registry[LoadedRunbook]:
    """The runbooks of `runbook_files()` and those in `paths`, all validated together."""
    files = runbook_files()
    return load_files([*files, *(p for p in paths if Path(p) not in files)])


def runbook_deployments(runbooks: Registry[LoadedRunbook] | None = None,
                        *, approval_policy: str = "") -> list[Any]:
    """One deployment per runbook, `<name>/runbook`, with its trigger when it has one."""
    runbooks = runbooks or load_runbooks()
    policy = {"policy_block": approval_policy} if approval_policy else {}
    out = []
    for name, loaded in runbooks.items():
        trigger = loaded.runbook.trigger
        triggers: list[Any] = [DeploymentEventTrigger(
            name=f"runbook {name}", expect={trigger.event},
            match={"prefect.resource.id": "k8s.*", **trigger.match},
            parameters={**trigger.parameters, "started_by": STARTED_BY_TRIGGER})] \
            if trigger is not None else []
        out.append(runbook_flow(loaded, runbooks).to_deployment(
            name=DEPLOYMENT, tags=["gpuops", "runbook"], triggers=triggers,
            parameters=policy, description=loaded.runbook.description or None))
    return out
