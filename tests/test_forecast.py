"""The demand forecaster on synthetic series whose seasonality is known."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from gpuops.tasks.capacity.forecast import (
    forecast_demand,
    hourly_history,
    intra_hour_headroom,
    rate_from_counter,
)

START = pd.Timestamp("2026-03-02", tz="UTC")  # a Monday


def daily_pattern(hours: np.ndarray) -> np.ndarray:
    return 100.0 + 60.0 * np.sin(2 * np.pi * hours / 24)


def series(values: np.ndarray, start: pd.Timestamp = START) -> pd.Series:
    return pd.Series(values, index=pd.date_range(start, periods=len(values), freq="h"))


def now_after(s: pd.Series, minutes: int = 20) -> datetime:
    """A `now` inside the hour following the last sample."""
    return (s.index[-1] + pd.Timedelta(hours=1, minutes=minutes)).to_pydatetime()


def test_daily_seasonality_is_forecast_by_a_seasonal_method_within_tolerance():
    rng = np.random.default_rng(7)
    hours = np.arange(14 * 24)
    demand = series(daily_pattern(hours) + rng.normal(0, 3, hours.size))
    forecast = forecast_demand("llm", demand, now=now_after(demand))

    assert forecast.chosen_method in {"seasonal_naive_daily", "holt_winters"}
    assert set(forecast.backtest_scores) >= {"seasonal_naive_daily", "holt_winters"}
    truth = daily_pattern(np.arange(hours.size, hours.size + 24))
    assert np.max(np.abs(np.array(forecast.point) - truth)) < 12.0  # 10 % of the mean
    assert forecast.timestamps[0] == demand.index[-1] + pd.Timedelta(hours=1)
    assert len(forecast.timestamps) == 24


def test_upper_quantile_is_never_below_the_point_forecast():
    rng = np.random.default_rng(3)
    hours = np.arange(10 * 24)
    demand = series(daily_pattern(hours) * rng.uniform(0.8, 1.2, hours.size))
    forecast = forecast_demand("llm", demand, now=now_after(demand), quantile=0.9)
    point, upper = np.array(forecast.point), np.array(forecast.upper)
    assert np.all(upper >= point)
    assert np.mean(upper - point) > 1.0  # noisy data: a real margin
    assert forecast.plan_demand() == pytest.approx(forecast.upper)  # no per-minute data


def test_weekly_pattern_is_chosen_when_three_weeks_are_given():
    rng = np.random.default_rng(11)
    hours = np.arange(21 * 24)
    weekend = (hours // 24) % 7 >= 5
    demand = series(daily_pattern(hours) * np.where(weekend, 0.3, 1.0)
                    + rng.normal(0, 2, hours.size))
    forecast = forecast_demand("llm", demand, now=now_after(demand))
    assert forecast.chosen_method == "seasonal_naive_weekly"
    assert forecast.backtest_scores["seasonal_naive_weekly"] \
        < forecast.backtest_scores["seasonal_naive_daily"]


def test_weekly_method_is_not_tried_with_less_than_two_weeks():
    demand = series(daily_pattern(np.arange(10 * 24)))
    forecast = forecast_demand("llm", demand, now=now_after(demand))
    assert "seasonal_naive_weekly" not in forecast.backtest_scores


def test_missing_hours_are_filled_with_the_same_hour_a_day_earlier():
    hours = np.arange(8 * 24)
    full = series(daily_pattern(hours))
    gappy = full.drop(full.index[[30, 100, 101, 102, 103, 104, 170]])
    history, filled = hourly_history(gappy, now=now_after(full))
    assert filled == 7
    assert len(history) == len(full)
    np.testing.assert_allclose(history.to_numpy(), full.to_numpy(), atol=1e-9)

    forecast = forecast_demand("llm", gappy, now=now_after(full))
    assert forecast.filled_hours == 7
    truth = daily_pattern(np.arange(hours.size, hours.size + 24))
    assert np.max(np.abs(np.array(forecast.point) - truth)) < 5.0


def test_per_minute_samples_are_averaged_per_hour_and_the_current_hour_is_ignored():
    minutes = pd.date_range(START, periods=3 * 60 + 10, freq="min")
    values = pd.Series(np.repeat([1.0, 2.0, 3.0, 100.0], [60, 60, 60, 10]), index=minutes)
    history, filled = hourly_history(values, now=minutes[-1].to_pydatetime())
    assert list(history) == [1.0, 2.0, 3.0] and filled == 0


def test_headroom_measures_a_known_burst_ratio_from_per_minute_data():
    minutes = pd.date_range(START, periods=6 * 60, freq="min")
    rate = np.full(minutes.size, 10.0)
    rate[17::60] = 30.0  # one burst minute per hour at three times the base rate
    headroom = intra_hour_headroom(pd.Series(rate, index=minutes))
    assert headroom == pytest.approx(30.0 / ((59 * 10.0 + 30.0) / 60))

    hours = np.arange(4 * 24)
    demand = series(daily_pattern(hours))
    forecast = forecast_demand("llm", demand, now=now_after(demand),
                               per_minute=pd.Series(rate, index=minutes))
    assert forecast.headroom == pytest.approx(headroom)
    assert forecast.plan_demand()[0] == pytest.approx(forecast.upper[0] * headroom)


def test_headroom_ignores_the_noise_of_quiet_hours():
    minutes = pd.date_range(START, periods=4 * 60, freq="min")
    rate = np.full(minutes.size, 10.0)
    rate[:120] = 0.0
    rate[[30, 90]] = 5.0  # a lone request in each quiet hour: ratio 60
    rate[150] = 20.0  # busy hours: one minute at twice the base rate
    headroom = intra_hour_headroom(pd.Series(rate, index=minutes), quantile=1.0)
    assert headroom == pytest.approx(20.0 / ((59 * 10.0 + 20.0) / 60))


def test_counter_resets_do_not_make_negative_rates():
    stamps = pd.date_range(START, periods=5, freq="min")
    counter = pd.Series([0.0, 60.0, 120.0, 30.0, 90.0], index=stamps)
    rate = rate_from_counter(counter)
    assert list(rate) == [1.0, 1.0, 0.5, 1.0]


def test_too_short_a_history_falls_back_to_repeating_it_and_planning_for_its_max():
    demand = series(daily_pattern(np.arange(30)))
    forecast = forecast_demand("llm", demand, now=now_after(demand))
    assert forecast.chosen_method == "seasonal_naive_daily"
    assert forecast.backtest_scores == {}
    assert min(forecast.upper) == pytest.approx(demand.max())
    assert forecast.notes


@pytest.mark.parametrize("demand, now, field", [
    (pd.Series([1.0], index=pd.date_range("2026-01-01", periods=1, freq="h")),
     datetime(2026, 1, 2, tzinfo=UTC), "demand: index must be tz-aware UTC"),
    (series(np.ones(48)), datetime(2026, 3, 5), "now: must be timezone-aware"),
    (series(-np.ones(48)), datetime(2026, 3, 5, tzinfo=UTC), "demand: negative"),
    (series(np.ones(48)), datetime(2026, 3, 1, tzinfo=UTC), "demand: no samples"),
])
def test_bad_series_raise_value_error_naming_the_field(demand, now, field):
    with pytest.raises(ValueError, match=field):
        forecast_demand("llm", demand, now=now)
