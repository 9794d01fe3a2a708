"""Load runbooks from YAML files, validating everything at once.

A file's problems come all together, each `file:line:col: field: message` with the offending
line under it: YAML syntax, duplicate keys, the format's models (unknown keys are never
ignored), then what check.py sees (actions, arguments, templates, conditions, defaults), then
what only the set of runbooks shows (two runbooks of one name, a `run-runbook` of a runbook
that does not exist, runbooks running each other in a cycle). A runbook with any problem is
not returned at all, so none runs even partly.

The file read is the only I/O here; `load_texts` does the rest on text already read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gpuops.common.errors import PermanentError
from gpuops.runbooks.catalog import CATALOG
from gpuops.runbooks.check import RunbookCalls, check_runbook
from gpuops.runbooks.located import dotted, problems_from
from gpuops.runbooks.registry import ActionCatalog, Registry
from gpuops.runbooks.schema import Runbook
from gpuops.runbooks.yamlnodes import (
    Loc,
    Problem,
    YamlSyntaxError,
    YamlTree,
    parse,
    position_in,
)

LIBRARY = Path(__file__).parent / "library"


class RunbookInvalid(PermanentError):
    """One or more runbooks have problems; `problems` has each, located."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("\n".join(p.render() for p in problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class LoadedRunbook:
    runbook: Runbook
    source: str
    calls: tuple[str, ...]  # the runbooks it runs


@dataclass
class _Parsed:
    source: str
    tree: YamlTree | None
    runbook: Runbook | None
    problems: list[Problem]
    calls: RunbookCalls


def shipped_files() -> list[Path]:
    return sorted(LIBRARY.glob("*.yaml"))


def load_files(paths: Iterable[Path | str], *, catalog: ActionCatalog = CATALOG,
               known: Iterable[Path | str] = ()) -> Registry[LoadedRunbook]:
    """The runbooks in `paths`, or `RunbookInvalid` with every problem. `known`: more files
    (e.g. the shipped library) a `run-runbook` may name; their own problems are not reported
    unless they are also in `paths`."""
    read = [_read(p) for p in paths]
    unreadable = [problem for _, _, problem in read if problem is not None]
    wanted = [(source, text) for source, text, problem in read if problem is None]
    others = [(str(p), text) for p in known if str(p) not in {str(w) for w in paths}
              for _, text, problem in [_read(p)] if problem is None]
    try:
        registry = load_texts(wanted, catalog=catalog, known=others)
    except RunbookInvalid as e:
        raise RunbookInvalid(_sorted([*unreadable, *e.problems])) from None
    if unreadable:
        raise RunbookInvalid(unreadable)
    return registry


def _read(path: Path | str) -> tuple[str, str, Problem | None]:
    """(source, text, None), or the problem that the file is not UTF-8 text, at the first
    byte that is not."""
    data = Path(path).read_bytes()
    try:
        return str(path), data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        text = data.decode("utf-8", "replace")
        line, column = position_in(text, len(data[:e.start].decode("utf-8", "replace")))
        shown = text.splitlines()[line - 1] if line <= len(text.splitlines()) else ""
        return str(path), "", Problem(str(path), line, column, "<file>", "not UTF-8 text: "
                                      f"byte 0x{data[e.start]:02x} cannot be read (save "
                                      "the file as UTF-8)", shown.rstrip())


def _sorted(problems: Iterable[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.source, p.line or 0, p.column or 0))


def load_texts(texts: Iterable[tuple[str, str]], *, catalog: ActionCatalog = CATALOG,
               known: Iterable[tuple[str, str]] = ()) -> Registry[LoadedRunbook]:
    """`load_files` on (source, text) pairs already read."""
    parsed = [parse_one(text, source, catalog) for source, text in texts]
    extra = [p for p in (parse_one(text, source, catalog) for source, text in known)
             if p.runbook is not None]
    problems = [pr for p in parsed for pr in p.problems]
    problems += _across(parsed, extra)
    if problems:
        raise RunbookInvalid(_sorted(problems))
    registry: Registry[LoadedRunbook] = Registry("runbook")
    for p in parsed:
        assert p.runbook is not None
        registry.add(p.runbook.name, LoadedRunbook(
            p.runbook, p.source, tuple(name for name, _ in p.calls.calls)), origin=p.source)
    return registry


def parse_one(text: str, source: str, catalog: ActionCatalog = CATALOG) -> _Parsed:
    """One runbook's own problems (all of them) and, when it has none, the runbook."""
    try:
        tree = parse(text, source)
    except YamlSyntaxError as e:
        return _Parsed(source, None, None, [e.problem], RunbookCalls())
    problems = [tree.problem(loc, dotted(loc), f"duplicate key {loc[-1]!r} (first at line "
                             f"{first[0]}); YAML would silently keep one of them", at=at)
                for loc, at, first in tree.duplicates]
    if not isinstance(tree.data, dict):
        problems.append(tree.problem((), "<document>", "a runbook is a mapping with `name:`, "
                                     "`steps:` and more; this document is not one"))
        return _Parsed(source, tree, None, problems, RunbookCalls())
    runbook = None
    try:
        runbook = Runbook.model_validate(tree.data)
    except ValidationError as e:
        problems += problems_from(e, tree, Runbook)
    checked, calls = check_runbook(tree, catalog)
    problems += checked
    return _Parsed(source, tree, runbook if not problems else None, _unique(problems), calls)


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: set[tuple[int | None, int | None, str, str]] = set()
    out = []
    for p in problems:
        key = (p.line, p.column, p.field, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _across(parsed: list[_Parsed], known: list[_Parsed]) -> list[Problem]:
    """Problems only the set shows: one name twice, a call of no runbook, a cycle."""
    problems: list[Problem] = []
    by_name: dict[str, _Parsed] = {}
    for p in parsed:
        name = p.tree.data.get("name") if p.tree is not None and isinstance(
            p.tree.data, dict) else None
        if not isinstance(name, str):
            continue
        if name in by_name and p.tree is not None:
            problems.append(p.tree.problem(("name",), "name", f"runbook {name!r} is already "
                                           f"defined in {by_name[name].source}",
                                           value=True))
            continue
        by_name[name] = p
    for p in known:
        if p.runbook is not None:
            by_name.setdefault(p.runbook.name, p)
    graph: Mapping[str, list[tuple[str, Loc]]] = {n: p.calls.calls for n, p in by_name.items()}
    for p in parsed:
        if p.tree is None:
            continue
        for target, loc in p.calls.calls:
            if target not in by_name:
                problems.append(p.tree.problem(loc, dotted(loc), f"no runbook named "
                                               f"{target!r} (known: "
                                               f"{', '.join(sorted(by_name)) or 'none'})",
                                               value=True))
    own = {id(p) for p in parsed}
    for cycle in _cycles(graph):
        for i, name in enumerate(cycle[:-1]):
            p = by_name[name]
            if id(p) not in own or p.tree is None:
                continue
            loc = next(loc for target, loc in p.calls.calls if target == cycle[i + 1])
            problems.append(p.tree.problem(loc, dotted(loc), "runbooks run each other in "
                                           f"a cycle: {' -> '.join(cycle)}", value=True))
    return problems


def _cycles(graph: Mapping[str, list[tuple[str, Loc]]]) -> list[list[str]]:
    """Each elementary cycle once, as [a, b, ..., a], starting at its smallest name."""
    found: set[tuple[str, ...]] = set()
    out: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for target, _ in graph.get(node, []):
            if target == path[0]:
                cycle = tuple(path)
                if cycle not in found and min(cycle) == cycle[0]:
                    found.add(cycle)
                    out.append([*path, target])
            elif target not in path and target in graph and target > path[0]:
                visit(target, [*path, target])

    for start in sorted(graph):
        visit(start, [start])
    return out
