"""`gpuops runbook ...`: check runbook files, print the format's JSON Schema, list actions.

Kept apart from cli.py, which only mounts `runbook_app`; the runbook modules are imported
inside each command so `gpuops --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

runbook_app = typer.Typer(
    help="Runbooks: operators' procedures in YAML, validated, dry-run, run as Prefect flows.",
    no_args_is_help=True,
)


@runbook_app.command("validate")
def validate(
    files: Annotated[list[Path] | None, typer.Argument(
        help="Runbook files (YAML). [default: the shipped runbooks and those in "
             "$GPUOPS_RUNBOOKS_DIR]", show_default=False)]
        = None,
) -> None:
    """Check runbooks completely: every problem as `file:line:col: field: message` with the
    line it is on; exit status 1 when there is any, 0 and `ok` for each runbook otherwise."""
    from gpuops.flows.run_runbook import runbook_files
    from gpuops.runbooks.loader import RunbookInvalid, load_files

    known = runbook_files()
    paths = list(files or known)
    try:
        loaded = load_files(paths, known=known)
    except RunbookInvalid as e:
        for problem in e.problems:
            typer.echo(problem.render(), err=True)
        sources = {p.source for p in e.problems}
        count = len(e.problems)
        typer.echo(f"{count} problem{'s' * (count != 1)} in {len(sources)} "
                   f"file{'s' * (len(sources) != 1)}", err=True)
        raise typer.Exit(1) from None
    for name, runbook in loaded.items():
        typer.echo(f"ok: {name} ({runbook.source})")


@runbook_app.command("schema")
def schema(
    output: Annotated[Path | None, typer.Option(help="Write it to this file instead of "
                                                "printing it.")] = None,
) -> None:
    """The runbook format as JSON Schema, for editors: point the YAML language server at it
    (`# yaml-language-server: $schema=<file>` as a runbook's first line)."""
    from gpuops.runbooks.schema_export import schema_text

    text = schema_text()
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
        typer.echo(f"wrote {output}")


@runbook_app.command("actions")
def actions() -> None:
    """The actions and checks a step may call, with their arguments."""
    from gpuops.runbooks.catalog import CATALOG

    for name, spec in CATALOG.items():
        kind = "check" if spec.check else "destructive" if spec.destructive else "read/ask"
        fields = ", ".join(f"{f}{'' if info.is_required() else '?'}"
                           for f, info in spec.args.model_fields.items())
        typer.echo(f"{name:22} [{kind}] ({fields}) {spec.summary}")


def _registry(extra: list[Path] | None) -> Any:
    from gpuops.flows.run_runbook import load_runbooks

    return load_runbooks(extra or [])


ExtraOption = Annotated[list[Path] | None, typer.Option(
    "--file", help="A runbook file besides the shipped ones; repeatable.")]


@runbook_app.command("list")
def list_runbooks(file: ExtraOption = None) -> None:
    """The runbooks: name, parameters, trigger, first line of the description."""
    for name, loaded in _registry(file).items():
        runbook = loaded.runbook
        params = ", ".join(f"{p}{'' if spec.required else '?'}"
                           for p, spec in runbook.parameters.items())
        trigger = f" [on {runbook.trigger.event}]" if runbook.trigger else ""
        summary = (runbook.description.strip().splitlines() or [""])[0]
        typer.echo(f"{name} ({params}){trigger}: {summary}")


@runbook_app.command("show")
def show(name: Annotated[str, typer.Argument(help="The runbook's name.")],
         file: ExtraOption = None) -> None:
    """A runbook's parameters, preconditions and steps."""
    from gpuops.common.errors import ConfigError

    loaded = _registry(file).get(name)
    if loaded is None:
        raise ConfigError("runbook", f"no runbook named {name!r}; `gpuops runbook list` "
                          "names them")
    runbook = loaded.runbook
    typer.echo(f"{runbook.name} ({loaded.source})")
    if runbook.description:
        typer.echo(runbook.description.strip())
    typer.echo("parameters:")
    for pname, spec in runbook.parameters.items():
        default = "required" if spec.required else f"default {spec.default!r}"
        typer.echo(f"  {pname}: {spec.type}, {default}"
                   + (f" - {spec.description}" if spec.description else ""))
    if runbook.trigger:
        typer.echo(f"trigger: {runbook.trigger.event} {runbook.trigger.match or ''}")
    for pre in runbook.preconditions:
        typer.echo(f"precondition: {pre.check} {pre.args}")
    for i, step in enumerate(runbook.steps, 1):
        when = f" when {step.when}" if step.when else ""
        undo = f" (undo: {step.undo.action})" if step.undo else ""
        typer.echo(f"{i}. {step.name}: {step.action}{when}{undo}")


@runbook_app.command("run")
def run(
    name: Annotated[str, typer.Argument(help="The runbook's name.")],
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="A parameter, `name=value`; repeatable.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Plan from live state; change nothing.")]
        = False,
    served: Annotated[bool, typer.Option(help="Run it as the deployment `gpuops up` serves "
                                         "(`<name>/runbook`) and wait for it to end.")]
        = False,
    cluster_block: Annotated[str, typer.Option(help="KubernetesCluster Block.")] = "",
    slack_block: Annotated[str, typer.Option(help="SlackConnection Block.")] = "",
    policy_block: Annotated[str, typer.Option(help="ApprovalPolicy Block.")] = "",
    capacity_block: Annotated[str, typer.Option(help="CapacityConfig Block (pools).")] = "",
    aws_block: Annotated[str, typer.Option(help="AwsConnection Block.")] = "",
    started_by: Annotated[str, typer.Option(
        "--as", help="Who starts the run: your Slack user ID (Prefect has no user "
        "identity). Needed when the runbook must be approved by someone else, who then "
        "cannot be you. [default: $GPUOPS_RUNBOOKS_STARTED_BY]", show_default=False)] = "",
    file: ExtraOption = None,
) -> None:
    """Run a runbook here, as a flow run on the Prefect server (its steps are task runs);
    bad parameters are one error line naming each, before anything starts."""
    import asyncio

    from gpuops.common.errors import ConfigError
    from gpuops.common.settings import RunbookSettings, get_settings
    from gpuops.flows.run_runbook import runbook_flow, separates
    from gpuops.runbooks.arguments import bind_values, parse_cli_params

    registry = _registry(file)
    loaded = registry.get(name)
    if loaded is None:
        raise ConfigError("runbook", f"no runbook named {name!r}; `gpuops runbook list` "
                          "names them")
    given = parse_cli_params(param or [])
    typed = bind_values(loaded.runbook, given)  # every bad value named, nothing started
    # JSON values for the deployment's schema; a duration stays as written (`5m`).
    values = {k: given[k] if loaded.runbook.parameters[k].type == "duration" else typed[k]
              for k in given}
    who = started_by or get_settings(RunbookSettings).started_by
    if not who and separates(loaded.runbook, registry):
        if not dry_run:
            raise ConfigError("--as", f"runbook {name!r} must be approved by someone other "
                              "than whoever starts it: say who you are, `--as <your Slack "
                              "user ID>` (or GPUOPS_RUNBOOKS_STARTED_BY); nothing was started")
        who = "(dry run)"  # nobody is asked in a dry run; the form still wants a name
    engine = {"dry_run": dry_run, "cluster_block": cluster_block, "slack_block": slack_block,
              "policy_block": policy_block, "capacity_block": capacity_block,
              "aws_block": aws_block,
              "started_by": who}
    state: Any
    if served:
        state = asyncio.run(_run_served(f"{name}/runbook", {
            **values, **{k: v for k, v in engine.items() if v}}))
    else:
        flow: Any = runbook_flow(loaded, registry)
        state = asyncio.run(flow(**values, **engine, return_state=True))
        if dry_run and state.name == "DryRun":
            typer.echo(state.result())  # the plan, step by step
    typer.echo(f"{state.name}: {state.message}")
    if state.is_failed():
        raise typer.Exit(1)


async def _run_served(deployment: str, parameters: dict[str, Any]) -> Any:
    from prefect.deployments import arun_deployment

    run = await arun_deployment(deployment, parameters=parameters, timeout=None)
    typer.echo(f"flow run {run.name} ({run.id}) of {deployment}")
    return run.state


@runbook_app.command("recover")
def recover(
    run_id: Annotated[str, typer.Argument(help="The flow run id of the runbook run that "
                                          "died (the Prefect UI shows it).")],
    cluster_block: Annotated[str, typer.Option(help="KubernetesCluster Block.")] = "",
) -> None:
    """Undo what a runbook run that died mid-way did (its undos, last first, from the
    journal it kept on the Prefect server); undoing twice changes nothing."""
    import asyncio

    from gpuops.blocks.connections import KubernetesCluster
    from gpuops.blocks.loading import load_block
    from gpuops.runbooks.engine import Services
    from gpuops.runbooks.engine import recover as recover_run

    async def go() -> Any:
        cluster = await load_block(KubernetesCluster, cluster_block)
        return await recover_run(run_id, Services(cluster.kube(), run_id=run_id))

    records = asyncio.run(go())
    if not records:
        typer.echo(f"nothing to undo for run {run_id}")
        return
    for r in records:
        typer.echo(f"{r.name}: {r.outcome} {r.action}({r.args}) {r.detail}".rstrip())
    if any(r.outcome == "undo-failed" for r in records):
        raise typer.Exit(1)
