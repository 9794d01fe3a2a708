"""One pool's analysis window read from Prometheus (thin I/O over `tasks/clients/prometheus`).

The names come first, from the pool's own series (`metrics.names_query` at the window's end:
an instant query sees series scraped within Prometheus' lookback, 5 minutes by default), then
one instant query per figure. Everything decided from the answers is pure (`metrics`, `gates`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from gpuops.tasks.clients.prometheus import Prometheus
from gpuops.tasks.rollout.chart import chart_queries, chart_step
from gpuops.tasks.rollout.metrics import (
    Answer,
    MetricNames,
    SeriesSelector,
    WindowMetrics,
    choose_names,
    names_query,
    window_metrics,
    window_queries,
)

if TYPE_CHECKING:
    import pandas as pd


def discover_names(prom: Prometheus, selector: SeriesSelector, at: datetime) -> MetricNames:
    """The vLLM names the selected pods expose at `at` (none for an empty selector)."""
    if selector.empty:
        return MetricNames()
    return choose_names(labels.get("__name__", "")
                        for labels, _ in prom.query(names_query(selector), at=at))


def read_window(prom: Prometheus, selector: SeriesSelector, start: datetime, end: datetime,
                names: MetricNames | None = None) -> WindowMetrics:
    """The pool's figures over [start, end]; `names` discovered unless given."""
    if end <= start:
        raise ValueError(f"the window must end after it starts: {start} .. {end}")
    if selector.empty:
        return window_metrics(selector, start, end, MetricNames(), {})
    names = names if names is not None else discover_names(prom, selector, end)
    answers: dict[str, Answer] = {key: prom.query(expr, at=end) for key, expr in
                                  window_queries(selector, names, end - start).items()}
    return window_metrics(selector, start, end, names, answers)


def read_chart_curves(prom: Prometheus, selector: SeriesSelector, start: datetime,
                      end: datetime) -> dict[str, pd.Series]:
    """One pool's chart curves over [start, end] (`chart.chart_queries`); a pool without
    pods or series has none."""
    if selector.empty:
        return {}
    names = discover_names(prom, selector, end)
    step = chart_step(start, end)
    return {key: prom.range_one(expr, start, end, step)
            for key, expr in chart_queries(selector, names, step).items()}
