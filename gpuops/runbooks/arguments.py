"""A run's parameter values, checked against the runbook's declaration (pure).

The same check for every way a run starts: `--param k=v` (strings), the Prefect UI's form
and an event's mapping (JSON values). Every bad value is named at once, and nothing runs.
The declaration also gives the deployment's parameter schema (the UI form): one annotated
type per parameter, with its bounds, pattern or allowed values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from gpuops.common.errors import ConfigError
from gpuops.runbooks.params import DurationParam, EnumParam, ParamBase
from gpuops.runbooks.schema import Runbook


class ParametersInvalid(ConfigError):
    """One or more parameter values are wrong; `problems` maps each name to what is."""

    def __init__(self, runbook: str, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        first = next(iter(problems))
        more = "".join(f"; parameters.{k}: {v}" for k, v in list(problems.items())[1:])
        super().__init__(f"parameters.{first}", f"{problems[first]}{more}",
                         source=f"runbook {runbook}")


def bind_values(runbook: Runbook, given: Mapping[str, Any]) -> dict[str, Any]:
    """Each parameter's value as its type holds it (durations in seconds), defaults filled
    in; `ParametersInvalid` naming every unknown, missing or bad one."""
    problems: dict[str, str] = {}
    for name in given:
        if name not in runbook.parameters:
            known = ", ".join(runbook.parameters) or "none"
            problems[name] = f"{runbook.name} has no such parameter (it has: {known})"
    values: dict[str, Any] = {}
    for name, param in runbook.parameters.items():
        value = given.get(name)
        if value is None:
            if param.required:
                problems[name] = "required, and not given"
                continue
            value = param.default
        if value is None:
            values[name] = None
            continue
        try:
            values[name] = param.check(value)
        except (ValueError, TypeError) as e:
            problems[name] = str(e)
    if problems:
        raise ParametersInvalid(runbook.name, problems)
    return values


def parse_cli_params(pairs: list[str]) -> dict[str, str]:
    """`["node=gpu-1", "reason=Xid 79"]` -> a mapping; a pair without `=` is named."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--param", f"{pair!r} is not `name=value`")
        out[key.strip()] = value
    return out


def annotation(param: ParamBase) -> Any:
    """The type a Prefect parameter schema gets for `param` (the UI form's field)."""
    description = param.description or None
    schema = param.json_schema()
    if isinstance(param, EnumParam):
        allowed = Literal[tuple(param.values)]  # type: ignore[valid-type]
        return Annotated[allowed, Field(description=description)]
    if isinstance(param, DurationParam):
        return Annotated[str, Field(pattern=schema["pattern"], description=description)]
    base: Any = {"string": str, "integer": int, "number": float, "boolean": bool}[schema["type"]]
    return Annotated[base, Field(ge=schema.get("minimum"), le=schema.get("maximum"),
                                 pattern=schema.get("pattern"), description=description)]
