"""`gpuops bench restart-causes`: the restart classifier measured on the realistic corpus.

Runs `diagnose` (the shipped rules, or `--rules FILE` on top of them) over every case of
`tests/data/restart_cases/` (`restart_corpus.py` says what a case is) and reports, as one JSON
line: `cases`, `correct`, `accuracy_pct`, `by_class` ({class: {cases, correct, pct}}, by the
expected class), `confusion` (each expected -> diagnosed pair that was wrong, with its case
ids), `holdout_cases` and `holdout_accuracy_pct` (the cases kept out of rule tuning),
`blind_batches` ({file: {cases, correct, pct}} for each `blind*.yaml` batch, so a new batch's
first run can be read on its own), and `min_class_pct`. Pure apart from reading the corpus and printing.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuops.bench.restart_corpus import RestartCase, load_corpus
from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.rules import RuleSet, default_rules, load_rules


@dataclass(frozen=True)
class Outcome:
    case: RestartCase
    got: str
    rule_id: str

    @property
    def correct(self) -> bool:
        return self.got == self.case.expect


def classify(cases: Sequence[RestartCase], rules: RuleSet | None = None) -> list[Outcome]:
    ruleset = rules or default_rules()
    outcomes = []
    for case in cases:
        found = diagnose(case.evidence, ruleset)
        outcomes.append(Outcome(case, found.cause, found.rule_id))
    return outcomes


def _pct(correct: int, total: int) -> float:
    return round(100.0 * correct / total, 1) if total else 0.0


def figures(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    by_class: dict[str, dict[str, Any]] = {}
    totals: Counter[str] = Counter(o.case.expect for o in outcomes)
    right: Counter[str] = Counter(o.case.expect for o in outcomes if o.correct)
    for cls in sorted(totals):
        by_class[cls] = {"cases": totals[cls], "correct": right[cls],
                         "pct": _pct(right[cls], totals[cls])}
    pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
    for o in outcomes:
        if not o.correct:
            pairs[(o.case.expect, o.got)].append(o.case.id)
    confusion = [{"expected": e, "got": g, "count": len(ids), "cases": ids}
                 for (e, g), ids in sorted(pairs.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    held = [o for o in outcomes if o.case.holdout]
    blind: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.case.file.startswith("blind"):
            blind[o.case.file].append(o)
    correct = sum(o.correct for o in outcomes)
    return {
        "cases": len(outcomes), "correct": correct,
        "accuracy_pct": _pct(correct, len(outcomes)),
        "holdout_cases": len(held),
        "holdout_accuracy_pct": _pct(sum(o.correct for o in held), len(held)),
        "blind_batches": {f: {"cases": len(b), "correct": sum(o.correct for o in b),
                              "pct": _pct(sum(o.correct for o in b), len(b))}
                          for f, b in sorted(blind.items())},
        "classes": len(by_class),
        "min_class_pct": min((c["pct"] for c in by_class.values()), default=0.0),
        "by_class": by_class, "confusion": confusion,
    }


def run(corpus: Path | str | None = None, rules: Path | str | None = None) -> dict[str, Any]:
    ruleset = load_rules(Path(rules)) if rules else default_rules()
    return figures(classify(load_corpus(corpus), ruleset))


def main(json_output: bool = True, corpus: str | None = None,
         rules: str | None = None) -> dict[str, Any]:
    """`--corpus DIR` measures another case directory, `--rules FILE` an operator's rules."""
    result = run(corpus, rules)
    if not json_output:
        print(f"{result['correct']}/{result['cases']} causes right "
              f"({result['accuracy_pct']} %), held-out {result['holdout_accuracy_pct']} % "
              f"of {result['holdout_cases']}")
        for cls, c in result["by_class"].items():
            print(f"{cls:>28}: {c['correct']}/{c['cases']} ({c['pct']} %)")
        for pair in result["confusion"]:
            print(f"  {pair['expected']} -> {pair['got']}: {', '.join(pair['cases'])}")
    print(json.dumps(result))
    return result
