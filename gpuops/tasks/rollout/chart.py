"""The rollout's chart: TTFT, inter-token latency and error ratio of each version (and of the
fresh-copy baseline, when there is one) over the rollout, the steps marked where their weights
were set (pure: queries in, series and PNG out).

The figures are the means (`_sum / _count` rates) and the error ratio over a short moving
range (`rate_window`), per pool, summed over its pods: the same series the gates read, as a
curve rather than one number per window, so a person sees when the new version went wrong and
what the old one did meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gpuops.common.png import figure_png
from gpuops.tasks.rollout.metrics import (
    FAILED_REASONS,
    MetricNames,
    SeriesSelector,
    promql_duration,
)

if TYPE_CHECKING:
    import pandas as pd

PANELS = (("ttft_mean", "TTFT mean (s)"), ("itl_mean", "inter-token latency mean (s)"),
          ("error_ratio", "error ratio"))
POINTS = 120  # per curve, about


@dataclass(frozen=True)
class StepMark:
    at: datetime
    weight: int  # the new version's %, from then on


def chart_pools(old: str, new: str, baseline: str | None) -> tuple[tuple[str, str], ...]:
    """(version, pool) of each curve: old and new, and the baseline when the rollout had
    one (the pool the new version was judged against below 50 %)."""
    return ((("old", old), ("new", new)) + ((("baseline", baseline),) if baseline else ()))


def chart_step(start: datetime, end: datetime) -> timedelta:
    """About `POINTS` points over the rollout, at least a second apart."""
    return timedelta(seconds=max(1.0, (end - start).total_seconds() / POINTS))


def rate_window(step: timedelta) -> timedelta:
    """A moving range wide enough for a few scrapes whatever the step."""
    return max(3 * step, timedelta(seconds=10))


def chart_queries(selector: SeriesSelector, names: MetricNames, step: timedelta
                  ) -> dict[str, str]:
    """PromQL per panel for one pool (a name its pods lack: no query, no curve)."""
    sel, r = selector.matchers(), promql_duration(rate_window(step))
    queries: dict[str, str] = {}
    for key, base in (("ttft_mean", names.ttft), ("itl_mean", names.itl)):
        if base:
            queries[key] = (f"sum(rate({base}_sum{{{sel}}}[{r}])) / "
                            f"sum(rate({base}_count{{{sel}}}[{r}]))")
    if names.requests:
        failed = "|".join(sorted(FAILED_REASONS))
        queries["error_ratio"] = (
            f'sum(rate({names.requests}{{{sel},finished_reason=~"{failed}"}}[{r}])) / '
            f"sum(rate({names.requests}{{{sel}}}[{r}]))")
    return queries


def chart_png(curves: Mapping[str, Mapping[str, pd.Series]], marks: Sequence[StepMark],
              title: str, *, dpi: int = 80) -> bytes:
    """Three panels, a line per version (`curves[version][panel]`), a dashed line per step."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 7), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(PANELS), 1, sharex=True)
    colours = {"old": "tab:blue", "new": "tab:orange", "baseline": "tab:green"}
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        for version, by_panel in curves.items():
            series = by_panel.get(key)
            if series is not None and not series.empty:
                ax.plot(series.index, series.to_numpy(), lw=1.2, label=version,
                        color=colours.get(version))
        for mark in marks:
            ax.axvline(pd.Timestamp(mark.at), color="grey", ls="--", lw=0.8)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    top = axes[0]
    for mark in marks:
        top.annotate(f"{mark.weight} %", (pd.Timestamp(mark.at), 1.0),
                     xycoords=("data", "axes fraction"), fontsize=7, ha="left", va="bottom")
    top.legend(fontsize=7, loc="upper left")
    figure.suptitle(title, fontsize=9)
    return figure_png(figure)
