"""Everything about one runbook that its models alone cannot check (pure).

Which actions exist and what arguments each takes (the catalog), what every template and
`when:` refers to (parameters, earlier steps' outputs, the fields those outputs have),
parameter defaults against their own type, trigger mappings. All problems are collected, none
stops the others: a person fixes a file once, not once per error. Checks work on the raw data
so a step whose shape is wrong still has its neighbours checked, and an error in one place
does not cascade into "unknown name" errors elsewhere (a broken parameter is still declared).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from jinja2 import nodes
from pydantic import BaseModel, TypeAdapter, ValidationError

from gpuops.runbooks.located import dotted, problems_from, unknown_key_message
from gpuops.runbooks.params import IDENTIFIER, Parameter
from gpuops.runbooks.registry import ActionCatalog, ActionSpec
from gpuops.runbooks.templates import (
    TemplateProblem,
    is_template,
    parse_expression,
    parse_template,
    references,
)
from gpuops.runbooks.yamlnodes import Loc, Problem, YamlTree

RESERVED = ("steps", "dry_run", "event", "error", "runbook")
_PARAMETER = TypeAdapter(Parameter)
_SINGLE_NAME = re.compile(r"\s*\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}\s*")


@dataclass
class Scope:
    """What a template at one place may read."""

    params: dict[str, Any]  # name -> the validated parameter, or None when it is broken
    steps: dict[str, ActionSpec | None]  # earlier steps -> their action (None: unknown)
    later: frozenset[str] = frozenset()
    current: str = ""
    extra: tuple[str, ...] = ("dry_run", "runbook")
    allow_steps: bool = True


@dataclass
class RunbookCalls:
    """The runbooks a runbook runs (`run-runbook`), with where each call is."""

    calls: list[tuple[str, Loc]] = field(default_factory=list)


def check_runbook(tree: YamlTree, catalog: ActionCatalog) -> tuple[list[Problem], RunbookCalls]:
    data = tree.data
    checker = _Checker(tree, catalog)
    if isinstance(data, dict):
        checker.run(data)
    return checker.problems, checker.calls


class _Checker:
    def __init__(self, tree: YamlTree, catalog: ActionCatalog) -> None:
        self.tree = tree
        self.catalog = catalog
        self.problems: list[Problem] = []
        self.calls = RunbookCalls()

    def problem(self, loc: Loc, message: str, *, value: bool = True) -> None:
        self.problems.append(self.tree.problem(loc, dotted(loc), message, value=value))

    def run(self, data: dict[str, Any]) -> None:
        params = self.parameters(data.get("parameters"))
        self.trigger(data.get("trigger"), params)
        self.approval(data.get("approval"), data.get("steps"))
        pre = data.get("preconditions")
        if isinstance(pre, list):
            for i, item in enumerate(pre):
                if isinstance(item, dict):
                    self.precondition(item, ("preconditions", i), params)
        steps = data.get("steps")
        if isinstance(steps, list):
            self.steps(steps, params)

    # --- parameters and trigger ---------------------------------------------------------------

    def parameters(self, raw: Any) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if not isinstance(raw, dict):
            return params
        for name, spec in raw.items():
            loc: Loc = ("parameters", name)
            if not isinstance(name, str) or not re.fullmatch(IDENTIFIER, name):
                self.problem(loc, f"parameter name {name!r} must be lower case letters, "
                             "digits and `_` (templates read it as a name)", value=False)
            elif name in RESERVED:
                self.problem(loc, f"{name!r} is a reserved name (templates read it as "
                             "something else); choose another", value=False)
            try:
                param = _PARAMETER.validate_python(spec)
            except ValidationError:
                params[str(name)] = None  # its own errors come from the model
                continue
            params[str(name)] = param
            if param.default is not None:
                try:
                    param.check(param.default)
                except (ValueError, TypeError) as e:
                    self.problem((*loc, "default"), f"the default does not fit the "
                                 f"parameter's own type ({param.type}): {e}")
        return params

    def trigger(self, raw: Any, params: dict[str, Any]) -> None:
        if not isinstance(raw, dict):
            return
        mapping = raw.get("parameters")
        mapped = mapping if isinstance(mapping, dict) else {}
        scope = Scope(params={}, steps={}, extra=("event",), allow_steps=False)
        for name, value in mapped.items():
            loc: Loc = ("trigger", "parameters", name)
            if name not in params:
                self.problem(loc, unknown_key_message(str(name), list(params), "parameter"),
                             value=False)
            self.values(value, loc, scope)
        for name, param in params.items():
            if param is not None and param.required and name not in mapped:
                self.problem(("trigger",), f"the trigger gives no value for the required "
                             f"parameter {name!r}: map it under `trigger.parameters`",
                             value=False)

    def approval(self, raw: Any, steps: Any) -> None:
        """Keeping the approver apart from the starter needs an approval to keep apart:
        a step of this runbook's, or of one it runs."""
        if not isinstance(raw, dict) or raw.get("separate_approver") is not True:
            return
        actions = {s.get("action") for s in steps if isinstance(s, dict)} \
            if isinstance(steps, list) else set()
        if not actions & {"request-approval", "run-runbook"}:
            self.problem(("approval", "separate_approver"), "the runbook asks for no "
                         "approval (no `request-approval` step, nor a `run-runbook`), so "
                         "there is no approver to keep apart from whoever starts it")

    def precondition(self, item: dict[str, Any], loc: Loc, params: dict[str, Any]) -> None:
        self.call(item, loc, Scope(params, {}, allow_steps=False), key="check")

    # --- steps ----------------------------------------------------------------------------------

    def steps(self, steps: list[Any], params: dict[str, Any]) -> None:
        names = [s.get("name") if isinstance(s, dict) else None for s in steps]
        earlier: dict[str, ActionSpec | None] = {}
        for i, step in enumerate(steps):
            if not isinstance(step, dict):
                continue
            loc: Loc = ("steps", i)
            name = step.get("name")
            if isinstance(name, str) and name in earlier:
                first = names.index(name)
                self.problem((*loc, "name"), f"step name {name!r} is taken by steps[{first}] "
                             "(later steps read outputs by name)")
            later = frozenset(n for n in names[i + 1:] if isinstance(n, str))
            scope = Scope(params, dict(earlier), later, name if isinstance(name, str) else "")
            spec = self.call(step, loc, scope)
            when = step.get("when")
            if isinstance(when, str):
                self.when(when, (*loc, "when"), scope)
            failures = step.get("on_failure")
            if isinstance(failures, list):
                for j, failure in enumerate(failures):
                    if isinstance(failure, dict):
                        self.call(failure, (*loc, "on_failure", j),
                                  Scope(params, dict(earlier), later, scope.current,
                                        extra=(*scope.extra, "error")))
            if isinstance(name, str) and name not in earlier:
                earlier[name] = spec
            undo = step.get("undo")
            if isinstance(undo, dict):
                self.call(undo, (*loc, "undo"), Scope(params, dict(earlier), later))

    def call(self, call: Mapping[str, Any], loc: Loc, scope: Scope, *,
             key: str = "action") -> ActionSpec | None:
        """Check a call's action and arguments; its action's spec when it is known."""
        name = call.get(key)
        if not isinstance(name, str):
            return None
        spec = self.catalog.get(name)
        if spec is None:
            self.problem((*loc, key), unknown_key_message(name, list(self.catalog),
                                                           "action" if key == "action"
                                                           else "check"))
            self.values(call.get("args"), (*loc, "args"), scope)
            return None
        if key == "check" and not spec.check:
            checks = [n for n, s in self.catalog.items() if s.check]
            self.problem((*loc, key), f"{name!r} is an action, not a check; checks: "
                         f"{', '.join(checks)}")
        args = call.get("args", {})
        if isinstance(args, dict):
            self.arguments(spec, args, (*loc, "args"), scope,
                           missing_at=(*loc, "args") if "args" in call else (*loc, key))
        return spec

    def arguments(self, spec: ActionSpec, args: dict[str, Any], loc: Loc, scope: Scope, *,
                  missing_at: Loc) -> None:
        self.values(args, loc, scope)
        if spec.name == "run-runbook":
            runbook = args.get("runbook")
            if is_template(runbook):
                self.problem((*loc, "runbook"), "the runbook to run is a name, not a "
                             "template: cycles between runbooks are found before any run")
            elif isinstance(runbook, str):
                self.calls.calls.append((runbook, (*loc, "runbook")))
        probe, typed_by = self._probe(args, scope)
        try:
            spec.args.model_validate(probe)
        except ValidationError as e:
            self._argument_errors(e, spec, args, loc, missing_at, typed_by, scope)
            return
        if spec.name == "wait-until":
            inner = {"check": args.get("check"), "args": args.get("args", {})}
            self.call(inner, loc, scope, key="check")

    def _probe(self, args: dict[str, Any], scope: Scope) -> tuple[dict[str, Any], set[str]]:
        """The arguments with templates stood in for: `{{ param }}` by a value of the
        parameter's type (so a string parameter where an int goes is caught); any other
        template is left out of type checking here and checked when rendered."""
        probe: dict[str, Any] = {}
        typed_by: set[str] = set()
        for key, value in args.items():
            if not is_template(value):
                probe[key] = value
                continue
            match = _SINGLE_NAME.fullmatch(value)
            param = scope.params.get(match.group(1)) if match else None
            if param is not None:
                probe[key] = param.sample()
                typed_by.add(key)
            else:
                probe[key] = _Untyped
        return probe, typed_by

    def _argument_errors(self, error: ValidationError, spec: ActionSpec, args: dict[str, Any],
                         loc: Loc, missing_at: Loc, typed_by: set[str], scope: Scope) -> None:
        accepted = list(spec.args.model_fields)
        for problem_e in error.errors():
            first = problem_e["loc"][0] if problem_e["loc"] else None
            kind = problem_e["type"]
            if kind != "extra_forbidden" and first in args and is_template(args[first]) \
                    and first not in typed_by:
                continue  # its type is checked once rendered; its name is checked now
            if kind == "extra_forbidden":
                message = unknown_key_message(str(first), accepted, "argument",
                                              f" for action {spec.name!r}")
                self.problem((*loc, str(first)), message, value=False)
            elif kind == "missing" and len(problem_e["loc"]) == 1:
                self.problems.append(self.tree.problem(
                    missing_at, dotted((*loc, str(first))),
                    f"missing argument {first!r} for action {spec.name!r} (required)"))
            elif first in typed_by:
                match = _SINGLE_NAME.fullmatch(args[first])
                name = match.group(1) if match else ""
                self.problem((*loc, str(first)), f"parameter {name!r} is of type "
                             f"{scope.params[name].type}, which does not fit here: "
                             f"{problem_e['msg']}")
            else:
                for p in problems_from(_single(error, problem_e), self.tree, spec.args,
                                       data=args, prefix=loc, what="argument"):
                    self.problems.append(p)

    # --- templates and conditions ---------------------------------------------------------------

    def values(self, value: Any, loc: Loc, scope: Scope) -> None:
        """Every template inside `value` (mappings and lists walked)."""
        if isinstance(value, dict):
            for k, v in value.items():
                self.values(v, (*loc, k), scope)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.values(v, (*loc, i), scope)
        elif is_template(value):
            try:
                tree = parse_template(value)
            except TemplateProblem as e:
                self._template_problem(loc, str(e), e.lineno)
                return
            self.refs(tree, loc, scope)

    def when(self, expression: str, loc: Loc, scope: Scope) -> None:
        try:
            expr = parse_expression(expression)
        except TemplateProblem as e:
            self._template_problem(loc, str(e), e.lineno)
            return
        if isinstance(expr, nodes.Const) and not isinstance(expr.value, bool):
            self.problem(loc, f"not a boolean expression: {expr.value!r} is a constant; "
                         "write a condition such as `evict` or `steps.cordon.changed`")
            return
        self.refs(expr, loc, scope)

    def _template_problem(self, loc: Loc, message: str, lineno: int) -> None:
        offset = lineno if loc in self.tree.block_scalars else 0
        # "No filter named 'shout'": point at the name.
        named = re.search(r"named '([A-Za-z0-9_]+)'", message)
        self.problems.append(self.tree.problem(loc, dotted(loc), message, value=True,
                                               line_offset=offset,
                                               find=named.group(1) if named else ""))

    def refs(self, tree: nodes.Node, loc: Loc, scope: Scope) -> None:
        for message, needle in _unresolved(tree, scope):
            self.problems.append(self.tree.problem(loc, dotted(loc), message, value=True,
                                                   find=needle))


class _UntypedMarker:
    """Stands in for a template in the type check: no type accepts it, and the errors it
    causes are left out (`_argument_errors`); it only keeps the key present, so the template
    does not read as a missing argument."""


_Untyped = _UntypedMarker()


def _single(error: ValidationError, item: Any) -> ValidationError:
    return ValidationError.from_exception_data(error.title, [_as_line(item)])


def _as_line(item: Any) -> Any:
    line = {"type": item["type"], "loc": item["loc"], "input": item.get("input")}
    if "ctx" in item:
        line["ctx"] = item["ctx"]
    return line


def _unresolved(tree: nodes.Node, scope: Scope) -> Iterator[tuple[str, str]]:
    """What a template reads that is not there: (message, the text to point at)."""
    known = [*scope.params, *scope.extra]
    for ref in references(tree):
        if ref.name != "steps":
            if ref.name not in known:
                names = ", ".join(known) or "none"
                yield (f"{ref.name!r} is not defined (names here: {names}; earlier steps' "
                       "outputs are `steps.<name>.<field>`)" if scope.allow_steps else
                       f"{ref.name!r} is not defined (names here: {names})"), ref.name
            continue
        if not scope.allow_steps:
            yield ("steps' outputs are not known here: only parameters and the names above",
                   "steps")
            continue
        if not ref.step:
            continue
        if ref.step == scope.current:
            yield f"step {ref.step!r} cannot read its own output (only `undo:` can)", ref.step
        elif ref.step in scope.later:
            yield f"step {ref.step!r} runs after this one: its output is not there yet", ref.step
        elif ref.step not in scope.steps:
            earlier = ", ".join(scope.steps) or "none"
            yield (f"no step named {ref.step!r} before this one (earlier steps: {earlier})",
                   ref.step)
        else:
            spec = scope.steps[ref.step]
            output: type[BaseModel] | None = spec.output if spec is not None else None
            if ref.field and output is not None and ref.field not in output.model_fields:
                yield (f"step {ref.step!r} ({spec.name if spec else ''}) has no output "
                       f"{ref.field!r}; its outputs: {', '.join(output.model_fields)}"), ref.field
