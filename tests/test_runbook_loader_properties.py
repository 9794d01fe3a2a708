"""Property-based tests of the runbook loader (hypothesis): whatever a person types into a
runbook file, `gpuops runbook validate` answers with located problems (`file:line:col`,
inside the file) or loads it, never a traceback; and writing a valid runbook differently
(another YAML style, key order, comments, any description) never makes it an error.

Inputs are mutations of valid runbooks (the shipped library, the valid corpus, the bench's
generated ones): lines deleted, doubled, swapped or re-indented, keys misspelt or
duplicated, values of the wrong type, broken templates, characters cut or inserted, random
text and random bytes. Examples are bounded so the file runs in seconds.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuops.bench.runbooks import valid_runbook
from gpuops.runbooks.loader import RunbookInvalid, load_files, load_texts, shipped_files

CORPUS = Path(__file__).parent / "runbook_corpus" / "valid"
KNOWN = [(str(p), p.read_text()) for p in shipped_files()]
VALID = [*(text for _, text in KNOWN), *(p.read_text() for p in sorted(CORPUS.glob("*.yaml"))),
         *("\n".join(t for t, _ in valid_runbook(i, random.Random(i))) + "\n"
           for i in range(3))]
SOURCE = "rb.yaml"

PROPERTIES = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                      suppress_health_check=[HealthCheck.too_slow])

# Pieces a person gets wrong: YAML punctuation, wrong-typed values, broken or hostile
# templates.
YAML_BITS = [":", ": ", "::", "{", "}", "[", "]", "- ", "-", '"', "'", "|", ">", "&a", "*a",
             "!!python/object:os.system", "!x", "%", "@", "`", "\t", "#", "<<: *a", "? ",
             "---\n", "...\n", "\\", ",", "\x00", "\x1b", "\ufeff", "\u2028", "\x85"]
WRONG_VALUES = ["[1, 2]", "{}", "{a: 1}", "null", "~", "3.5", "-1", "yes", "''", '"x"',
                "2h", "99999999999999999999", ".inf", "2026-12-01", "!!binary aGk="]
TEMPLATES = ["{{", "}}", "{{ }}", "{{ node", "{% if %}", "{% for x in %}", "{# x",
             "{{ nodes }}", "{{ steps.nope.x }}", "{{ node | nosuchfilter }}",
             "{{ ''.__class__.__mro__ }}", "{{ lipsum.__globals__ }}", "{{ 1/0 }}",
             "{{ node is nosuchtest }}", "{{ steps }}", "{{ error }}", "{{ event }}"]


def _located(text: str, load: Any) -> None:
    """`load()` loads, or refuses with problems each at a line and column in `text`."""
    try:
        load()
    except RunbookInvalid as e:
        assert e.problems
        lines = text.splitlines() or [""]
        for p in e.problems:
            assert p.source == SOURCE, p.render()
            assert p.line is not None and p.column is not None, p.render()
            assert 1 <= p.line <= len(lines), (p.render(), len(lines))
            assert 1 <= p.column <= len(lines[p.line - 1]) + 1, p.render()


def _load(text: str) -> None:
    load_texts([(SOURCE, text)], known=KNOWN)


@st.composite
def _edited(draw: st.DrawFn) -> str:
    """A valid runbook after one to four blind edits."""
    lines = draw(st.sampled_from(VALID)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        kind = draw(st.sampled_from(["drop", "double", "swap", "indent", "dedent", "cut",
                                     "insert", "misspell", "retype", "template", "bytes"]))
        if kind == "drop" and len(lines) > 1:
            del lines[i]
        elif kind == "double":  # a duplicated key (or list item)
            lines.insert(i, line)
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], line
        elif kind == "indent":
            lines[i] = " " * draw(st.integers(1, 4)) + line
        elif kind == "dedent":
            lines[i] = line[draw(st.integers(1, 4)):] if line.startswith(" ") else line
        elif kind == "cut" and line:
            j = draw(st.integers(0, len(line) - 1))
            lines[i] = line[:j] + line[j + draw(st.integers(1, 6)):]
        elif kind == "insert":
            j = draw(st.integers(0, len(line)))
            bit = draw(st.sampled_from(YAML_BITS) | st.text(max_size=8))
            lines[i] = line[:j] + bit + line[j:]
        elif kind == "misspell" and ":" in line:
            key, _, rest = line.partition(":")
            j = draw(st.integers(0, len(key)))
            typo = draw(st.sampled_from(["x", "_", "", "-", "Z", key[j:j + 1] * 2]))
            lines[i] = key[:j] + typo + key[j + 1:] + ":" + rest
        elif kind == "retype" and ": " in line:
            lines[i] = line.split(": ", 1)[0] + ": " + draw(st.sampled_from(WRONG_VALUES))
        elif kind == "template" and ": " in line:
            key, _, value = line.partition(": ")
            bad = draw(st.sampled_from(TEMPLATES))
            lines[i] = f'{key}: "{bad}"' if draw(st.booleans()) else f"{key}: {value} {bad}"
        elif kind == "bytes":
            j = draw(st.integers(0, len(line)))
            lines[i] = line[:j] + draw(st.binary(max_size=6)).decode("latin-1") + line[j:]
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n", "\r\n"]))


def _paths(data: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*at, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _paths(value, (*at, i))
    return out


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


@st.composite
def _changed_data(draw: st.DrawFn) -> str:
    """A valid runbook as data, one node deleted, renamed or given a wrong-typed value,
    written back as YAML (so every depth of the format is reached)."""
    data = yaml.safe_load(draw(st.sampled_from(VALID)))
    path = draw(st.sampled_from(_paths(data)[1:]))
    parent, last = _get(data, path[:-1]), path[-1]
    kind = draw(st.sampled_from(["delete", "rename", "retype"]))
    if kind == "delete":
        del parent[last]
    elif kind == "rename" and isinstance(parent, dict):
        parent[f"{last}{draw(st.sampled_from(['x', 's', '_']))}"] = parent.pop(last)
    else:
        parent[last] = draw(st.sampled_from([[], {}, None, 0, -7, 2.5, True, "x", [1, "a"],
                                             {"k": {"v": 1}}, "{{ nope }}", "{% if %}"]))
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=draw(
        st.sampled_from([False, None, True])))


@PROPERTIES
@given(_edited())
def test_a_blindly_edited_runbook_loads_or_gets_located_problems(text):
    _located(text, lambda: _load(text))


@PROPERTIES
@given(_changed_data())
def test_a_runbook_with_a_key_deleted_renamed_or_mistyped_gets_located_problems(text):
    _located(text, lambda: _load(text))


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


@PROPERTIES
@given(st.text(max_size=300) | st.sampled_from(YAML_BITS + TEMPLATES + WRONG_VALUES))
# What hypothesis found, kept: a control character, a tag, an empty document, a value its
# tag refuses, a merge of a scalar, a key that is a list, cyclic and exponential aliases.
@example("\x1fname: x\n")
@example("name: x\nsteps: !0\n")
@example("---")
@example("name: !!int x\n")
@example("a: {<<: 3}\n")
@example("? [a, b]\n: 1\n")
@example("a: &a [*a]\n")
@example(LAUGHS)
def test_any_text_loads_or_gets_located_problems(text):
    _located(text, lambda: _load(text))


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(data=b"name: x\nsteps: \xff\xfe\n")
@given(data=st.binary(max_size=200) | _edited().map(
    lambda t: t.encode("utf-8", "surrogatepass") + b"\xff\xfe\x80"))
def test_a_file_of_random_bytes_gets_located_problems(tmp_path, data):
    path = tmp_path / SOURCE
    path.write_bytes(data)
    text = data.decode("utf-8", "replace")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        _located(text, lambda: load_files([Path(SOURCE)], known=[p for p in shipped_files()]))


@st.composite
def _restyled(draw: st.DrawFn) -> str:
    """A valid runbook written another way: YAML style, indentation, key order, comments,
    quoting, any description text."""
    data = yaml.safe_load(draw(st.sampled_from(VALID)))

    def shuffle(node: Any) -> Any:
        if isinstance(node, dict):
            items = list(node.items())
            order = draw(st.permutations(range(len(items))))
            return {items[i][0]: shuffle(items[i][1]) for i in order}
        if isinstance(node, list):  # steps keep their order: later ones read earlier ones
            return [shuffle(v) for v in node]
        return node

    data = shuffle(data)
    data["description"] = draw(st.text(max_size=80))
    for step in data.get("steps", []):
        if draw(st.booleans()):
            step["description"] = draw(st.text(max_size=40))
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()),
                          indent=draw(st.integers(2, 6)), width=draw(st.integers(20, 200)),
                          default_flow_style=draw(st.sampled_from([False, None, True])),
                          explicit_start=draw(st.booleans()))
    comment = draw(st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc", "Zl",
                                                                         "Zp"]), max_size=30))
    return f"# {comment}\n{text}# the end\n"


@settings(PROPERTIES, max_examples=50)  # each loads completely: the slowest examples
@given(_restyled())
def test_a_valid_runbook_written_another_way_still_loads(text):
    _load(text)  # any RunbookInvalid fails the test with its located problems
