"""The restart classifier on the realistic corpus (tests/data/restart_cases), and its bench."""

from __future__ import annotations

import json

import pytest

from gpuops.bench import restart_causes
from gpuops.bench.restart_corpus import evidence_data, load_corpus, parse_cases
from gpuops.common.errors import ConfigError
from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.evidence import RestartEvidence
from gpuops.tasks.restarts.rules import default_rules

CORPUS = load_corpus()


def test_the_corpus_is_large_sourced_and_has_a_held_out_part():
    assert len(CORPUS) >= 80
    assert sum(c.holdout for c in CORPUS) >= 20
    assert all(c.source.startswith("https://") for c in CORPUS)
    # every held-out case lives in holdout.yaml, so it can be kept out of tuning by file
    assert {c.file for c in CORPUS if c.holdout} == {"holdout.yaml"}
    assert all(c.holdout for c in CORPUS if c.file == "holdout.yaml")


def test_the_corpus_covers_every_cause_the_rules_name_gpu_and_not():
    expected = {c.expect for c in CORPUS}
    assert set(default_rules().causes()) <= expected
    for cause in expected:
        assert sum(c.expect == cause for c in CORPUS) >= 2, cause


def test_a_case_keeps_its_evidence_in_the_classifiers_input_shape():
    case = next(c for c in CORPUS if c.id == "liveness-kill-long-after-handled-cuda-oom")
    log = case.evidence.previous_log.splitlines()
    assert len(log) == 127 and log[-1].endswith("request queue is full (512 waiting)")
    term = case.evidence.termination()
    assert term is not None and term.exit_code == 143
    assert term.finished_at is not None and term.finished_at.isoformat().startswith("2025-06-01T10:00")


def test_a_bad_case_names_its_file_case_and_field():
    text = ("cases:\n  - id: broken\n    expect: app-error\n    source: https://example.com/x\n"
            "    evidence:\n      restart_count: -1\n")
    with pytest.raises(ConfigError) as e:
        parse_cases(text, source="bad.yaml")
    assert "bad.yaml" in str(e.value) and "broken" in str(e.value)
    assert "restart_count" in str(e.value)
    with pytest.raises(ConfigError, match="source"):
        parse_cases("cases:\n  - {id: x, expect: app-error, source: not-a-url}\n", source="b.yaml")


def test_bench_prints_the_figures_as_one_json_line(capsys):
    result = restart_causes.main(json_output=True)
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == result
    assert printed["cases"] == len(CORPUS)
    assert printed["holdout_cases"] == sum(c.holdout for c in CORPUS)
    assert {"accuracy_pct", "by_class", "confusion", "holdout_accuracy_pct"} <= set(printed)
    assert sum(c["cases"] for c in printed["by_class"].values()) == len(CORPUS)
    # each blind batch on its own, so its first (rules unseen) run can be read off
    assert printed["blind_batches"]["blind2.yaml"]["cases"] == sum(
        c.file == "blind2.yaml" for c in CORPUS) == 40
    wrong = sum(pair["count"] for pair in printed["confusion"])
    assert wrong == printed["cases"] - printed["correct"]


# --- the classifier on the corpus ---------------------------------------------------------------

OUTCOMES = restart_causes.classify(CORPUS)
FIGURES = restart_causes.figures(OUTCOMES)


@pytest.mark.parametrize("outcome", [o for o in OUTCOMES if not o.case.holdout],
                         ids=lambda o: o.case.id)
def test_each_tuned_case_gets_the_cause_its_data_names(outcome):
    assert outcome.got == outcome.case.expect, (outcome.case.id, outcome.rule_id)


def test_every_class_is_at_least_90_percent_right_and_the_whole_at_least_95():
    low = {cls: c for cls, c in FIGURES["by_class"].items() if c["pct"] < 90}
    assert not low, (low, FIGURES["confusion"])
    assert FIGURES["accuracy_pct"] >= 95, FIGURES["confusion"]


def test_the_held_out_cases_score_like_the_rest():
    assert FIGURES["holdout_cases"] >= 20
    assert FIGURES["holdout_accuracy_pct"] >= 95, FIGURES["confusion"]


# --- blind batch 2's findings, as general patterns ------------------------------------------

def _diagnosed(log: str, exit_code: int = 2) -> str:
    given = {"last_state": {"terminated": {"reason": "Error", "exit_code": exit_code}},
             "previous_log": log}
    evidence = RestartEvidence.model_validate(evidence_data("probe", given))
    return diagnose(evidence, default_rules()).cause


@pytest.mark.parametrize("log", [
    "usage: train.py [-h] [--lr LR]\ntrain.py: error: argument --lr: invalid float value: '3e-4x'\n",
    "usage: serve [-h] --model MODEL\nserve: error: the following arguments are required: --model\n",
    "error: unexpected argument '--num-shards' found\n\nFor more information, try '--help'.\n",
    ("Usage: app serve [OPTIONS]\nTry 'app serve --help' for help.\n\n"
     "Error: Invalid value for '--port': 'http' is not a valid integer.\n"),
], ids=["argparse-type", "argparse-required", "clap-unexpected", "click-invalid"])
def test_a_parser_rejecting_the_containers_args_is_a_configuration_error(log):
    assert _diagnosed(log) == "config-error"


def test_exit_2_without_a_parser_error_stays_an_application_error():
    assert _diagnosed("usage: tool [-h]\nsomething else went wrong\n") == "app-error"


def test_pytorchs_memory_fraction_refusal_is_a_cuda_oom():
    log = ("RuntimeError: Allocation on device 1 would exceed allowed memory. (out of memory)\n"
           "Currently allocated     : 30.02 GiB\n")
    assert _diagnosed(log, exit_code=1) == "cuda-oom"
