"""The rollout chart's queries and picture (pure): means and error ratio per pool as moving
rates, one curve per version, the steps marked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from gpuops.tasks.rollout.chart import StepMark, chart_png, chart_queries, chart_step
from gpuops.tasks.rollout.metrics import MetricNames, SeriesSelector, choose_names

START = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)
END = START + timedelta(minutes=40)


def test_the_chart_reads_each_pools_means_and_error_ratio_as_moving_rates():
    names = choose_names({"vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket",
                          "vllm:inter_token_latency_seconds_bucket"})
    step = chart_step(START, END)
    assert step == timedelta(seconds=20)
    queries = chart_queries(SeriesSelector.of_pods("inference", ["new-0"]), names, step)
    sel = 'namespace="inference",pod=~"new-0"'
    assert queries["ttft_mean"] == (
        f"sum(rate(vllm:time_to_first_token_seconds_sum{{{sel}}}[60000ms])) / "
        f"sum(rate(vllm:time_to_first_token_seconds_count{{{sel}}}[60000ms]))")
    assert queries["error_ratio"] == (
        f'sum(rate(vllm:request_success_total{{{sel},finished_reason=~"abort|error"}}'
        f"[60000ms])) / sum(rate(vllm:request_success_total{{{sel}}}[60000ms]))")
    # a name the pods lack draws no curve (rather than a query that answers nothing)
    assert set(chart_queries(SeriesSelector.of_pods("inference", ["old-0"]),
                             MetricNames(requests="vllm:request_success_total"), step)) == \
        {"error_ratio"}


def test_the_chart_is_a_png_with_a_curve_per_version():
    index = pd.date_range(START, END, periods=50, tz="UTC")
    curve = pd.Series([0.2] * 50, index=index)
    png = chart_png({"old": {"ttft_mean": curve, "error_ratio": curve * 0},
                     "new": {"ttft_mean": curve * 2}},
                    [StepMark(START + timedelta(minutes=5), 1),
                     StepMark(START + timedelta(minutes=15), 5)], "inference/llama -> v2")
    assert png.startswith(b"\x89PNG")


def test_the_chart_draws_the_baseline_beside_the_old_and_the_new_version_when_there_is_one():
    from gpuops.tasks.rollout.chart import chart_pools

    assert chart_pools("llama", "llama-abc", None) == (("old", "llama"), ("new", "llama-abc"))
    assert chart_pools("llama", "llama-abc", "llama-baseline-123")[-1] == \
        ("baseline", "llama-baseline-123")
