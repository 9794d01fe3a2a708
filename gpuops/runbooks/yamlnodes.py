"""A runbook's YAML as plain data plus where every key and value stands (pure).

Why not `yaml.safe_load`: it forgets positions and keeps the last of two equal keys without a
word (a misspelt copy of `args:` silently replaces the first). Composing to nodes keeps each
node's mark; walking the nodes ourselves sees every duplicate key. PyYAML is already a
dependency (common/yamlsource.py composes the same way for the rule files).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

Loc = tuple[str | int, ...]
Position = tuple[int, int]  # 1-based line, column
MAX_VALUES = 20_000  # a runbook has hundreds; more is aliases expanding (a "billion laughs")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a runbook, where it is and what to do about it."""

    source: str
    line: int | None
    column: int | None
    field: str
    message: str
    text: str = ""  # the offending line, shown under the message

    def located(self) -> str:
        """`file:line:col: field: message` (what compilers and editors understand)."""
        where = self.source
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        return f"{where}: {self.field}: {self.message}"

    def render(self) -> str:
        """The located line, then the offending line with a caret under the column."""
        if not self.text:
            return self.located()
        caret = " " * (max(self.column or 1, 1) - 1) + "^ here"
        return f"{self.located()}\n    {self.text}\n    {caret}"


@dataclass
class YamlTree:
    """Plain data from one YAML document and the positions of its keys and values."""

    data: Any
    source: str
    lines: Sequence[str]
    keys: dict[Loc, Position] = field(default_factory=dict)
    values: dict[Loc, Position] = field(default_factory=dict)
    block_scalars: set[Loc] = field(default_factory=set)  # `|` / `>` values: text starts below
    duplicates: list[tuple[Loc, Position, Position]] = field(default_factory=list)

    def position(self, loc: Loc, *, value: bool = False) -> Position:
        """Where `loc` is: its key (or, with `value`, its value); for a loc the document does
        not have (a missing key), the deepest part that exists."""
        table = self.values if value else self.keys
        for end in range(len(loc), -1, -1):
            prefix = loc[:end]
            if prefix in table:
                return table[prefix]
            if prefix in self.values:
                return self.values[prefix]
        return (1, 1)

    def line_text(self, line: int) -> str:
        return self.lines[line - 1].rstrip() if 0 < line <= len(self.lines) else ""

    def problem(self, loc: Loc, field_name: str, message: str, *, value: bool = False,
                line_offset: int = 0, at: Position | None = None, find: str = "") -> Problem:
        """A problem at `loc`. `line_offset`: the line within a `|`/`>` value the problem
        is on; `find`: a word to point at inside the value (a template's unknown name)."""
        line, column = within(self.lines, *(at or self.position(loc, value=value)))
        if line_offset:
            line, column = line + line_offset, 1
        text = self.line_text(line)
        if line_offset:
            column = len(text) - len(text.lstrip()) + 1
        if find:
            line, column = self._find(line, column, find, block=loc in self.block_scalars)
            text = self.line_text(line)
        return Problem(self.source, line, column, field_name, message, text)

    def _find(self, line: int, column: int, word: str, *, block: bool) -> Position:
        """The first whole `word` at or after (line, column), within the value's lines."""
        pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])")
        first = self.line_text(line)
        match = pattern.search(first, column - 1)
        if match:
            return line, match.start() + 1
        if block:  # the value's text starts on the next line and is indented
            indent = len(first) - len(first.lstrip())
            for n in range(line + 1, len(self.lines) + 1):
                text = self.line_text(n)
                if text.strip() and len(text) - len(text.lstrip()) <= indent:
                    break
                match = pattern.search(text)
                if match:
                    return n, match.start() + 1
        return line, column


# libyaml's parser when PyYAML has it (several times faster; its marks are the same).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlSyntaxError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.located())
        self.problem = problem


def parse(text: str, source: str) -> YamlTree:
    """One YAML document as a `YamlTree`; a syntax error (or several documents) raises
    `YamlSyntaxError` naming its line."""
    lines = text.splitlines()
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at_end = e.problem_mark is not None and e.problem_mark.index >= len(text.rstrip())
        if e.context_mark is not None and at_end:
            # Nothing closed what was opened: where it was opened is the line to fix.
            mark = e.context_mark
        line = mark.line + 1 if mark else None
        column = mark.column + 1 if mark else None
        message = "not valid YAML: " + (e.problem or "syntax error")
        if line and any(word in (e.problem or "") for word in ("expected key", "block end")):
            line, column = _misindented(lines, line, column)
            message += " (check this line's indentation against its neighbours')"
        if "expected a single document" in str(e.problem):
            message = "one runbook per file: a second YAML document starts here"
        if line is not None:
            line, column = within(lines, line, column or 1)
        text_line = lines[line - 1].rstrip() if line and 0 < line <= len(lines) else ""
        raise YamlSyntaxError(Problem(source, line, column, "<yaml>", message,
                                      text_line)) from None
    except yaml.reader.ReaderError as e:
        # A character YAML does not allow; libyaml counts its position in UTF-8 bytes, so
        # find it again as YAML's reader defines it.
        found = yaml.reader.Reader.NON_PRINTABLE.search(text)
        line, column = position_in(text, found.start() if found else 0)
        bad = found.group() if found else chr(e.character) if isinstance(e.character, int) \
            else str(e.character)
        raise YamlSyntaxError(Problem(
            source, line, column, "<yaml>", f"not valid YAML: the character U+{ord(bad):04X} "
            f"({unicodedata.name(bad, 'a control character')}) is not allowed; delete it",
            lines[line - 1].rstrip() if line <= len(lines) else "")) from None
    except yaml.YAMLError as e:
        raise YamlSyntaxError(Problem(source, 1, 1, "<yaml>", f"not valid YAML: {e}",
                                      lines[0] if lines else "")) from None
    finally:
        loader.dispose()
    tree = YamlTree(None, source, lines)
    if root is not None:
        constructor = yaml.SafeLoader("")
        try:
            tree.data = _build(root, (), tree, constructor)
        except _Unbuildable as e:
            line, column = within(lines, *e.at)
            raise YamlSyntaxError(Problem(source, line, column, "<yaml>",
                                          f"not valid YAML: {e}", tree.line_text(line))
                                  ) from None
        finally:
            constructor.dispose()
    return tree


def within(lines: Sequence[str], line: int, column: int) -> Position:
    """(line, column) moved inside the file: the parser marks the end of the text one line
    past the last (after its line break); that is the end of the last line."""
    if line > len(lines):
        return max(len(lines), 1), len(lines[-1].rstrip("\r\n")) + 1 if lines else 1
    return line, column


def position_in(text: str, index: int) -> Position:
    """The 1-based line and column of `text[index]`, lines counted as `splitlines` does."""
    before = text[:index].splitlines(keepends=True)
    if not before:
        return 1, 1
    if before[-1].splitlines()[0:1] != [before[-1]]:  # ends with its line break
        return len(before) + 1, 1
    return len(before), len(before[-1]) + 1


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def _misindented(lines: Sequence[str], line: int, column: int | None) -> tuple[int, int | None]:
    """Where an indentation mistake most likely is. The parser notices it on the line after
    a block's first line when the two disagree: of the two, the one whose indentation is
    not a multiple of the file's step (its smallest indentation) is taken as the mistake."""
    above = next((n for n in range(line - 1, 0, -1) if lines[n - 1].strip()), None)
    if above is None or line > len(lines):
        return line, column
    step = min((_indent(t) for t in lines if t.strip() and _indent(t)), default=2)
    odd_here = _indent(lines[line - 1]) % step != 0
    odd_above = _indent(lines[above - 1]) % step != 0
    if odd_above and not odd_here:
        return above, _indent(lines[above - 1]) + 1
    return line, column


class _Unbuildable(Exception):
    """A node safe YAML cannot make a value of: a tag (`!x`, `!!python/...`), or a
    value its tag refuses (`!!int x`)."""

    def __init__(self, message: str, at: Position) -> None:
        super().__init__(message)
        self.at = at


def _construct(node: yaml.Node, constructor: yaml.SafeLoader) -> Any:
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        what = e.problem or "this value cannot be read"
        if "constructor for the tag" in what:
            what += " (runbooks are plain YAML: no tags)"
        raise _Unbuildable(what, (mark.line + 1, mark.column + 1) if mark
                           else _mark(node)) from None
    except (ValueError, TypeError, OverflowError, ArithmeticError) as e:
        raise _Unbuildable(f"{node.tag.rsplit(':', 1)[-1]} value {node.value!r} cannot "
                           f"be read ({e})" if isinstance(node, yaml.ScalarNode)
                           else f"this value cannot be read ({e})", _mark(node)) from None


def _mark(node: yaml.Node) -> Position:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _build(node: yaml.Node, loc: Loc, tree: YamlTree, constructor: yaml.SafeLoader,
           inside: frozenset[int] = frozenset()) -> Any:
    """Plain data from `node`, noting positions. `inside`: the nodes being built around
    this one (an alias back to one of them is a cycle)."""
    tree.values.setdefault(loc, _mark(node))
    if len(tree.values) > MAX_VALUES:  # aliases of aliases grow exponentially
        raise _Unbuildable(f"more than {MAX_VALUES:,} values (aliases that expand into "
                           "each other?)", _mark(node))
    if id(node) in inside:
        raise _Unbuildable("an alias refers to a value that contains it (a cycle)",
                           _mark(node))
    inside = inside | {id(node)}
    if isinstance(node, yaml.MappingNode):
        try:
            constructor.flatten_mapping(node)  # `<<:` merge keys, as safe_load does
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            raise _Unbuildable(e.problem or "a `<<:` merge that cannot be made",
                               (mark.line + 1, mark.column + 1) if mark else _mark(node)
                               ) from None
        out: dict[Any, Any] = {}
        first: dict[Any, Position] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Unbuildable("a key must be a plain value, not a list or mapping",
                                   _mark(key_node))
            key = _construct(key_node, constructor)
            if not isinstance(key, str | int | float | bool) and key is not None:
                key = str(key)
            child = (*loc, key if isinstance(key, str | int) else str(key))
            if key in first:
                tree.duplicates.append((child, _mark(key_node), first[key]))
                continue  # the first stays: the second is the mistake shown
            first[key] = _mark(key_node)
            tree.keys[child] = _mark(key_node)
            out[key] = _build(value_node, child, tree, constructor, inside)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            tree.keys[(*loc, i)] = _mark(item)
            items.append(_build(item, (*loc, i), tree, constructor, inside))
        return items
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        tree.block_scalars.add(loc)
    return _construct(node, constructor)
