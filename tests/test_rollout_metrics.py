"""The rollout's vLLM figures, the pure part: names chosen per pool across vLLM's renames, the
PromQL each pool gets, answers turned into figures (the queries run against a real Prometheus
in test_rollout_io.py)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from gpuops.tasks.rollout.metrics import (
    SeriesSelector,
    choose_names,
    names_query,
    promql_duration,
    window_metrics,
    window_queries,
)

END = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)
START = END - timedelta(minutes=5)
# What vLLM 0.11 exposes (the histograms as `_bucket`), and what a V1 engine before 0.9 did.
NEW_VLLM = {"vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket",
            "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total"}
OLD_VLLM = {"vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket",
            "vllm:time_per_output_token_seconds_bucket", "vllm:num_requests_waiting",
            "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_hits_total"}
PODS = SeriesSelector.of_pods("inference", ["llama-v2-0", "llama-v2-1"])


def test_new_names_win_when_a_version_exposes_both_the_old_and_the_new():
    names = choose_names(NEW_VLLM | OLD_VLLM)
    assert names.kv_cache == "vllm:kv_cache_usage_perc"
    assert names.itl == "vllm:inter_token_latency_seconds"
    assert names.prefix_counters == ("vllm:prefix_cache_queries_total",
                                     "vllm:prefix_cache_hits_total")


def test_an_old_vllm_pool_is_read_with_its_own_names():
    names = choose_names(OLD_VLLM)
    queries = window_queries(PODS, names, timedelta(minutes=5))
    assert "vllm:gpu_cache_usage_perc{" in queries["kv_cache_usage"]
    assert "vllm:time_per_output_token_seconds_bucket{" in queries["itl_p90"]
    assert "vllm:gpu_prefix_cache_hits_total{" in queries["prefix_cache_hit_ratio"]
    assert not any("kv_cache_usage_perc" in q or "inter_token" in q for q in queries.values())


def test_a_v0_engine_gives_the_prefix_hit_rate_gauge():
    names = choose_names({"vllm:gpu_prefix_cache_hit_rate", "vllm:request_success_total"})
    queries = window_queries(PODS, names, timedelta(minutes=5))
    assert queries["prefix_cache_hit_ratio"].startswith("avg(avg_over_time(vllm:gpu_prefix")
    assert "ttft_p90" not in queries  # no TTFT histogram: no query, the figure is missing


def test_quantiles_sum_buckets_over_the_pools_pods_and_the_mean_sits_beside_them():
    queries = window_queries(PODS, choose_names(NEW_VLLM), timedelta(seconds=90))
    sel = 'namespace="inference",pod=~"llama-v2-0|llama-v2-1"'
    assert queries["ttft_p90"] == (
        "histogram_quantile(0.9, sum by (le) (increase(vllm:time_to_first_token_seconds_bucket"
        f"{{{sel}}}[90000ms])))")
    assert queries["ttft_mean"] == (
        f"sum(increase(vllm:time_to_first_token_seconds_sum{{{sel}}}[90000ms])) / "
        f"sum(increase(vllm:time_to_first_token_seconds_count{{{sel}}}[90000ms]))")
    assert set(queries) == {"finished", "replicas", "ttft_p90", "ttft_p99", "ttft_mean",
                            "itl_p90", "itl_mean", "queue_depth", "kv_cache_usage",
                            "prefix_cache_hit_ratio"}


def test_pod_names_are_matched_literally_and_a_pool_label_can_stand_in_for_them():
    dotted = SeriesSelector.of_pods("ns", ["a.b-0"])
    assert dotted.matchers() == 'namespace="ns",pod=~"a\\\\.b-0"'
    labelled = SeriesSelector("ns", label=("inference_pool", "llama-v2"))
    assert labelled.matchers() == 'namespace="ns",inference_pool="llama-v2"'
    assert names_query(labelled).endswith(',namespace="ns",inference_pool="llama-v2"})')


def test_an_empty_selector_is_never_turned_into_a_query():
    empty = SeriesSelector.of_pods("ns", [])
    assert empty.empty
    with pytest.raises(ValueError, match="empty"):
        empty.matchers()


def test_a_zero_length_window_is_refused():
    with pytest.raises(ValueError, match="longer than 0"):
        promql_duration(timedelta(0))


def test_error_ratio_counts_errors_and_aborts_over_every_finished_request():
    answers = {"finished": [({"finished_reason": "stop"}, 880.0),
                            ({"finished_reason": "length"}, 100.0),
                            ({"finished_reason": "error"}, 15.0),
                            ({"finished_reason": "abort"}, 5.0),
                            ({"finished_reason": "repetition"}, 0.0)],
               "ttft_p90": [({}, 0.42)], "ttft_p99": [({}, math.nan)]}
    m = window_metrics(PODS, START, END, choose_names(NEW_VLLM), answers)
    assert m.requests == 1000.0
    assert m.value("error_ratio") == pytest.approx(0.02)
    assert m.value("ttft_p90") == 0.42
    assert m.value("ttft_p99") is None and m.missing["ttft_p99"] == "no requests in the window"
    assert not m.absent


def test_names_the_pods_lack_are_reported_as_absent_series():
    m = window_metrics(PODS, START, END, choose_names(NEW_VLLM - {"vllm:kv_cache_usage_perc"}),
                       {"finished": [({"finished_reason": "stop"}, 10.0)]})
    assert m.absent == {"kv_cache_usage"}
    assert m.missing["kv_cache_usage"] == ("no vllm:kv_cache_usage_perc or "
                                           "vllm:gpu_cache_usage_perc series for these pods")


def test_no_requests_in_the_window_leaves_the_error_ratio_undefined_not_zero():
    m = window_metrics(PODS, START, END, choose_names(NEW_VLLM),
                       {"finished": [({"finished_reason": "stop"}, 0.0),
                                     ({"finished_reason": "error"}, 0.0)]})
    assert m.requests == 0.0
    assert m.value("error_ratio") is None and "no requests" in m.missing["error_ratio"]
