"""`gpuops runbook ...`: check runbook files, print the format's JSON Schema, list actions.

Kept apart from cli.py, which only mounts `runbook_app`; the runbook modules are imported
inside each command so `gpuops --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

runbook_app = typer.Typer(
    help="Runbooks: operators' procedures in YAML, validated, dry-run, run as Prefect flows.",
    no_args_is_help=True,
)


@runbook_app.command("validate")
def validate(
    files: Annotated[list[Path] | None, typer.Argument(
        help="Runbook files (YAML). [default: the shipped runbooks]", show_default=False)]
        = None,
) -> None:
    """Check runbooks completely: every problem as `file:line:col: field: message` with the
    line it is on; exit status 1 when there is any, 0 and `ok` for each runbook otherwise."""
    from gpuops.runbooks.loader import RunbookInvalid, load_files, shipped_files

    paths = list(files or shipped_files())
    try:
        loaded = load_files(paths, known=shipped_files())
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
