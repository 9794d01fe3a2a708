"""Demand history back-filled into the Prometheus of `gpuops up` (simulated cluster only).

Why: capacity pre-warm reads `history_days` (14) of `vllm:request_success_total` per model, but
the Prometheus that `gpuops up` starts has only scraped simcluster since it started, so the
hourly deployment would fail with "returned no samples" for the first two weeks. Before that
Prometheus starts, `backfill_history` writes the days it missed into its TSDB with
`promtool tsdb create-blocks-from openmetrics`, computed from the demand model simcluster itself
uses (`simcluster.serving`: the scenario's `demand:` curves, split between InferencePools by the
HTTPRoutes as `split_demand` does), so the history and the live scrape tell one story.

- One sample per minute per series, counters as cumulative whole requests, `finished_reason`
  "stop" and "length" in simcluster's proportion; labels as simcluster exposes them plus the
  scrape's `job`, with `pod="history"` (and `instance="history"`) so they never clash with a
  live pod's series: the demand query sums over pods.
- The history stops `lead` (5 min) before now, so its `rate()` has faded when the live pods'
  begins. It assumes real-time simcluster (`sim_speed` 1); the live series follow virtual time.
- A data directory that already holds data (an earlier `gpuops up` with the same home) gets
  only the gap since Prometheus last wrote to it, `lead` after that, so no minute is counted
  both by history and by live pods. A directory written before back-fill existed (no
  `history.json` beside it) gets the whole window: the hours that older stack ran count twice.

`openmetrics_history` is pure (text out); `backfill_history` reads the scenario, the data
directory's state, and runs promtool.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuops.simcluster.metrics.serving import (
    LENGTH_SHARE,
    DemandModel,
    PoolKey,
    RouteRule,
    model_demand,
    split_demand,
)
from gpuops.simcluster.metrics.servingindex import ANN_MODEL, route_rules
from gpuops.simcluster.scenario import parse_scenario, scenario_text

HISTORY_POD = "history"
DEFAULT_LEAD_S = 300.0
STEP_S = 60.0
MARKER_NAME = "history.json"  # beside the data directory: which window was back-filled
FAMILY = "vllm:request_success"
HELP = "Count of successfully processed requests."
# promtool's default (2h) reads the file once per block: 14 days took 27 s; one a day, 3 s.
BLOCK_DURATION = "24h"
REASON_SHARES = (("stop", 1.0 - LENGTH_SHARE), ("length", LENGTH_SHARE))


class HistoryBackfillError(RuntimeError):
    """promtool is missing or refused the generated history; the message has its output."""


@dataclass(frozen=True)
class ScenarioDemand:
    """What the demand of a scenario's serving objects is: curves, pools' models, routes."""

    demand: DemandModel
    pool_models: Mapping[PoolKey, str]
    rules: Sequence[RouteRule] = field(default_factory=tuple)

    def pool_rps(self, t: float) -> dict[PoolKey, float]:
        """Requests/s per InferencePool at `t`, as simcluster's metrics engine splits them."""
        models = sorted(set(self.pool_models.values()))
        return split_demand(model_demand(self.demand, models, t), self.rules, self.pool_models)


def scenario_demand(name_or_path: str) -> ScenarioDemand:
    """The demand of a shipped scenario name or scenario file (its InferencePools serve the
    model their `sim.gpuops.io/model` annotation names, else the model of their own name)."""
    text, source = scenario_text(name_or_path)
    scenario = parse_scenario(text, source).scenario
    pool_models: dict[PoolKey, str] = {}
    rules: list[RouteRule] = []
    for obj in scenario.objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "InferencePool":
            key = (str(meta.get("namespace") or "default"), str(meta["name"]))
            pool_models[key] = (meta.get("annotations") or {}).get(ANN_MODEL) or key[1]
        elif obj.get("kind") == "HTTPRoute":
            rules += route_rules({**obj, "metadata": {"namespace": "default", **meta}})
    return ScenarioDemand(DemandModel.from_config(scenario.demand or None), pool_models, rules)


def openmetrics_history(sd: ScenarioDemand, *, start: float, end: float, step_s: float = STEP_S,
                        job: str = "gpuops") -> str:
    """OpenMetrics text of `vllm:request_success_total` per pool and finished reason, one
    sample every `step_s` from `start` to `end` (epoch seconds), counters starting at 0."""
    times = [start + i * step_s for i in range(int((end - start) // step_s) + 1)]
    # requests per step per pool: the rate at the step's middle times its length
    per_step = [sd.pool_rps(t - step_s / 2.0) for t in times[1:]]
    lines = [f"# HELP {FAMILY} {HELP}", f"# TYPE {FAMILY} counter"]
    for pool in sorted(sd.pool_models):
        labels = ",".join(f'{name}="{_escape(value)}"' for name, value in (
            ("engine", "0"), ("inference_pool", pool[1]), ("instance", HISTORY_POD),
            ("job", job), ("model_name", sd.pool_models[pool]), ("namespace", pool[0]),
            ("pod", HISTORY_POD)))
        for reason, share in REASON_SHARES:
            series = f'{FAMILY}_total{{{labels},finished_reason="{reason}"}}'
            total = 0.0
            lines.append(f"{series} 0 {times[0]:.0f}")
            for t, rates in zip(times[1:], per_step):
                total += rates.get(pool, 0.0) * step_s * share
                lines.append(f"{series} {math.floor(total)} {t:.0f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _newest_write(data_dir: Path) -> float | None:
    """When Prometheus last wrote to `data_dir` (its WAL is written on every scrape)."""
    times = [p.stat().st_mtime for p in data_dir.rglob("*") if p.is_file()]
    return max(times) if times else None


def backfill_window(data_dir: Path, *, now: float, days: float,
                    lead_s: float = DEFAULT_LEAD_S) -> tuple[float, float] | None:
    """The minute-aligned [start, end] still to back-fill, or None when nothing is missing."""
    start = math.ceil((now - days * 86400.0) / STEP_S) * STEP_S
    end = math.floor((now - lead_s) / STEP_S) * STEP_S
    newest = _newest_write(data_dir) if data_dir.is_dir() else None
    if newest is not None and (data_dir.parent / MARKER_NAME).is_file():
        start = max(start, math.ceil((newest + lead_s) / STEP_S) * STEP_S)
    return (start, end) if end - start >= 2 * STEP_S else None


@dataclass(frozen=True)
class Backfill:
    start: float
    end: float
    series: int
    samples: int
    seconds: float


def backfill_history(data_dir: Path, scenario: str, *, days: float, now: float | None = None,
                     lead_s: float = DEFAULT_LEAD_S) -> Backfill | None:
    """Write the missing part of `days` of demand history into the TSDB at `data_dir` (which
    no running Prometheus may hold); None when nothing is missing."""
    begun = time.monotonic()
    data_dir = Path(data_dir)
    window = backfill_window(data_dir, now=time.time() if now is None else now, days=days,
                             lead_s=lead_s) if days > 0 else None
    if window is None:
        return None
    promtool = shutil.which("promtool")
    if promtool is None:
        raise HistoryBackfillError("the `promtool` binary is not on PATH (it comes with "
                                   "Prometheus: `make prometheus` or `apt-get install "
                                   "prometheus`); set GPUOPS_HISTORY_DAYS=0 to skip back-fill")
    sd = scenario_demand(scenario)
    text = openmetrics_history(sd, start=window[0], end=window[1])
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=data_dir.parent, prefix="history-") as tmp:
        source = Path(tmp) / "history.om"
        source.write_text(text)
        done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                               f"--max-block-duration={BLOCK_DURATION}", str(source),
                               str(data_dir)],
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HistoryBackfillError(f"promtool could not back-fill {data_dir} (exit "
                                   f"{done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    (data_dir.parent / MARKER_NAME).write_text(json.dumps(
        {"scenario": scenario, "start": window[0], "end": window[1]}) + "\n")
    series = len(sd.pool_models) * len(REASON_SHARES)
    samples = series * (int((window[1] - window[0]) // STEP_S) + 1)
    return Backfill(window[0], window[1], series, samples, time.monotonic() - begun)
