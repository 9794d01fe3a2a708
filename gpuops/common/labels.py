"""Kubernetes label selectors (`app=web,tier in (a,b),!canary`): parse once, match many times.

One grammar for every place gpuops reads a selector: the simulated API server's
`labelSelector` (simcluster answers 400 with this module's message) and the restart policy's
`pod_label_selector`. Two hand-written parsers used to disagree on the corners (`in ()`,
a trailing comma); this one follows `labels.Parse` in k8s.io/apimachinery there:

- `key=value`, `key==value`, `key!=value` (the value may be empty: `key=`);
- `key in (a,b)`, `key notin (a,b)`; an empty entry is the empty value (`()`, `(a,)`);
- `key` (exists), `!key` (does not exist);
- requirements joined by `,` are ANDed; blanks between tokens are ignored;
- anything else is a `LabelSelectorError` naming the selector.

Label keys and values are not checked against the label syntax (length, characters).
Pure: text in, plain data out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gpuops.common.errors import PermanentError

Op = Literal["=", "!=", "in", "notin", "exists", "!exists"]

_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|[^\s!=(),]+)")
_PUNCTUATION = frozenset({"!=", "==", "=", "!", "(", ")", ","})


class LabelSelectorError(PermanentError, ValueError):
    """A label selector that does not parse. A ValueError too, so a pydantic validator that
    calls `parse_label_selector` reports it as a validation error."""

    def __init__(self, selector: str, problem: str) -> None:
        super().__init__(f"unable to parse requirement: {problem} in label selector "
                         f"{selector!r}")
        self.selector = selector
        self.problem = problem


@dataclass(frozen=True)
class Requirement:
    """One term of a selector; `values` holds one value for `=` and `!=`, none for exists."""

    key: str
    op: Op
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # != and notin


def labels_match(reqs: list[Requirement], labels: dict[str, str] | None) -> bool:
    """All requirements hold (an empty selector matches every object)."""
    labels = labels or {}
    return all(r.matches(labels) for r in reqs)


def parse_label_selector(text: str | None) -> list[Requirement]:
    """The requirements of a selector string; empty or blank text selects everything."""
    if not text:
        return []
    tokens = _TOKEN.findall(text)
    reqs: list[Requirement] = []
    i = 0

    def fail(problem: str) -> LabelSelectorError:
        return LabelSelectorError(text, problem)

    def key_at(j: int) -> str:
        if j >= len(tokens) or tokens[j] in _PUNCTUATION:
            found = tokens[j] if j < len(tokens) else ""
            raise fail(f"found {found!r}, expected: a label key")
        return str(tokens[j])

    while i < len(tokens):
        if tokens[i] == "!":
            reqs.append(Requirement(key_at(i + 1), "!exists"))
            i += 2
        else:
            key = key_at(i)
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
                i += 1
            elif nxt in ("=", "==", "!="):
                if i + 2 >= len(tokens) or tokens[i + 2] == ",":
                    value = ""
                    i += 2
                else:
                    value = tokens[i + 2]
                    i += 3
                reqs.append(Requirement(key, "!=" if nxt == "!=" else "=", frozenset([value])))
            elif nxt in ("in", "notin"):
                if i + 2 >= len(tokens) or tokens[i + 2] != "(":
                    raise fail(f"expected '(' after {nxt!r}")
                try:
                    close = tokens.index(")", i + 3)
                except ValueError:
                    raise fail("missing ')'") from None
                op: Op = "in" if nxt == "in" else "notin"
                reqs.append(Requirement(key, op, _value_set(tokens[i + 3:close], fail)))
                i = close + 1
            else:
                raise fail(f"unexpected {nxt!r} after key {key!r}")
        if i < len(tokens):
            if tokens[i] != ",":
                raise fail(f"expected ',' but found {tokens[i]!r}")
            i += 1
            if i == len(tokens):
                raise fail("expected a requirement after the last ','")
    return reqs


def _value_set(tokens: list[str], fail: Callable[[str], LabelSelectorError]) -> frozenset[str]:
    """The values between `(` and `)`: comma-separated, each one token or empty."""
    values: set[str] = set()
    entry: list[str] = []
    for tok in [*tokens, ","]:
        if tok != ",":
            entry.append(tok)
            continue
        if len(entry) > 1 or (entry and entry[0] in _PUNCTUATION):
            raise fail(f"expected one value between ',' and ')', found {' '.join(entry)!r}")
        values.add(entry[0] if entry else "")
        entry = []
    return frozenset(values)
