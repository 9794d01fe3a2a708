"""Demand history per model from Prometheus, in the units the capacity plan uses.

Why here and not in the forecaster: the forecaster is pure and takes a Series; this is the
one place that knows the query, the step and the unit. History comes at a 5-minute step
(`forecast.hourly_history` averages it per hour and fills gaps), per-minute data for the
intra-hour headroom. A query returning a raw counter goes through `rate_from_counter`
(resets handled); `rate()` queries already handle resets in Prometheus.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from gpuops.blocks.capacity import ModelConfig
from gpuops.common.errors import ConfigError
from gpuops.tasks.capacity.forecast import rate_from_counter
from gpuops.tasks.clients.prometheus import Prometheus

if TYPE_CHECKING:
    import pandas as pd

HISTORY_STEP = timedelta(minutes=5)
MINUTE_STEP = timedelta(minutes=1)


@dataclass(frozen=True)
class DemandHistory:
    model: str
    demand: pd.Series  # demand per hour (query value x scale), UTC index, 5-minute samples
    per_minute: pd.Series | None  # per-minute values (any scale) for the headroom


def _read(prom: Prometheus, model: ModelConfig, start: datetime, end: datetime,
          step: timedelta) -> pd.Series:
    values = prom.range_one(model.query(), start, end, step)
    if model.demand_is_counter and len(values) >= 2:
        values = rate_from_counter(values)
    return values


def read_demand(prom: Prometheus, model: ModelConfig, *, now: datetime, history_days: int,
                scale: float, headroom_days: int | None) -> DemandHistory:
    start = now - timedelta(days=history_days)
    values = _read(prom, model, start, now, HISTORY_STEP)
    if values.empty:
        raise ConfigError(f"models[{model.name!r}].demand_query",
                          f"{model.query()!r} returned no samples between "
                          f"{start.isoformat()} and {now.isoformat()}; try it in the "
                          "Prometheus UI, or set `demand_query`")
    per_minute = None
    if headroom_days:
        minute = _read(prom, model, now - timedelta(days=headroom_days), now, MINUTE_STEP)
        per_minute = minute if not minute.empty else None
    return DemandHistory(model.name, values * scale, per_minute)
