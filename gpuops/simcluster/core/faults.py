"""Fault injection: the registry every simulated component's faults are injected through.

The API server's faults (latency, 429, 500s, dropped watches) and the workload faults (crash
loop, OOM, Xid...) are registered by the components that simulate them, under a unique kind,
each with a typed model of its
parameters (`FaultParams`): a request is validated before any handler runs, so a value the
simulated components cannot use (an exit code no process can have, a delay that is not a
number, `once=maybe`, a reason that does not exist, a misspelt name) is a 400 naming the
field and what it may be, never a broken cluster. The same models describe every kind for
`GET /admin/faults` and `gpuops sim fault --list`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from . import errors

FaultHandler = Callable[[str | None, dict[str, Any]], dict[str, Any]]


class FaultParams(BaseModel):
    """Base of every fault kind's parameters: JSON types as they are (no "3" for 3, no
    "yes" for true), finite numbers, no unknown names. A field whose default is None is
    decided by the component (say so in its description); handlers get the validated
    values as a dict without the None ones."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              hide_input_in_errors=True, frozen=True, populate_by_name=True)


class NoParams(FaultParams):
    """For kinds that take no parameters."""


def _kind_of(schema: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of an optional field's JSON schema."""
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    return {**schema, **(branches[0] if branches else {})}


def describe_value(schema: dict[str, Any]) -> str:
    """What a parameter may be, in words: "an integer from 0 to 255", "true or false"."""
    s = _kind_of(schema)
    if "enum" in s or "const" in s:
        values = s.get("enum") or [s["const"]]
        return "one of " + ", ".join(str(v) for v in values)
    kind = {"integer": "an integer", "number": "a number", "boolean": "true or false",
            "string": "a string", "object": "an object", "array": "a list"}.get(
        s.get("type", ""), "a value")
    low = s.get("minimum", s.get("exclusiveMinimum"))
    high = s.get("maximum", s.get("exclusiveMaximum"))
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}"
    if low is not None:
        return f"{kind} {'>' if 'exclusiveMinimum' in s else '>='} {low}"
    if high is not None:
        return f"{kind} {'<' if 'exclusiveMaximum' in s else '<='} {high}"
    return kind


def describe_params(model: type[FaultParams]) -> list[dict[str, Any]]:
    """Each parameter: name, what it may be, its default (None: the component decides) and
    what it does."""
    schema = model.model_json_schema(by_alias=True)
    return [{"name": name, "value": describe_value(prop), "default": prop.get("default"),
             "description": prop.get("description", "")}
            for name, prop in schema.get("properties", {}).items()]


# Errors that "must be <what the field may be>" says all of.
_PLAIN_ERRORS = {"int_type", "float_type", "bool_type", "string_type", "literal_error",
                 "enum", "greater_than", "greater_than_equal", "less_than", "less_than_equal",
                 "finite_number", "int_from_float", "dict_type", "list_type"}


def params_error(kind: str, model: type[FaultParams], error: ValidationError) -> errors.ApiError:
    """A 400 naming each bad parameter and what it may be (values are not repeated)."""
    props = model.model_json_schema(by_alias=True).get("properties", {})
    problems = []
    for e in sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden"):
        name = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            known = ", ".join(props) or "none"
            problems.append(f"params.{name}: unknown parameter of {kind!r} (its parameters: "
                            f"{known})")
        elif e["type"] == "missing":
            what = describe_value(props[name]) if name in props else "given"
            problems.append(f"params.{name} is required: {what}")
        elif name in props and e["type"] in _PLAIN_ERRORS:
            problems.append(f"params.{name} must be {describe_value(props[name])}")
        elif name in props:
            problems.append(f"params.{name}: {e['msg']}; it must be "
                            f"{describe_value(props[name])}")
        else:
            problems.append(f"params.{name}: {e['msg']}")
    return errors.bad_request(f"fault {kind!r}: " + "; ".join(problems)
                              + " (see `gpuops sim fault --list`)")


@dataclass(frozen=True)
class FaultKind:
    handler: FaultHandler
    params: type[FaultParams]
    description: str
    target: str


class FaultRegistry:
    """Fault kinds -> handlers and their parameter models; registering a kind twice is a bug
    and fails loudly."""

    def __init__(self) -> None:
        self._kinds: dict[str, FaultKind] = {}

    def register(self, kind: str, handler: FaultHandler, description: str, *,
                 params: type[FaultParams] = NoParams, target: str = "none") -> None:
        """`target` says what the kind's target names, for the listing."""
        if kind in self._kinds:
            raise ValueError(f"fault kind {kind!r} is already registered")
        self._kinds[kind] = FaultKind(handler, params, description, target)

    def inject(self, kind: str, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        if kind not in self._kinds:
            raise errors.bad_request(f"unknown fault kind {kind!r}; known: "
                                     f"{', '.join(sorted(self._kinds))} "
                                     "(see `gpuops sim fault --list`)")
        spec = self._kinds[kind]
        try:
            valid = spec.params.model_validate(params)
        except ValidationError as e:
            raise params_error(kind, spec.params, e) from None
        return spec.handler(target, valid.model_dump(exclude_none=True))

    def kinds(self) -> list[str]:
        return sorted(self._kinds)

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every kind: what it does, what its target names, its parameters."""
        return {kind: {"description": k.description, "target": k.target,
                       "params": describe_params(k.params)}
                for kind, k in sorted(self._kinds.items())}
