"""What a person reads after a capacity pre-warm run: the plan, its cost, the forecast's record.

Sink-neutral content (rows, markdown, PNG bytes); the flow turns them into Prefect artifacts.
The chart puts the forecast made `chart_days` ago (from the data before then) against what
happened since, next to the forecast for the coming hours: that is how a reader judges
whether to trust the plan. Rendered with matplotlib's Agg canvas on a `Figure` (no pyplot:
no global state, safe in a served process with several runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuops.common.png import figure_png
from gpuops.tasks.capacity.forecast import Forecast
from gpuops.tasks.capacity.plan import CapacityPlan
from gpuops.tasks.capacity.prewarm import CostSummary, PoolTarget

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class ForecastRecord:
    """One model's chart data: hourly actuals, the past forecast over them, the new one."""

    model: str
    actual: pd.Series  # hourly, the last chart_days
    past: Forecast | None  # forecast made at the start of `actual`
    future: Forecast


def plan_rows(plan: CapacityPlan, targets: Sequence[PoolTarget], start: pd.Timestamp
              ) -> list[dict[str, object]]:
    """Pool x hour: nodes the plan serves with, and what this run holds now."""
    import pandas as pd

    by_pool = {t.pool: t for t in targets}
    hours = [f"{(start + pd.Timedelta(hours=h)).strftime('%H')}:00" for h in range(plan.hours)]
    rows = []
    for pool in plan.pools:
        target = by_pool[pool]
        row: dict[str, object] = {"pool": pool, "now": target.current, "hold": target.target}
        row.update({label: plan.nodes[pool][h] for h, label in enumerate(hours)})
        rows.append(row)
    return rows


def target_rows(targets: Sequence[PoolTarget]) -> list[dict[str, object]]:
    return [{"pool": t.pool, "current": t.current, "planned_peak_in_window": t.planned,
             "window_hours": t.window_hours, "target": t.target,
             "usd_per_hour": round(t.cost_change_per_hour, 2), "notes": "; ".join(t.notes)}
            for t in targets]


def summary_markdown(plan: CapacityPlan, targets: Sequence[PoolTarget], costs: CostSummary,
                     forecasts: Mapping[str, Forecast], *, dry_run: bool) -> str:
    changes = [t for t in targets if t.change]
    lines = [f"# Capacity pre-warm{' (dry run)' if dry_run else ''}", "",
             (f"Plan over {plan.hours} h: **${costs.plan:,.2f}** (static peak "
             f"${costs.static_peak:,.2f}, current sizes ${costs.current:,.2f}); solver "
             f"`{plan.status}` in {plan.solve_s:.2f} s, gap "
             f"{'n/a' if plan.gap is None else f'{plan.gap:.2%}'}."), "",
             f"This run's change: **{costs.change_per_hour:+,.2f} $/h**.", ""]
    if changes:
        lines += ["| pool | now | target | why |", "|---|---|---|---|"]
        lines += [f"| {t.pool} | {t.current} | {t.target} | peak {t.planned} in the next "
                  f"{t.window_hours} h{'; ' + '; '.join(t.notes) if t.notes else ''} |"
                  for t in changes]
    else:
        lines.append("No pool changes: every pool already has its target.")
    lines += ["", "## Forecasts", "", "| model | method | quantile | headroom | filled hours |",
              "|---|---|---|---|---|"]
    lines += [f"| {f.model_name} | {f.chosen_method} | P{round(f.quantile * 100)} | "
              f"{f.headroom:.2f} | {f.filled_hours} |" for f in forecasts.values()]
    lines += ["", "## Shortfall", "", "```", plan.shortfall_report(), "```"]
    return "\n".join(lines)


def forecast_chart_png(records: Sequence[ForecastRecord], *, dpi: int = 72) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 2.6 * max(1, len(records))), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(records), 1, squeeze=False)[:, 0]
    for ax, record in zip(axes, records, strict=True):
        ax.plot(record.actual.index, record.actual.to_numpy(), color="black", lw=1.2,
                label="actual")
        if record.past is not None:
            past = record.past.as_series()
            ax.plot(past.index, past["point"], color="tab:blue", lw=1, ls="--",
                    label="forecast then")
            ax.fill_between(past.index, past["point"], past["upper"], color="tab:blue",
                            alpha=0.15, label=f"P{round(record.past.quantile * 100)} band")
        future = record.future.as_series()
        ax.plot(future.index, future["point"], color="tab:orange", lw=1, label="forecast now")
        ax.plot(future.index, future["plan"], color="tab:red", lw=1, ls=":",
                label="planned for")
        ax.set_title(record.model, fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=5, loc="upper left")
    return figure_png(figure)
