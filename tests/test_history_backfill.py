"""Demand history back-filled before `gpuops up` starts Prometheus: the generated counters
follow simcluster's demand model, and a real Prometheus on the promtool-written TSDB answers
the capacity pre-warm query at once."""

from __future__ import annotations

import itertools
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuops.blocks.capacity import DEFAULT_DEMAND_QUERY
from gpuops.deployments.history import (
    MARKER_NAME,
    backfill_history,
    backfill_window,
    openmetrics_history,
    scenario_demand,
)
from gpuops.deployments.services import free_port, prometheus_data_dir, start_prometheus
from gpuops.tasks.clients.prometheus import Prometheus

DAY = 86400.0


def test_default_scenario_demand_is_simclusters() -> None:
    sd = scenario_demand("default")
    assert sd.pool_models == {("inference", "llama-3-8b"): "llama-3-8b",
                              ("inference", "qwen-72b"): "qwen-72b"}
    noon = 20000 * DAY + 15 * 3600  # a Thursday, llama's peak hour
    assert sd.pool_rps(noon)[("inference", "llama-3-8b")] == pytest.approx(24.0)
    assert sd.pool_rps(noon - 12 * 3600)[("inference", "llama-3-8b")] == pytest.approx(6.0)


def test_openmetrics_counters_integrate_the_demand_curve() -> None:
    sd = scenario_demand("default")
    start = 20000 * DAY
    text = openmetrics_history(sd, start=start, end=start + 6 * 3600)
    lines = text.splitlines()
    assert lines[1] == "# TYPE vllm:request_success counter" and lines[-1] == "# EOF"
    by_series: dict[str, list[tuple[float, float]]] = {}
    for line in lines[2:-1]:
        series, value, ts = line.rsplit(" ", 2)
        by_series.setdefault(series, []).append((float(ts), float(value)))
    assert len(by_series) == 4  # 2 pools x finished_reason stop/length
    llama = [s for s in by_series if 'model_name="llama-3-8b"' in s]
    assert all('pod="history"' in s for s in by_series)
    for points in by_series.values():
        assert len(points) == 6 * 60 + 1
        assert [t for t, _ in points] == [start + 60 * i for i in range(6 * 60 + 1)]
        assert all(b[1] >= a[1] for a, b in itertools.pairwise(points))  # a counter
    total = sum(by_series[s][-1][1] for s in llama)
    expected = sum(sd.demand.rps("llama-3-8b", start + 30 + 60 * i) * 60 for i in range(360))
    assert total == pytest.approx(expected, abs=2)
    assert any('finished_reason="length"' in s for s in llama)


def test_window_fills_only_the_gap_since_prometheus_last_wrote(tmp_path: Path) -> None:
    data = tmp_path / "prometheus" / "data"
    now = 20000 * DAY + 1234.5
    start, end = backfill_window(data, now=now, days=14)
    assert start == pytest.approx(now - 14 * DAY, abs=60) and start % 60 == 0
    assert end == pytest.approx(now - 300, abs=60) and end % 60 == 0

    data.mkdir(parents=True)
    (data / "wal").mkdir()
    segment = data / "wal" / "00000001"
    segment.write_bytes(b"x")
    os.utime(segment, (now - 2 * DAY, now - 2 * DAY))
    # data without a marker predates back-fill: it gets the whole window
    assert backfill_window(data, now=now, days=14) == (start, end)
    (data.parent / MARKER_NAME).write_text(json.dumps({"start": start, "end": end}))
    gap = backfill_window(data, now=now, days=14)
    assert gap is not None and gap[0] == pytest.approx(now - 2 * DAY + 300, abs=60)
    os.utime(segment, (now - 60, now - 60))
    assert backfill_window(data, now=now, days=14) is None


def test_backfilled_prometheus_answers_the_demand_query(tmp_path: Path) -> None:
    home = tmp_path / "home"
    now = time.time()
    filled = backfill_history(prometheus_data_dir(home), "default", days=2, now=now)
    assert filled is not None and filled.samples > 4 * 2 * 1400
    prometheus = start_prometheus(home, targets=[f"127.0.0.1:{free_port()}"], timeout_s=30)
    try:
        prom = Prometheus(prometheus.url)
        end = datetime.fromtimestamp(now, UTC)
        rate = prom.range_one(DEFAULT_DEMAND_QUERY.format(model="llama-3-8b"),
                              end - timedelta(days=2), end, timedelta(minutes=5))
        assert len(rate) > 500  # 2 days at a 5-minute step, less the first 5 minutes
        hourly = rate.groupby(rate.index.hour).mean()
        assert hourly.idxmax() in (14, 15, 16) and hourly.idxmin() in (2, 3, 4)
        assert hourly.max() == pytest.approx(24.0, rel=0.05)
        assert hourly.min() == pytest.approx(6.0, rel=0.05)
        qwen = prom.range_one(DEFAULT_DEMAND_QUERY.format(model="qwen-72b"),
                              end - timedelta(days=1), end, timedelta(minutes=5))
        assert 0.5 < qwen.min() < qwen.max() <= 5.05
    finally:
        prometheus.stop()
    # Prometheus has written since: nothing is missing any more
    assert backfill_history(prometheus_data_dir(home), "default", days=2) is None
