"""Tables of custom resources, as the apiextensions server prints them: NAME, then the
version's `additionalPrinterColumns` (each a JSONPath into the object, typed `string`,
`integer`, `number`, `boolean` or `date`), or AGE alone when the CRD declares none. Also the
generic table of built-in resources without a printer of their own (NAME, CREATED AT).

The JSONPaths are the simple ones CRDs use: `.a.b`, `[0]`, `[*]`, `['a.b']` and filters
`[?(@.type=="Ready")]`. As upstream, a column shows the first value its path selects (none:
an empty cell), and a `string` column prints lists and maps as compact JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .base import AGE_DOC, NAME, Cells, Column, Obj, Printer, epoch, human_duration, name

CREATED_AT = Column("Created At", "date", AGE_DOC)
DEFAULT_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                      "description": AGE_DOC}

# Resources simcluster serves as built-ins that are CRDs on a real cluster: the printer
# columns their upstream CRDs declare (InferencePool v1 declares none: NAME AGE).
UPSTREAM_COLUMNS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("inference.networking.k8s.io", "InferencePool"): [],
    ("gateway.networking.k8s.io", "HTTPRoute"): [
        {"name": "Hostnames", "type": "string", "jsonPath": ".spec.hostnames"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
    ("gateway.networking.k8s.io", "Gateway"): [
        {"name": "Class", "type": "string", "jsonPath": ".spec.gatewayClassName"},
        {"name": "Address", "type": "string", "jsonPath": ".status.addresses[*].value"},
        {"name": "Programmed", "type": "string",
         "jsonPath": '.status.conditions[?(@.type=="Programmed")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): [
        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
         "description": "Number of ready replicas"},
        {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas",
         "description": "Number of desired replicas"},
        {"name": "Up-to-date", "type": "integer", "jsonPath": ".status.updatedReplicas",
         "description": "Number of up-to-date replicas"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
}


class JsonPathError(ValueError):
    pass


@dataclass(frozen=True)
class _Field:
    name: str


@dataclass(frozen=True)
class _Index:
    index: int | None  # None: every element


@dataclass(frozen=True)
class _Filter:
    path: tuple[str, ...]
    value: Any


_Step = _Field | _Index | _Filter
_TOKEN = re.compile(
    r"""\.(?P<field>[^.\[\]]+)"""
    r"""|\[(?P<index>-?\d+|\*)\]"""
    r"""|\[['"](?P<quoted>[^'"]+)['"]\]"""
    r"""|\[\?\(@(?P<fpath>(?:\.[^.=!<>()\s]+)+)\s*==\s*(?P<fvalue>"[^"]*"|'[^']*'|[^)\s]+)\)\]""")


def compile_path(path: str) -> tuple[_Step, ...]:
    """The steps of a CRD column's JSONPath (`{...}` braces allowed); JsonPathError names what
    is not supported."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    steps: list[_Step] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise JsonPathError(f"unsupported JSONPath {path!r} at {text[pos:]!r}")
        if m["field"] is not None:
            steps.append(_Field(m["field"]))
        elif m["quoted"] is not None:
            steps.append(_Field(m["quoted"]))
        elif m["index"] is not None:
            steps.append(_Index(None if m["index"] == "*" else int(m["index"])))
        else:
            steps.append(_Filter(tuple(m["fpath"].split(".")[1:]), _literal(m["fvalue"])))
        pos = m.end()
    return tuple(steps)


def _literal(text: str) -> Any:
    if text[:1] in "\"'":
        return text[1:-1]
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def first_match(obj: Any, steps: tuple[_Step, ...]) -> Any:
    """The first value the path selects, or None."""
    return next(_walk(obj, steps), None)


def _walk(value: Any, steps: tuple[_Step, ...]) -> Iterator[Any]:
    if not steps:
        yield value
        return
    step, rest = steps[0], steps[1:]
    if isinstance(step, _Field):
        if isinstance(value, dict) and step.name in value:
            yield from _walk(value[step.name], rest)
    elif isinstance(step, _Index):
        if isinstance(value, list):
            if step.index is None:
                for item in value:
                    yield from _walk(item, rest)
            elif -len(value) <= step.index < len(value):
                yield from _walk(value[step.index], rest)
    elif isinstance(value, list):
        for item in value:
            found = item
            for key in step.path:
                found = found.get(key) if isinstance(found, dict) else None
            if found == step.value:
                yield from _walk(item, rest)


def cell(kind: str, value: Any, now: float) -> Any:
    """A value as its column type shows it (`cellForJSONValue`); None when it is not one."""
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (dict, list)):
            return orjson.dumps(value).decode()
        return str(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        at = epoch(value)
        return "<invalid>" if at is None else human_duration(now - at)
    return None


def crd_printer(columns: list[dict[str, Any]]) -> Printer:
    """NAME and the given `additionalPrinterColumns` (AGE when there are none). A column whose
    path cannot be read shows empty cells, rather than failing every table of the resource."""
    specs = columns or [DEFAULT_AGE_COLUMN]
    compiled: list[tuple[str, tuple[_Step, ...] | None]] = []
    defs = [NAME]
    for spec in specs:
        path = str(spec.get("jsonPath", ""))
        try:
            steps: tuple[_Step, ...] | None = compile_path(path)
        except JsonPathError:
            steps = None
        kind = str(spec.get("type", "string"))
        compiled.append((kind, steps))
        defs.append(Column(str(spec.get("name", "")), kind,
                           str(spec.get("description") or "Custom resource definition column "
                               f"(in JSONPath format): {path}"),
                           int(spec.get("priority") or 0), str(spec.get("format") or "")))

    def cells(obj: Obj, now: float) -> Cells:
        return [name(obj), *(None if steps is None else cell(kind, first_match(obj, steps), now)
                             for kind, steps in compiled)]

    return Printer(tuple(defs), cells)


def crd_columns(crd: Obj, version: str) -> list[dict[str, Any]]:
    """The `additionalPrinterColumns` a CustomResourceDefinition declares for a version."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version:
            return list(v.get("additionalPrinterColumns") or [])
    return []


def _created_at(obj: Obj, now: float) -> Cells:
    return [name(obj), (obj.get("metadata") or {}).get("creationTimestamp")]


# kube-apiserver's default table (rest.NewDefaultTableConvertor), for built-ins without one
DEFAULT = Printer((NAME, CREATED_AT), _created_at)
