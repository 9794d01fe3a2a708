"""YAML that remembers where each value came from, so a bad file's error names field and line.

DESIGN.md asks that bad input names the field and, for YAML, the line. Parsing with
`yaml.safe_load` loses positions, so files are composed to nodes first (which keep their
marks), constructed from those nodes, and a validation error's location (`loc`, as pydantic
reports it) is walked back through the node tree to a line number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from gpuops.common.errors import ConfigError

Loc = Sequence[str | int]


@dataclass(frozen=True)
class YamlDocument:
    """Plain data parsed from YAML, with the node tree that knows each value's line."""

    data: Any
    root: yaml.Node | None
    source: str | None = None

    def line_of(self, loc: Loc) -> int | None:
        """1-based line of the deepest node `loc` reaches (a key's line when it ends on a key)."""
        position = self.position_of(loc)
        return None if position is None else position[0]

    def position_of(self, loc: Loc) -> tuple[int, int] | None:
        """1-based (line, column) of the deepest node `loc` reaches (a key's when it ends on
        a key)."""
        node = self.root
        if node is None:
            return None
        mark = node.start_mark
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                pair = next(((k, v) for k, v in node.value
                             if isinstance(k, yaml.ScalarNode) and k.value == str(part)), None)
                if pair is None:
                    break
                mark, node = pair[0].start_mark, pair[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    break
                node = node.value[part]
                mark = node.start_mark
            else:
                break
        return mark.line + 1, mark.column + 1

    def config_error(self, error: ValidationError, *, wrapper: Loc = (),
                     hint: str = "") -> ConfigError:
        """The first validation error as a `ConfigError` naming the field and its line.

        `wrapper` is a location prefix the validated object has but the document has not
        (a bare list validated as `{"rules": [...]}`): kept in the field name, skipped when
        looking up the line. `hint` is added to "unknown field" errors."""
        errors = ordered_errors(error)
        first = errors[0]
        loc = list(first["loc"])
        doc_loc = loc[len(wrapper):] if loc[:len(wrapper)] == list(wrapper) else loc
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unknown field" + (f"; {hint}" if hint else "")
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})"
        line, column = self.position_of(doc_loc) or (None, None)
        return ConfigError(dotted_field(loc), message, line=line, column=column,
                           source=self.source)


def ordered_errors(error: ValidationError) -> list[Any]:
    """Pydantic's errors, the most telling first: a misspelt key shows as "unknown field"
    *and* "field required", and the typo is what the person has to fix."""
    return sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden")


def dotted_field(loc: Loc) -> str:
    """`("rules", 2, "when", "log_regex", 0)` -> `rules[2].when.log_regex[0]`.

    Pydantic's internal tags (`function-after[...]`, `list[str]`) are dropped: a person
    reading the error knows the file, not pydantic's validator chain."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or "(" in part:
            continue
        else:
            out += ("." if out else "") + part
    return out or "<document>"


def parse_yaml(text: str, *, source: str | None = None) -> YamlDocument:
    """Parse one YAML document, keeping its node tree; a syntax error names its line."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise ConfigError("<yaml>", f"not valid YAML: {e.problem or 'syntax error'}",
                          line=mark.line + 1 if mark else None,
                          column=mark.column + 1 if mark else None, source=source) from None
    except yaml.YAMLError:
        # Not PyYAML's message: it may quote the text, which may hold a secret.
        raise ConfigError("<yaml>", "not valid YAML", source=source) from None
    finally:
        loader.dispose()
    return YamlDocument(data, root, source)
