"""Rollout gates on windows small enough to judge by hand: relative and absolute bounds, the
minimum request count, missing data failing closed, parameters refused naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.gates import (
    DEFAULT_GATES,
    AbsoluteGate,
    Analysis,
    RelativeGate,
    Status,
    judge,
    parse_analysis,
    parse_gates,
)
from gpuops.tasks.rollout.metrics import (
    FIGURES,
    MetricNames,
    SeriesSelector,
    WindowMetrics,
    choose_names,
    window_metrics,
)
from gpuops.tasks.rollout.report import describe, verdict_rows, verdict_text

END = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)
START = END - timedelta(minutes=5)
HEALTHY = {"requests": 1000.0, "error_ratio": 0.002, "ttft_p90": 0.25, "ttft_p99": 0.4,
           "ttft_mean": 0.2, "itl_p90": 0.03, "itl_mean": 0.025, "queue_depth": 0.4,
           "kv_cache_usage": 0.5, "prefix_cache_hit_ratio": 0.3}


def window(pool: str = "new", **values: float | None) -> WindowMetrics:
    merged = {**HEALTHY, **values}
    missing = {k: "no samples in the window" for k, v in merged.items() if v is None}
    return WindowMetrics(SeriesSelector("inference", (f"{pool}-0",)), START, END, merged,
                         missing)


def analysis(*gates: dict, min_requests: int = 200) -> Analysis:
    return parse_analysis(list(gates), min_requests)


def test_default_gates_pass_a_version_as_good_as_the_old_one():
    verdict = judge(Analysis(), window(), window("old"))
    assert verdict.status is Status.PASS
    assert len(verdict.results) == len(DEFAULT_GATES) and not verdict.failed


def test_ttft_p90_fails_above_one_point_two_times_the_baseline_and_passes_at_it():
    gates = analysis({"metric": "ttft_p90", "factor": 1.2})
    assert judge(gates, window(ttft_p90=0.30), window("old")).status is Status.PASS
    verdict = judge(gates, window(ttft_p90=0.31), window("old"))
    assert verdict.status is Status.FAIL
    [result] = verdict.failed
    assert (result.value, result.baseline, result.limit) == (0.31, 0.25, pytest.approx(0.30))


def test_error_ratio_limit_is_one_percent_or_baseline_plus_half_a_point_whichever_is_higher():
    gates = analysis({"metric": "error_ratio", "slack": 0.005, "floor": 0.01})
    low_baseline = judge(gates, window(error_ratio=0.009), window("old", error_ratio=0.0))
    assert low_baseline.status is Status.PASS
    assert low_baseline.results[0].limit == 0.01
    assert judge(gates, window(error_ratio=0.011), window("old", error_ratio=0.0)).status \
        is Status.FAIL
    high_baseline = judge(gates, window(error_ratio=0.034), window("old", error_ratio=0.03))
    assert high_baseline.status is Status.PASS
    assert high_baseline.results[0].limit == pytest.approx(0.035)
    assert judge(gates, window(error_ratio=0.036), window("old", error_ratio=0.03)).status \
        is Status.FAIL


def test_a_lower_prefix_cache_hit_ratio_is_the_worse_one():
    gates = analysis({"metric": "prefix_cache_hit_ratio", "factor": 0.8})
    assert judge(gates, window(prefix_cache_hit_ratio=0.5), window("old")).status is Status.PASS
    verdict = judge(gates, window(prefix_cache_hit_ratio=0.2), window("old"))
    assert verdict.status is Status.FAIL
    assert verdict.failed[0].limit == pytest.approx(0.24)


def test_an_absolute_gate_needs_no_baseline():
    gates = analysis({"metric": "ttft_p99", "limit": 2.0})
    assert judge(gates, window(ttft_p99=1.9), None).status is Status.PASS
    verdict = judge(gates, window(ttft_p99=2.1), None)
    assert verdict.status is Status.FAIL and verdict.failed[0].limit == 2.0


def test_below_the_minimum_request_count_the_verdict_is_wait_with_the_numbers_so_far():
    gates = analysis({"metric": "ttft_p90", "factor": 1.2}, min_requests=200)
    verdict = judge(gates, window(requests=199.0, ttft_p90=1.0), window("old"))
    assert verdict.status is Status.WAIT
    assert "199" in verdict.reason and "200" in verdict.reason
    assert verdict.results[0].value == 1.0 and not verdict.results[0].passed
    assert judge(gates, window(requests=200.0), window("old")).status is Status.PASS


def test_an_old_version_with_too_few_requests_is_no_baseline_yet():
    gates = analysis({"metric": "ttft_p90", "factor": 1.2})
    verdict = judge(gates, window(), window("old", requests=50.0))
    assert verdict.status is Status.WAIT and "old version" in verdict.reason


def test_a_figure_without_samples_fails_its_gate_even_when_others_pass():
    verdict = judge(Analysis(), window(kv_cache_usage=None), window("old"))
    assert verdict.status is Status.FAIL
    [result] = verdict.failed
    assert result.gate.metric == "kv_cache_usage" and "no samples" in result.note


def test_a_baseline_figure_without_samples_fails_the_relative_gate():
    verdict = judge(Analysis(), window(), window("old", ttft_p99=None))
    assert verdict.status is Status.FAIL
    assert [r.gate.metric for r in verdict.failed] == ["ttft_p99"]
    assert verdict.failed[0].note.startswith("old version")


def test_series_that_do_not_exist_fail_at_once_even_below_the_minimum_count():
    # The new pods expose no KV-cache gauge under any known name: waiting will not help.
    present = {"vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket",
               "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
               "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"}
    names = choose_names(present)
    new = window_metrics(SeriesSelector("inference", ("new-0",)), START, END, names,
                         {"finished": [({"finished_reason": "stop"}, 20.0)]})
    verdict = judge(Analysis(), new, window("old"))
    assert verdict.status is Status.FAIL
    assert "kv_cache_usage" in verdict.reason and "vllm:gpu_cache_usage_perc" in verdict.reason


def test_no_request_series_fails_rather_than_waits():
    new = window_metrics(SeriesSelector("inference", ("new-0",)), START, END, MetricNames(), {})
    verdict = judge(Analysis(), new, window("old"))
    assert verdict.status is Status.FAIL
    assert all(not r.passed for r in verdict.results)


def test_series_without_samples_in_a_window_shorter_than_two_scrapes_mean_wait():
    names = choose_names({"vllm:request_success_total"})
    new = window_metrics(SeriesSelector("inference", ("new-0",)), START, END, names,
                         {"finished": []})
    verdict = judge(analysis({"metric": "error_ratio", "floor": 0.01}), new, window("old"))
    assert verdict.status is Status.WAIT and "no request samples" in verdict.reason


def test_a_pool_without_pods_fails_every_gate():
    empty = window_metrics(SeriesSelector("inference"), START, END, MetricNames(), {})
    verdict = judge(Analysis(), empty, window("old"))
    assert verdict.status is Status.FAIL and "no pods selected" in verdict.reason


def test_relative_gates_without_a_baseline_window_fail():
    verdict = judge(analysis({"metric": "ttft_p90", "factor": 1.2}), window(), None)
    assert verdict.status is Status.FAIL and verdict.failed[0].note == "no baseline window"


def test_gate_parameters_round_trip_and_defaults_apply_when_none_are_given():
    assert parse_gates(None) == DEFAULT_GATES
    assert parse_gates([g.as_params() for g in DEFAULT_GATES]) == DEFAULT_GATES
    assert parse_gates([{"metric": "ttft_p99", "limit": 2}]) == (AbsoluteGate("ttft_p99", 2.0),)
    assert parse_gates([{"metric": "ttft_p99", "factor": 1.5}, {"metric": "ttft_p99",
                                                                "limit": 2}]) == (
        RelativeGate("ttft_p99", 1.5), AbsoluteGate("ttft_p99", 2.0))


@pytest.mark.parametrize(("gates", "field", "words"), [
    ([{"metric": "ttft_p95", "factor": 1.2}], "gates[0].metric", "unknown metric 'ttft_p95'"),
    ([{"metric": "requests", "limit": 5}], "gates[0].metric", "min_requests"),
    ([{"metric": "ttft_p90"}], "gates[0]", "sets no bound"),
    ([{"metric": "ttft_p90", "factor": 1.2, "limit": 1}], "gates[0]", "not both"),
    ([{"metric": "ttft_p90", "factr": 1.2}], "gates[0]", "unknown key(s) 'factr'"),
    ([{"metric": "ttft_p90", "factor": 0}], "gates[0].factor", "> 0"),
    ([{"metric": "ttft_p90", "factor": "1.2"}], "gates[0].factor", "must be a number"),
    ([{"metric": "ttft_p90", "factor": True}], "gates[0].factor", "must be a number"),
    ([{"metric": "error_ratio", "floor": 1.5}], "gates[0].floor", "fraction"),
    ([{"metric": "ttft_p90", "slack": -0.1}], "gates[0].slack", ">= 0"),
    ([{"metric": "ttft_p90", "factor": 1.2}, {"metric": "ttft_p90", "factor": 1.3}],
     "gates[1]", "the first is gates[0]"),
    ([], "gates", "always pass"),
    ("ttft_p90", "gates", "must be a list"),
    ([["ttft_p90"]], "gates[0]", "must be a mapping"),
])
def test_bad_gate_parameters_are_refused_naming_the_field(gates, field, words):
    with pytest.raises(ConfigError) as err:
        parse_gates(gates)
    assert err.value.field == field
    assert words in str(err.value)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "200"])
def test_a_bad_minimum_request_count_is_refused(value):
    with pytest.raises(ConfigError) as err:
        parse_analysis(None, value)
    assert err.value.field == "min_requests"


def test_the_verdict_table_shows_each_gates_numbers_in_their_units():
    verdict = judge(Analysis(), window(ttft_p90=0.41), window("old"))
    rows = {r["gate"]: r for r in verdict_rows(verdict)}
    row = rows["ttft_p90 <= 1.2 x baseline"]
    assert (row["new"], row["baseline"], row["limit"], row["result"]) == (
        "410 ms", "250 ms", "300 ms", "FAIL")
    assert rows["error_ratio <= max(1.00 %, baseline + 0.50 pt)"]["new"] == "0.20 %"
    assert describe(RelativeGate("prefix_cache_hit_ratio", 0.8)) == \
        "prefix_cache_hit_ratio >= 0.8 x baseline"
    text = verdict_text(verdict)
    assert text.startswith("FAIL: failed: ttft_p90")
    assert "410 ms" in text and len(text.splitlines()) == 3 + len(DEFAULT_GATES)


def test_every_gated_figure_has_a_default_gate():
    assert {g.metric for g in DEFAULT_GATES} == set(FIGURES) - {"requests"}
