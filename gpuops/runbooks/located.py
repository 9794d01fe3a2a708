"""Pydantic's validation errors as located problems a person can act on (pure).

Pydantic's `loc` also names its own machinery (a union's tag, `function-after[...]`); the
document does not have those parts, so a loc is matched against the data and only the parts
the document has make the field name. An unknown key gets the keys allowed there and the
nearest one ("did you mean"), found by walking the models along the same loc.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from gpuops.runbooks.yamlnodes import Loc, Problem, YamlTree


def dotted(loc: Iterable[str | int]) -> str:
    """`("steps", 2, "args", "node")` -> `steps[2].args.node`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<document>"


def document_loc(data: Any, loc: Iterable[str | int], *, missing: bool = False) -> Loc:
    """The parts of pydantic's `loc` the document has (and, for a `missing` error, the last
    one: the missing key's name is the field)."""
    parts = list(loc)
    out: list[str | int] = []
    node = data
    for i, part in enumerate(parts):
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            node = node[part]
            out.append(part)
        elif missing and i == len(parts) - 1:
            out.append(part)
    return tuple(out)


def _close_key(data: Any, loc: Loc, wanted: str) -> str | None:
    """A key of the mapping at `loc` that looks like a misspelt `wanted`."""
    node = data
    for part in loc:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    if not isinstance(node, dict):
        return None
    close = difflib.get_close_matches(wanted, [str(k) for k in node], n=1, cutoff=0.6)
    return close[0] if close else None


def allowed_keys(model: type[BaseModel], loc: Iterable[str | int]) -> list[str] | None:
    """The keys the model allows at the mapping `loc` ends in (None when not a model)."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return None
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def _unwrap(tp: Any) -> Any:
    """Through `Annotated[...]` and `X | None` to the type itself."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _step(tp: Any, part: str | int) -> Any:
    tp = _unwrap(tp)
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(part))
        return field.annotation if field is not None else None
    if origin is list and isinstance(part, int):
        return typing.get_args(tp)[0]
    if origin is dict:
        return typing.get_args(tp)[1]
    if origin in (typing.Union, types.UnionType):  # a discriminated union: part is the tag
        for arg in typing.get_args(tp):
            arg = _unwrap(arg)
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                tag = arg.model_fields.get("type")
                if tag is not None and part in typing.get_args(tag.annotation):
                    return arg
    return None


def unknown_key_message(key: str, allowed: list[str] | None, what: str = "key",
                        where: str = "") -> str:
    message = f"unknown {what} {key!r}{where}"
    if allowed:
        close = difflib.get_close_matches(key, allowed, n=1)
        message += f"; did you mean {close[0]!r}?" if close else \
            f"; allowed here: {', '.join(allowed)}"
    return message


def problems_from(error: ValidationError, tree: YamlTree, model: type[BaseModel], *,
                  data: Any = None, prefix: Loc = (), what: str = "key") -> list[Problem]:
    """Every error of `error` (validating `data`, found at `prefix` in the document) as a
    located problem; one per location (a union reports each branch)."""
    data = tree.data if data is None else data
    problems: dict[Loc, Problem] = {}
    for e in error.errors():
        raw_loc = tuple(e["loc"])
        loc = document_loc(data, raw_loc, missing=e["type"] == "missing")
        message = _message(e, raw_loc, loc, model, what)
        at = (*prefix, *loc)
        if e["type"] == "union_tag_not_found":
            misspelt = _close_key(data, loc, "type")
            if misspelt is not None:  # `tpe: node`: the typo is what to fix
                at = (*at, misspelt)
                problems.setdefault(at, tree.problem(
                    at, dotted(at), unknown_key_message(misspelt, ["type"]), value=False))
                continue
        if e["type"] == "union_tag_invalid":
            at = (*at, "type")
        elif e["type"] == "missing" and loc:
            at = (*prefix, *loc[:-1])  # the mapping that lacks the key
        if at in problems:
            continue
        value = e["type"] not in ("missing", "extra_forbidden", "union_tag_not_found")
        name = dotted(at if e["type"] == "union_tag_invalid" else (*prefix, *loc))
        problem = tree.problem(at, name, message, value=value)
        problems[at] = problem
    return list(problems.values())


def _message(e: Any, raw_loc: Loc, loc: Loc, model: type[BaseModel], what: str) -> str:
    kind = e["type"]
    if kind == "extra_forbidden":
        return unknown_key_message(str(loc[-1]), allowed_keys(model, raw_loc[:-1]), what)
    if kind == "missing":
        return f"missing {what} {loc[-1]!r} (required)" if loc else "missing (required)"
    if kind == "union_tag_invalid":
        tags = e.get("ctx", {}).get("expected_tags", "")
        return f"unknown type {e.get('ctx', {}).get('tag')!r}; one of: " + \
            str(tags).replace("'", "")
    if kind == "union_tag_not_found":
        return "missing key 'type' (required): say which type of parameter this is"
    message = str(e["msg"])
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    return message
