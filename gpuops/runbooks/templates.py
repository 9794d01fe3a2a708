"""Jinja2 for runbooks (pure): one sandboxed environment, and what a template refers to.

Why sandboxed and immutable: a parameter value comes from whoever starts a run (the UI form,
an event), and a template must not be a way to call methods that change objects or to reach
Python internals. `StrictUndefined`: a name that is not there is an error, never an empty
string that sends `kubectl cordon ""` somewhere.

A value that is one expression alone (`"{{ replicas }}"`) keeps the expression's type (an int
stays an int); anything else renders to a string.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, Undefined, nodes
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

ENV = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False,
                                    keep_trailing_newline=True)


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


@dataclass(frozen=True)
class Reference:
    """A name a template reads: `replicas`, or `steps.<step>.<field>` (field "" when the
    template reads the step's whole output)."""

    name: str
    step: str = ""
    field: str = ""


class TemplateProblem(ValueError):
    """A template that does not parse or compile; `lineno` is the template's own line."""

    def __init__(self, message: str, lineno: int = 1) -> None:
        super().__init__(message)
        self.lineno = lineno


@functools.lru_cache(maxsize=4096)
def parse_template(source: str) -> nodes.Template:
    """The template's tree; `TemplateProblem` when it does not parse or names an unknown
    filter or test (Jinja finds those only when compiling). Cached: runbooks repeat the
    same templates (`{{ node }}`), and compiling is most of a check's time."""
    try:
        tree = ENV.parse(source)
        ENV.compile(tree)
    except TemplateSyntaxError as e:
        raise TemplateProblem(f"template does not parse: {e.message}", e.lineno or 1) from None
    except TemplateError as e:
        raise TemplateProblem(f"template does not compile: {e.message}") from None
    return tree


def parse_expression(source: str) -> nodes.Expr:
    """One Jinja expression (a `when:`), as `compile_expression` reads it; `TemplateProblem`
    when it is not exactly one expression."""
    if is_template(source):
        raise TemplateProblem("`when:` is an expression, not a template: write it without "
                              "`{{ }}`, e.g. `when: evict and dry_run == false`")
    try:
        parser = Parser(ENV, source, state="variable")
        expr = parser.parse_expression()
        if not parser.stream.eos:
            raise TemplateSyntaxError(f"unexpected {parser.stream.current.value!r} after "
                                      "the expression", parser.stream.current.lineno)
        ENV.compile_expression(source)
    except TemplateSyntaxError as e:
        raise TemplateProblem(f"not an expression: {e.message}", e.lineno or 1) from None
    except TemplateError as e:
        raise TemplateProblem(f"not an expression: {e.message}") from None
    return expr


def references(tree: nodes.Node) -> Iterator[Reference]:
    """Every outside name the tree reads (loop variables and `{% set %}` names are its own),
    with `steps.X.Y` chains resolved as far as they are literal."""
    local = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}

    def walk(node: nodes.Node) -> Iterator[Reference]:
        if isinstance(node, nodes.Getattr | nodes.Getitem) and "steps" not in local:
            chain = _chain(node)
            if chain and chain[0] == "steps":
                yield Reference("steps", *(chain[1:3] + ["", ""])[:2])
                inner: nodes.Node = node
                while isinstance(inner, nodes.Getattr | nodes.Getitem):
                    if isinstance(inner, nodes.Getitem):
                        yield from walk(inner.arg)  # a computed key reads names too
                    inner = inner.node
                return
        if isinstance(node, nodes.Name):
            if node.ctx == "load" and node.name not in local:
                yield Reference(node.name)
            return
        for child in node.iter_child_nodes():
            yield from walk(child)

    yield from walk(tree)


def _chain(node: nodes.Node) -> list[str] | None:
    """`steps.a.b` / `steps['a']['b']` -> ["steps", "a", "b"]; None when not a plain chain."""
    parts: list[str] = []
    while isinstance(node, nodes.Getattr | nodes.Getitem):
        if isinstance(node, nodes.Getattr):
            parts.append(node.attr)
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            parts.append(node.arg.value)
        else:
            parts.clear()  # a computed key: only what comes before it is literal
        node = node.node
    if not isinstance(node, nodes.Name):
        return None
    return [node.name, *reversed(parts)]


def render_value(value: Any, context: Mapping[str, Any]) -> Any:
    """A step argument with its templates filled in, lists and mappings walked."""
    if isinstance(value, dict):
        return {k: render_value(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, context) for v in value]
    if not is_template(value):
        return value
    text = value.strip()
    if text.startswith("{{") and text.endswith("}}") and text.count("{{") == 1 \
            and "{%" not in text:
        result = ENV.compile_expression(text[2:-2], undefined_to_none=False)(**context)
        if isinstance(result, Undefined):
            str(result)  # StrictUndefined raises here, naming what is undefined
        return result
    return ENV.from_string(value).render(**context)


def evaluate(expression: str, context: Mapping[str, Any]) -> bool:
    """A `when:` condition's truth."""
    return bool(ENV.compile_expression(expression, undefined_to_none=False)(**context))
