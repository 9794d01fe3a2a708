"""The Prometheus HTTP API verbs gpuops needs (`/api/v1/query`, `/api/v1/query_range`).

Why thin: PromQL does the maths (rates, sums, reset handling); this module only turns
answers into pandas Series with a UTC index — what `tasks/capacity/forecast.py` takes — and maps
failures to `PrometheusQueryError` (fix the query: never retried) or
`PrometheusUnavailable` (retry later). Long ranges are split so that no request asks for
more than Prometheus' 11,000 points per series.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from gpuops.common.errors import PrometheusQueryError, PrometheusUnavailable

if TYPE_CHECKING:
    import pandas as pd

MAX_POINTS = 11_000  # Prometheus refuses query_range answers above this per series


@dataclass(frozen=True)
class RangeSeries:
    labels: dict[str, str]
    values: pd.Series  # float, UTC DatetimeIndex


def _seconds(when: datetime) -> float:
    if when.tzinfo is None:
        raise ValueError(f"{when!r} must be timezone-aware (UTC)")
    return when.timestamp()


def _series(values: list[list[Any]]) -> pd.Series:
    import pandas as pd

    if not values:
        return pd.Series([], dtype=float, index=pd.DatetimeIndex([], tz="UTC"))
    stamps = pd.to_datetime([float(t) for t, _ in values], unit="s", utc=True)
    return pd.Series([float(v) for _, v in values], index=stamps, dtype=float)


@dataclass
class Prometheus:
    """One Prometheus server (or anything speaking its HTTP API: Thanos, Mimir, VictoriaMetrics)."""

    base_url: str
    timeout_s: float = 30.0

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        url = self.base_url.rstrip("/") + path
        try:
            response = httpx.get(url, params=params, timeout=self.timeout_s)
        except httpx.HTTPError as e:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} could not be "
                                        f"reached: {e}") from e
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code >= 500 or response.status_code == 429:
            raise PrometheusUnavailable(f"Prometheus answered {response.status_code}: "
                                        f"{body.get('error') or response.text[:200]}")
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusQueryError(
                f"Prometheus refused {params.get('query')!r}: {body.get('errorType', '')} "
                f"{body.get('error') or response.status_code}".strip())
        return body["data"]

    def query(self, expr: str, at: datetime | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant vector: (labels, value) per series."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = _seconds(at)
        data = self._get("/api/v1/query", params)
        if data.get("resultType") == "scalar":
            return [({}, float(data["result"][1]))]
        if data.get("resultType") != "vector":
            raise PrometheusQueryError(f"{expr!r} returned a {data.get('resultType')}, "
                                       "expected an instant vector")
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def query_range(self, expr: str, start: datetime, end: datetime, step: timedelta
                    ) -> list[RangeSeries]:
        """A range query, split into requests of at most `MAX_POINTS` points each."""
        import pandas as pd

        step_s = step.total_seconds()
        if step_s <= 0:
            raise ValueError(f"step must be positive, got {step!r}")
        first, last = _seconds(start), _seconds(end)
        pieces: dict[tuple[tuple[str, str], ...], list[pd.Series]] = {}
        labels_of: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        lo = first
        while True:
            hi = min(lo + step_s * (MAX_POINTS - 1), last)
            data = self._get("/api/v1/query_range", {"query": expr, "start": lo, "end": hi,
                                                     "step": step_s})
            if data.get("resultType") != "matrix":
                raise PrometheusQueryError(f"{expr!r} returned a {data.get('resultType')}, "
                                           "expected a range vector")
            for result in data["result"]:
                key = tuple(sorted(result["metric"].items()))
                labels_of[key] = result["metric"]
                pieces.setdefault(key, []).append(_series(result["values"]))
            if hi >= last:
                break
            lo = hi + step_s
        out = []
        for key, parts in pieces.items():
            values = pd.concat(parts).sort_index()
            out.append(RangeSeries(labels_of[key], values[~values.index.duplicated()]))
        return out

    def range_one(self, expr: str, start: datetime, end: datetime, step: timedelta
                  ) -> pd.Series:
        """A range query expected to give one series (e.g. a `sum(...)`); empty if none."""
        series = self.query_range(expr, start, end, step)
        if len(series) > 1:
            raise PrometheusQueryError(f"{expr!r} returned {len(series)} series, expected "
                                       "one; aggregate it, e.g. `sum(...)`")
        return series[0].values if series else _series([])
