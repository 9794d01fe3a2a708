"""Runbook files: every authoring mistake is reported where it is, all at once; valid
runbooks load; registries refuse duplicates; the shipped JSON Schema is the models' own."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from gpuops.deployments.cli import app
from gpuops.runbooks.catalog import CATALOG, Args, Changed
from gpuops.runbooks.loader import RunbookInvalid, load_files, load_texts, shipped_files
from gpuops.runbooks.registry import ActionCatalog, ActionSpec, DuplicateRegistration, Registry
from gpuops.runbooks.schema_export import SCHEMA_FILE, runbook_schema, schema_text
from gpuops.runbooks.templates import render_value

CORPUS = Path(__file__).parent / "runbook_corpus"
BROKEN = sorted((CORPUS / "broken").glob("*.yaml"))
VALID = sorted((CORPUS / "valid").glob("*.yaml"))
EXPECT = re.compile(r"# expect: (\d+):(\d+) (.+)")
runner = CliRunner()


def _expectations(path: Path) -> list[str]:
    """`# expect: L:C field: message` lines -> `path:L:C: field: message` prefixes."""
    out = []
    for line in path.read_text().splitlines():
        match = EXPECT.fullmatch(line)
        if match:
            out.append(f"{path}:{match.group(1)}:{match.group(2)}: {match.group(3)}")
    assert out, f"{path} has no `# expect:` line"
    return out


def _problems(*paths: Path) -> RunbookInvalid:
    with pytest.raises(RunbookInvalid) as caught:
        load_files(paths, known=shipped_files())
    return caught.value


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_each_broken_runbook_is_refused_with_its_problem_at_the_exact_place(path: Path):
    error = _problems(path)
    located = [p.located() for p in error.problems]
    for expected in _expectations(path):
        assert any(line.startswith(expected) for line in located), (expected, located)


def test_a_problem_shows_the_offending_line_with_a_caret_under_the_column():
    path = CORPUS / "broken" / "template-undefined-name.yaml"
    rendered = str(_problems(path)).splitlines()
    assert rendered[1] == '        args: {channel: "#ops", text: "draining {{ nodes }}"}'
    assert rendered[2].index("^") == rendered[1].index("nodes")


def test_every_problem_of_a_file_comes_at_once():
    text = """\
name: Many_Problems
parameters:
  count: {type: int, default: lots}
steps:
  - name: a
    action: cordn-node
    args: {node: n1}
  - name: b
    action: cordon-node
    args: {node: '{{ nod }}'}
    when: steps.a.changed and
    retrys: 3
"""  # 1: name pattern, 3: default, 6: action, 10: name, 11: expression, 12: key
    with pytest.raises(RunbookInvalid) as caught:
        load_texts([("many.yaml", text)])
    lines = sorted({p.line for p in caught.value.problems})
    assert lines == [1, 3, 6, 10, 11, 12]


@pytest.mark.parametrize("path", [*VALID, *shipped_files()], ids=lambda p: p.stem)
def test_valid_and_shipped_runbooks_load(path: Path):
    loaded = load_files([path], known=shipped_files())
    assert len(loaded) == 1


def test_the_shipped_library_has_the_drain_runbook():
    assert "drain-gpu-node" in load_files(shipped_files())


def test_runbooks_running_each_other_in_a_cycle_are_refused_in_both_files():
    a = "name: rb-a\nsteps:\n  - {name: s, action: run-runbook, args: {runbook: rb-b}}\n"
    b = "name: rb-b\nsteps:\n  - {name: s, action: run-runbook, args: {runbook: rb-a}}\n"
    with pytest.raises(RunbookInvalid) as caught:
        load_texts([("a.yaml", a), ("b.yaml", b)])
    located = sorted(p.located() for p in caught.value.problems)
    message = "steps[0].args.runbook: runbooks run each other in a cycle: rb-a -> rb-b -> rb-a"
    assert located == [f"a.yaml:3:52: {message}", f"b.yaml:3:52: {message}"]


def test_a_runbook_may_run_another_that_does_not_run_it_back():
    inner = "name: inner\nsteps:\n  - {name: s, action: node-exists, args: {node: n1}}\n"
    outer = "name: outer\nsteps:\n  - {name: s, action: run-runbook, args: {runbook: inner}}\n"
    assert list(load_texts([("o.yaml", outer), ("i.yaml", inner)])) == ["inner", "outer"]


def test_two_runbooks_of_one_name_are_refused_at_the_second():
    text = "name: same\nsteps:\n  - {name: s, action: node-exists, args: {node: n1}}\n"
    with pytest.raises(RunbookInvalid) as caught:
        load_texts([("one.yaml", text), ("two.yaml", text)])
    assert [p.located() for p in caught.value.problems] == [
        "two.yaml:1:7: name: runbook 'same' is already defined in one.yaml"]


def test_registries_refuse_a_name_twice_loudly():
    catalog = ActionCatalog()

    class NodeArgs(Args):
        node: str

    spec = ActionSpec("cordon-node", "x", NodeArgs, Changed, destructive=True)
    catalog.declare(spec)
    with pytest.raises(DuplicateRegistration, match="'cordon-node' is already registered"):
        catalog.declare(spec)
    with pytest.raises(DuplicateRegistration):
        CATALOG.action("cordon-node", "again", output=Changed, destructive=True)(NodeArgs)
    runbooks: Registry[str] = Registry("runbook")
    runbooks.add("drain", "first", origin="a.yaml")
    with pytest.raises(DuplicateRegistration, match=r"first from a\.yaml"):
        runbooks.add("drain", "second")


def test_a_step_may_call_an_action_of_its_own_catalog():
    catalog = ActionCatalog()

    @catalog.action("restart-pool", "x", output=Changed, destructive=True)
    class RestartArgs(Args):
        pool: str

    text = "name: own\nsteps:\n  - {name: s, action: restart-pool, args: {pool: p}}\n"
    assert list(load_texts([("own.yaml", text)], catalog=catalog)) == ["own"]
    with pytest.raises(RunbookInvalid, match="unknown action 'restart-pool'"):
        load_texts([("own.yaml", text)])


def test_the_shipped_json_schema_is_the_one_the_models_generate():
    assert SCHEMA_FILE.read_text() == schema_text(), \
        "regenerate with `gpuops runbook schema --output gpuops/runbooks/runbook.schema.json`"


def test_the_json_schema_accepts_the_valid_runbooks_and_refuses_a_wrong_argument():
    schema = runbook_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in [*VALID, *shipped_files()]:
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == []
    wrong = yaml.safe_load((CORPUS / "broken" / "unknown-argument.yaml").read_text())
    messages = [e.message for e in validator.iter_errors(wrong)]
    assert "Additional properties are not allowed ('nod' was unexpected)" in messages


def test_cli_validate_prints_every_problem_and_exits_1():
    paths = [str(CORPUS / "broken" / "unknown-argument.yaml"), str(VALID[0])]
    result = runner.invoke(app, ["runbook", "validate", *paths])
    assert result.exit_code == 1
    assert f"{paths[0]}:8:12: steps[0].args.nod: unknown argument 'nod'" in result.stderr
    assert f"{paths[0]}:8:5: steps[0].args.node: missing argument 'node'" in result.stderr
    assert result.stderr.rstrip().endswith("2 problems in 1 file")


def test_cli_validate_says_ok_for_valid_runbooks():
    result = runner.invoke(app, ["runbook", "validate", *map(str, VALID)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "".join(f"ok: {p.stem} ({p})\n" for p in VALID)


def test_cli_schema_prints_the_shipped_schema():
    result = runner.invoke(app, ["runbook", "schema"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == json.loads(SCHEMA_FILE.read_text())


def test_malformed_yaml_never_raises_anything_but_a_located_error():
    """Seeded mutations of a valid runbook (lines dropped, doubled, re-indented, characters
    cut): each either loads or is refused with located problems, never a traceback."""
    lines = (VALID[0]).read_text().splitlines()
    rng = random.Random(15)
    for _ in range(300):
        mutated = list(lines)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(mutated))
            kind = rng.choice(["drop", "double", "indent", "cut", "colon"])
            if kind == "drop":
                del mutated[i]
            elif kind == "double":
                mutated.insert(i, mutated[i])
            elif kind == "indent":
                mutated[i] = "  " + mutated[i]
            elif kind == "cut" and mutated[i]:
                j = rng.randrange(len(mutated[i]))
                mutated[i] = mutated[i][:j] + mutated[i][j + 1:]
            else:
                mutated[i] = mutated[i].replace(": ", ":: ", 1)
        try:
            load_texts([("m.yaml", "\n".join(mutated))], known=[
                (str(p), p.read_text()) for p in shipped_files()])
        except RunbookInvalid as e:
            assert e.problems and all(p.line is not None for p in e.problems), str(e)


def test_a_template_cannot_reach_python_internals_or_change_objects():
    from jinja2.exceptions import SecurityError

    with pytest.raises(SecurityError):
        render_value("{{ node.__class__.__mro__ }}", {"node": "n1"})
    evicted = ["a/b"]
    with pytest.raises(SecurityError):
        render_value("{{ evicted.append('c/d') }}", {"evicted": evicted})
    assert evicted == ["a/b"]


def test_a_parameter_value_that_looks_like_a_template_stays_text():
    assert render_value("drain {{ reason }}", {"reason": "{{ 7 * 7 }}"}) == "drain {{ 7 * 7 }}"


def test_a_lone_expression_keeps_its_type():
    assert render_value("{{ size + 1 }}", {"size": 2}) == 3
    assert render_value("{{ pods | length }} pods", {"pods": ["a", "b"]}) == "2 pods"


def test_every_action_declares_argument_and_output_models():
    for name, spec in CATALOG.items():
        assert issubclass(spec.args, BaseModel) and issubclass(spec.output, BaseModel), name
        assert spec.args.model_config.get("extra") == "forbid", name


def test_runbooks_bench_reports_every_figure(capsys):
    from gpuops.bench import runbooks as bench

    bench.main(json_output=True, count=5, malformed=20, seed=3, random_edits=20)
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"validate_ms_per_runbook", "validate_ms_cold", "located_error_pct",
            "right_line_pct", "tracebacks", "missed", "valid_accepted_pct",
            "random_edits_tracebacks", "random_edits_located_pct"} <= set(figures)
    assert figures["valid_accepted_pct"] == 100.0 and figures["tracebacks"] == 0


def test_a_runbook_dropped_in_the_runbooks_folder_is_listed_and_served(tmp_path, monkeypatch):
    from gpuops.flows.run_runbook import runbook_deployments

    (tmp_path / "mine.yaml").write_text(
        "name: mine\nsteps:\n  - {name: s, action: node-exists, args: {node: n1}}\n")
    monkeypatch.setenv("GPUOPS_RUNBOOKS_DIR", str(tmp_path))
    result = runner.invoke(app, ["runbook", "list"])
    assert result.exit_code == 0, result.output
    assert "mine (): " in result.stdout
    assert "mine/runbook" in {f"{d.flow_name}/{d.name}" for d in runbook_deployments()}


def test_a_broken_runbook_in_the_folder_is_reported_where_it_is(tmp_path, monkeypatch):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nsteps:\n  - {name: s, action: node-exist, args: {}}\n")
    monkeypatch.setenv("GPUOPS_RUNBOOKS_DIR", str(tmp_path))
    result = runner.invoke(app, ["runbook", "validate"])
    assert result.exit_code == 1
    assert f"{path}:3:23: steps[0].action: unknown action 'node-exist'; did you mean " \
        "'node-exists'?" in result.stderr
    listed = runner.invoke(app, ["runbook", "list"])
    assert listed.exit_code == 2 and f"{path}:3:23: steps[0].action" in listed.stderr
