"""Gates at unequal loads per replica: a latency that is only lower because the new replicas
are nearly idle proves nothing, nor one that is only higher because they are busier; a rollout
promotes only once latency has passed where both pools are about as busy, and its steps carry
such a step."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.gates import (
    Analysis,
    Status,
    judge,
    parse_analysis,
    step_load_ratio,
    unproven,
    with_comparable_step,
)
from gpuops.tasks.rollout.metrics import SeriesSelector, WindowMetrics, window_metrics
from gpuops.tasks.rollout.report import verdict_text

END = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)
START = END - timedelta(seconds=100)
OLD = {"requests": 8000.0, "error_ratio": 0.0, "ttft_p90": 0.60, "ttft_p99": 1.2,
       "ttft_mean": 0.30, "itl_p90": 0.04, "itl_mean": 0.03, "queue_depth": 1.5,
       "kv_cache_usage": 0.6, "prefix_cache_hit_ratio": 0.25}
# A version slower per request looks faster on nearly idle replicas: at 1 % of the traffic its
# latency is the service time alone, below the busy old pool's queueing.
SLOWER_BUT_IDLE = {**OLD, "requests": 400.0, "ttft_p90": 0.30, "ttft_p99": 0.5,
                   "ttft_mean": 0.17, "itl_p90": 0.035, "itl_mean": 0.028, "queue_depth": 0.0,
                   "kv_cache_usage": 0.05, "prefix_cache_hit_ratio": 0.34}


def window(values: dict[str, float], replicas: float | None, pool: str = "new"
           ) -> WindowMetrics:
    return WindowMetrics(SeriesSelector("inference", (f"{pool}-0",)), START, END, values,
                         replicas=replicas)


def test_a_latency_below_the_old_ones_on_nearly_idle_replicas_passes_no_latency_gate():
    # 400 requests on 4 new replicas vs 8000 on 4 old: 0.05x the load per replica.
    verdict = judge(Analysis(), window(SLOWER_BUT_IDLE, 4), window(OLD, 4, "old"))

    assert verdict.status is Status.PASS  # nothing proves the version bad...
    assert verdict.load_ratio == pytest.approx(0.05)
    unmatched = {r.gate.metric for r in verdict.not_comparable}
    assert {"ttft_p90", "ttft_p99", "ttft_mean", "itl_p90", "queue_depth"} <= unmatched
    assert "error_ratio" not in unmatched  # errors are the version's whatever the load
    assert "not comparable at 0.05x" in verdict.reason
    # ...and nothing proves it as fast as the old one: it may not be promoted on this window.
    assert "ttft_p90" in unproven(Analysis(), [verdict])
    assert "n/c" in verdict_text(verdict)


def test_a_latency_above_the_old_ones_while_less_busy_fails_at_once():
    slower = {**SLOWER_BUT_IDLE, "ttft_mean": 0.5}
    verdict = judge(Analysis(), window(slower, 4), window(OLD, 4, "old"))

    assert verdict.status is Status.FAIL
    assert [r.gate.metric for r in verdict.failed] == ["ttft_mean"]


def test_a_latency_above_the_old_ones_while_busier_is_not_held_against_the_version():
    # The new pool has 1 replica carrying 1/3 of the traffic, the old 4 carrying the rest:
    # 1.33x the load per replica, and latency a little higher for it.
    busier = {**OLD, "requests": 2667.0, "ttft_mean": 0.40, "ttft_p90": 0.75}
    verdict = judge(Analysis(), window(busier, 1), window(OLD, 4, "old"))

    assert verdict.status is Status.PASS
    # An unchanged prefix-cache hit ratio while busier proves nothing either: more load
    # alone would have raised it.
    assert {r.gate.metric for r in verdict.not_comparable} == {
        "ttft_mean", "ttft_p90", "prefix_cache_hit_ratio"}
    assert "ttft_mean" in unproven(Analysis(), [verdict])
    assert "itl_p90" not in unproven(Analysis(), [verdict])  # as good while busier: proven


def test_a_lower_prefix_cache_hit_ratio_on_nearly_idle_replicas_does_not_roll_back():
    # Issue #18: 4 replicas each side, 1 % step. A good version's idle replicas see few
    # requests sharing a prefix, so its hit ratio is far below the busy old pool's; that is
    # the load's doing, not the version's (before: "worse while less busy", a false rollback).
    good_but_idle = {**OLD, "requests": 80.0 * 5, "ttft_p90": 0.30, "ttft_mean": 0.17,
                     "queue_depth": 0.0, "kv_cache_usage": 0.05,
                     "prefix_cache_hit_ratio": 0.05}
    verdict = judge(Analysis(), window(good_but_idle, 4), window(OLD, 4, "old"))

    assert verdict.status is Status.PASS, verdict.reason
    [hits] = [r for r in verdict.results if r.gate.metric == "prefix_cache_hit_ratio"]
    assert not hits.comparable and "less busy" in hits.note
    assert "prefix_cache_hit_ratio" in unproven(Analysis(), [verdict])
    # A lower KV-cache usage while less busy is no evidence for the version either.
    [kv] = [r for r in verdict.results if r.gate.metric == "kv_cache_usage"]
    assert not kv.comparable


def test_a_prefix_cache_hit_ratio_as_good_while_less_busy_counts_for_the_version():
    verdict = judge(Analysis(), window(SLOWER_BUT_IDLE, 4), window(OLD, 4, "old"))
    [hits] = [r for r in verdict.results if r.gate.metric == "prefix_cache_hit_ratio"]
    assert hits.proven
    assert "prefix_cache_hit_ratio" not in unproven(Analysis(), [verdict])


@pytest.mark.parametrize(("requests", "replicas"), [(8000.0, 4), (2667.0, 1)],
                         ids=["comparable load", "busier"])
def test_a_worse_prefix_cache_hit_ratio_at_comparable_or_higher_load_fails(requests, replicas):
    worse = {**OLD, "requests": requests, "prefix_cache_hit_ratio": 0.15}  # limit 0.8 x 0.25
    verdict = judge(Analysis(), window(worse, replicas), window(OLD, 4, "old"))

    assert verdict.status is Status.FAIL
    assert [r.gate.metric for r in verdict.failed] == ["prefix_cache_hit_ratio"]


def test_at_comparable_loads_latency_is_judged_and_proven_as_before():
    worse = {**OLD, "ttft_mean": 0.40}
    equal_loads = judge(Analysis(), window(OLD, 4), window(OLD, 4, "old"))
    assert equal_loads.status is Status.PASS and not equal_loads.not_comparable
    assert unproven(Analysis(), [equal_loads]) == ()
    assert judge(Analysis(), window(worse, 4), window(OLD, 4, "old")).status is Status.FAIL


def test_load_matching_off_compares_whatever_the_loads_as_the_gates_did_before():
    analysis = Analysis(load_match=None)
    verdict = judge(analysis, window(SLOWER_BUT_IDLE, 4), window(OLD, 4, "old"))
    assert verdict.status is Status.PASS and not verdict.not_comparable
    assert unproven(analysis, [verdict]) == ()


def test_the_serving_replicas_come_from_the_window_query_answers():
    from gpuops.tasks.rollout.metrics import choose_names

    names = choose_names({"vllm:request_success_total"})
    m = window_metrics(SeriesSelector("inference", ("new-0", "new-1")), START, END, names,
                       {"finished": [({"finished_reason": "stop"}, 500.0)],
                        "replicas": [({}, 2.0)]})
    assert m.replicas == 2.0
    assert m.rps_per_replica == pytest.approx(2.5)


def test_the_steps_get_a_step_where_both_pools_are_as_busy_when_they_have_none():
    assert step_load_ratio(50, 4, 4) == 1.0
    assert with_comparable_step((1, 5, 25, 100), 4, 4, 0.8) == (1, 5, 25, 50, 100)
    assert with_comparable_step((1, 5, 25, 75, 100), 4, 4, 0.8) == (1, 5, 25, 50, 75, 100)
    assert with_comparable_step((1, 5, 25, 50, 100), 4, 4, 0.8) == (1, 5, 25, 50, 100)
    # 1 new replica beside 4 old ones is as busy at 20 %
    assert with_comparable_step((1, 100), 4, 1, 0.8) == (1, 20, 100)
    assert with_comparable_step((1, 100), 4, 4, None) == (1, 100)


def test_a_load_match_outside_0_to_1_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="load_match"):
        parse_analysis(None, 200, 1.5)
    assert parse_analysis(None, 200, None).load_match is None


def test_the_timeline_shows_how_busy_the_new_replicas_were_next_to_the_old():
    from gpuops.tasks.rollout.timeline import StepResult, timeline_rows

    verdict = judge(Analysis(), window(SLOWER_BUT_IDLE, 4), window(OLD, 4, "old"))
    [row] = timeline_rows([StepResult(1, 1, 4, 4, START, END, verdict)])
    assert row["load per replica new/old"] == "0.05"
    assert "ttft_p90 300 ms (limit 720 ms) n/c" in row["gates"]


def test_against_the_old_versions_past_only_the_direction_of_the_loads_counts():
    from gpuops.tasks.rollout.gates import against_history

    history = against_history(Analysis())
    # At 100 % the new replicas carry 5 % more than the old ones did at a 5 % step: near
    # saturation that alone lifts TTFT by 10 % and more, so a slightly worse TTFT proves
    # nothing (at the 0.8 band of same-time windows it failed a good version)...
    busier = {**OLD, "requests": 8400.0, "ttft_p90": 0.75}
    assert judge(Analysis(), window(busier, 4), window(OLD, 4, "old")).status is Status.FAIL
    verdict = judge(history, window(busier, 4), window(OLD, 4, "old"))
    assert verdict.status is Status.PASS
    # (an unchanged prefix-cache hit ratio while busier proves nothing either)
    assert [r.gate.metric for r in verdict.not_comparable] == ["ttft_p90",
                                                               "prefix_cache_hit_ratio"]
    # ...but errors do, and so does a worse latency while less busy.
    failing = {**busier, "error_ratio": 0.08}
    assert judge(history, window(failing, 4), window(OLD, 4, "old")).status is Status.FAIL
    lighter = {**OLD, "requests": 7900.0, "ttft_p90": 0.75}
    assert judge(history, window(lighter, 4), window(OLD, 4, "old")).status is Status.FAIL
