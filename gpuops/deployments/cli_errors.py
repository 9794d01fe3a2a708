"""Bad input to the `gpuops` command is one line and exit status 2, not a traceback.

What counts as bad input: gpuops' own permanent errors (a bad or missing Block, a rule file,
a value out of bounds: `PermanentError`, which names the field and, for YAML, file, line and
column), a scenario that does not validate, and a file that does not exist or cannot be
read. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from gpuops.common.errors import PermanentError

USAGE_ERROR = 2
_FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def user_error_line(error: BaseException) -> str | None:
    """What to tell the person, or None when `error` is not bad input."""
    scenario = sys.modules.get("gpuops.simcluster.scenario")  # only raised once imported
    if scenario is not None and isinstance(error, scenario.ScenarioError):
        return "; ".join(": ".join(part for part in (
            f"{error.source}:{line}" if line else error.source, _dotted(p.loc), p.message)
            if part) for p, line in error.problems)
    if isinstance(error, PermanentError):
        return str(error)
    if isinstance(error, _FILE_ERRORS):
        name = getattr(error, "filename", None)
        what = error.strerror or type(error).__name__
        return f"{name}: {what.lower()}" if name else str(error)
    return None


def _dotted(loc: Any) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class UserErrorsGroup(TyperGroup):
    """The top-level command group: every subcommand runs inside its `invoke`."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as e:
            line = user_error_line(e)
            if line is None:
                raise
            typer.echo(f"error: {line}", err=True)
            raise typer.Exit(USAGE_ERROR) from None


def require_blocks(*blocks: tuple[type, str]) -> None:
    """Load each named Block (class, name) before a command starts work with it: a missing
    or invalid one is a `BlockError` naming it. Empty names mean the settings default."""
    from gpuops.blocks.loading import load_block

    async def load_all() -> None:
        for block_cls, name in blocks:
            if name:
                await load_block(block_cls, name)
    asyncio.run(load_all())
