"""`gpuops bench runbooks`: how fast runbooks validate, and how well broken ones are located.

Generated, seeded corpora (no file is read):
- `count` valid runbooks of 2 to 9 steps each (cordon, taint, drain, wait, approval, Slack
  posts reading earlier steps' outputs, `when:` conditions, undos), validated one by one as
  `gpuops runbook validate` does; `validate_ms_per_runbook` is the mean wall time;
- `malformed` runbooks, each a valid one with one seeded authoring mistake on a known line
  (a misspelt key, an unknown action or argument, a template that does not parse or reads a
  name or output that is not there, a `when:` that is not an expression, a default of the
  wrong type, a literal argument of the wrong type, a duplicate key, a line indented wrong).

`validate_ms_per_runbook` is with the template cache warm (templates repeat across
runbooks, as they do in a folder of them); `validate_ms_cold` empties it before each of 50.

Figures (last line, one JSON object): `validate_ms_per_runbook`, `valid_accepted_pct` (valid
runbooks that loaded), `located_error_pct` (malformed ones refused with a problem that has
a line), `right_line_pct` (... whose problems include the mistake's own line), `tracebacks`
(anything but a located refusal), `missed` (malformed ones accepted), `by_kind`; and
`random_edits` blind edits of the valid ones (lines dropped, doubled, re-indented,
characters cut): `random_edits_refused`, `random_edits_located_pct` (refusals whose every
problem has a line), `random_edits_tracebacks`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

from gpuops.runbooks.loader import RunbookInvalid, load_texts
from gpuops.runbooks.templates import parse_template

Line = tuple[str, str]  # (text, kind): the kind says which mistakes fit the line


def _step_lines(i: int, kind: str, earlier: list[tuple[str, str]], rng: random.Random
                ) -> list[Line]:
    name = f"s{i}"
    out: list[Line] = [(f"  - name: {name}", "step-name")]
    if kind == "cordon":
        out += [("    action: cordon-node", "action"), ("    args:", "key"),
                ('      node: "{{ node }}"', "arg-template")]
        out += [("    undo:", "key"), ("      action: uncordon-node", "action"),
                ('      args: {node: "{{ node }}"}', "flow")]
    elif kind == "taint":
        out += [("    action: taint-node", "action"), ("    args:", "key"),
                ('      node: "{{ node }}"', "arg-template"),
                ("      key: gpuops.io/quarantine", "arg-key"),
                ('      value: "{{ reason | replace(\' \', \'-\') }}"', "arg-template")]
    elif kind == "drain":
        out += [("    action: drain-node", "action"), ("    args:", "key"),
                ('      node: "{{ node }}"', "arg-template"),
                (f"      eviction_attempts: {rng.randint(1, 5)}", "arg-int")]
    elif kind == "wait":
        out += [("    action: wait-until", "action"), ("    args:", "key"),
                ("      check: node-drained", "arg-key"),
                ('      args: {node: "{{ node }}"}', "flow"),
                ("      timeout: 10m", "arg-key")]
    elif kind == "approve":
        out += [("    action: request-approval", "action"), ("    args:", "key"),
                ('      title: "Work on {{ node }}"', "arg-template"),
                ('      summary: "{{ reason }}"', "arg-template")]
    else:  # a Slack post reading an earlier step's output
        ref_step, ref_field = earlier[-1] if earlier else ("", "")
        text = f"{{{{ steps.{ref_step}.{ref_field} }}}} on {{{{ node }}}}" if ref_step \
            else "{{ reason }} on {{ node }}"
        if ref_step:
            out.append((f"    when: steps.{ref_step}.{ref_field} is defined", "when"))
        out += [("    action: slack-post", "action"), ("    args:", "key"),
                ('      channel: "#ops"', "arg-key"),
                (f'      text: "{text}"', "step-ref" if ref_step else "arg-template")]
    return out


OUTPUT = {"cordon": "changed", "taint": "changed", "drain": "evicted", "wait": "waited_s",
          "approve": "approved", "post": "ts"}


def valid_runbook(i: int, rng: random.Random) -> list[Line]:
    lines: list[Line] = [(f"name: gen-{i}", "name"), ("description: generated", "key"),
                         ("parameters:", "key"), ("  node:", "param"),
                         ("    type: node", "key"), ("    required: true", "key"),
                         ("  attempts:", "param"), ("    type: int", "key"),
                         (f"    default: {rng.randint(1, 9)}", "default-int"),
                         ("    minimum: 0", "key"), ("  reason:", "param"),
                         ("    type: string", "key"), ('    default: "maintenance"', "key"),
                         ("steps:", "key")]
    earlier: list[tuple[str, str]] = []
    for s in range(rng.randint(2, 9)):
        kind = rng.choice(list(OUTPUT))
        lines += _step_lines(s, kind, earlier, rng)
        earlier.append((f"s{s}", OUTPUT[kind]))
    return lines


def _typo(word: str, rng: random.Random) -> str:
    j = rng.randrange(1, len(word))
    return word[:j] + word[j + 1:] if len(word) > 3 else word + "x"


def _misspell_key(text: str, rng: random.Random) -> str:
    indent = len(text) - len(text.lstrip(" -"))
    key, _, rest = text[indent:].partition(":")
    return text[:indent] + _typo(key, rng) + ":" + rest


Mutator = Callable[[str, random.Random], str | None]
MUTATIONS: dict[str, tuple[tuple[str, ...], Mutator]] = {
    "misspelt-key": (("key", "action", "when"), _misspell_key),
    "unknown-action": (("action",), lambda t, r: t.rstrip() + "x"),
    "unknown-argument": (("arg-key", "arg-template", "arg-int"), _misspell_key),
    "template-syntax": (("arg-template",), lambda t, r: t.replace("}}", "}", 1)),
    "undefined-name": (("arg-template",), lambda t, r: t.replace("{{ node", "{{ nodes", 1)
                       if "{{ node" in t else t.replace("{{ reason", "{{ reasons", 1)),
    "unknown-output": (("step-ref",), lambda t, r: t.replace(" }}", "x }}", 1)),
    "when-not-expression": (("when",), lambda t, r: t + " and"),
    "default-wrong-type": (("default-int",), lambda t, r: t.split(":")[0] + ": many"),
    "argument-wrong-type": (("arg-int",), lambda t, r: t.split(":")[0] + ": many"),
    "bad-indentation": (("key", "action"), lambda t, r: " " + t),
}


def malformed_runbook(i: int, rng: random.Random) -> tuple[str, int, str]:
    """(text, the mistake's line, its kind)."""
    while True:
        lines = valid_runbook(10_000 + i, rng)
        kind = rng.choice([*MUTATIONS, "duplicate-key"])
        if kind == "duplicate-key":
            spots = [n for n, (_, k) in enumerate(lines) if k == "action"]
            n = rng.choice(spots)
            texts = [t for t, _ in lines]
            texts.insert(n + 1, texts[n])
            return "\n".join(texts) + "\n", n + 2, kind
        kinds, mutate = MUTATIONS[kind]
        spots = [n for n, (_, k) in enumerate(lines) if k in kinds]
        if not spots:
            continue
        n = rng.choice(spots)
        texts = [t for t, _ in lines]
        changed = mutate(texts[n], rng)
        if changed is None or changed == texts[n]:
            continue
        texts[n] = changed
        return "\n".join(texts) + "\n", n + 1, kind


def random_mutation(text: str, rng: random.Random) -> str:
    """One to three blind edits (a line dropped, doubled, re-indented, a character cut, a
    colon doubled): no known right line, only "never a traceback"."""
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        kind = rng.choice(["drop", "double", "indent", "cut", "colon"])
        if kind == "drop" and len(lines) > 1:
            del lines[i]
        elif kind == "double":
            lines.insert(i, lines[i])
        elif kind == "indent":
            lines[i] = "  " + lines[i]
        elif kind == "cut" and lines[i]:
            j = rng.randrange(len(lines[i]))
            lines[i] = lines[i][:j] + lines[i][j + 1:]
        else:
            lines[i] = lines[i].replace(": ", ":: ", 1)
    return "\n".join(lines) + "\n"


def run(count: int = 1000, malformed: int = 200, seed: int = 15,
        random_edits: int = 1000) -> dict[str, Any]:
    rng = random.Random(seed)
    valid = ["\n".join(t for t, _ in valid_runbook(i, rng)) + "\n" for i in range(count)]
    accepted = 0
    started = time.perf_counter()
    for i, text in enumerate(valid):
        try:
            load_texts([(f"gen-{i}.yaml", text)])
            accepted += 1
        except RunbookInvalid:
            pass
    per_runbook_ms = (time.perf_counter() - started) * 1000 / max(count, 1)
    cold = valid[:50]  # each with the template cache emptied: a runbook seen alone
    started = time.perf_counter()
    for i, text in enumerate(cold):
        parse_template.cache_clear()
        load_texts([(f"cold-{i}.yaml", text)])
    cold_ms = (time.perf_counter() - started) * 1000 / max(len(cold), 1)
    located = right = tracebacks = missed = 0
    by_kind: dict[str, dict[str, int]] = {}
    for i in range(malformed):
        text, line, kind = malformed_runbook(i, rng)
        tally = by_kind.setdefault(kind, {"cases": 0, "right_line": 0})
        tally["cases"] += 1
        try:
            load_texts([(f"bad-{i}.yaml", text)])
            missed += 1
        except RunbookInvalid as e:
            lines = {p.line for p in e.problems}
            if e.problems and None not in lines:
                located += 1
            if line in lines:
                right += 1
                tally["right_line"] += 1
        except Exception:  # noqa: BLE001 - counting them is the point
            tracebacks += 1
    blind_tracebacks = blind_located = blind_refused = 0
    for i in range(random_edits):
        text = random_mutation(valid[i % max(len(valid), 1)] if valid else "", rng)
        try:
            load_texts([(f"edit-{i}.yaml", text)])
        except RunbookInvalid as e:
            blind_refused += 1
            blind_located += all(p.line is not None for p in e.problems)
        except Exception:  # noqa: BLE001 - counting them is the point
            blind_tracebacks += 1
    total = max(malformed, 1)
    return {"validate_ms_per_runbook": round(per_runbook_ms, 3), "runbooks": count,
            "validate_ms_cold": round(cold_ms, 3),
            "valid_accepted_pct": round(100 * accepted / max(count, 1), 2),
            "malformed": malformed, "located_error_pct": round(100 * located / total, 2),
            "right_line_pct": round(100 * right / total, 2), "tracebacks": tracebacks,
            "missed": missed, "by_kind": by_kind, "random_edits": random_edits,
            "random_edits_refused": blind_refused,
            "random_edits_located_pct": round(100 * blind_located / max(blind_refused, 1), 2),
            "random_edits_tracebacks": blind_tracebacks}


def main(json_output: bool = False, count: int = 1000, malformed: int = 200,
         seed: int = 15, random_edits: int = 1000) -> None:
    figures = run(count, malformed, seed, random_edits)
    if not json_output:
        for key, value in figures.items():
            if key != "by_kind":
                print(f"{key}: {value}")
    print(json.dumps(figures, sort_keys=True))
