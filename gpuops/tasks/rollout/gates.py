"""Gates: is the new version's analysis window as good as the old version's? (pure)

A gate bounds one figure of `metrics.FIGURES` (lower is better but for the prefix-cache hit
ratio, where the bounds below mirror):

    relative   value <= max(floor, factor x baseline + slack)    (factor 1, slack 0, no floor)
    absolute   value <= limit

so `TTFT p90 <= 1.2 x baseline` is `{metric: ttft_p90, factor: 1.2}` and `error ratio <=
max(1 %, baseline + 0.5 pt)` is `{metric: error_ratio, slack: 0.005, floor: 0.01}`; a floor
keeps a near-zero baseline from making any noise a failure. The baseline is the old version's
window over the same time, so both versions see the same load and time of day.

Judging (`judge`): PASS when every gate passes; FAIL when one fails, and at once when a figure
has no data that waiting cannot bring (its series do not exist: fail closed, never pass for
want of data); WAIT below `min_requests` finished requests on either side (a 1 % step is not
judged on noise) — the gates' numbers so far are in the verdict all the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.metrics import FIGURES, WindowMetrics

DEFAULT_MIN_REQUESTS = 200
GATED = tuple(k for k in FIGURES if k != "requests")  # requests: judged by min_requests


@dataclass(frozen=True)
class RelativeGate:
    metric: str
    factor: float = 1.0
    slack: float = 0.0
    floor: float | None = None

    kind = "relative"

    def limit(self, baseline: float) -> float:
        if FIGURES[self.metric].higher_is_better:
            low = baseline * self.factor - self.slack
            return low if self.floor is None else min(self.floor, low)
        high = baseline * self.factor + self.slack
        return high if self.floor is None else max(self.floor, high)

    def as_params(self) -> dict[str, object]:
        params: dict[str, object] = {"metric": self.metric}
        if self.factor != 1.0:
            params["factor"] = self.factor
        if self.slack:
            params["slack"] = self.slack
        if self.floor is not None:
            params["floor"] = self.floor
        return params


@dataclass(frozen=True)
class AbsoluteGate:
    metric: str
    bound: float  # the most allowed (for the prefix-cache hit ratio: the least)

    kind = "absolute"

    def as_params(self) -> dict[str, object]:
        return {"metric": self.metric, "limit": self.bound}


Gate = RelativeGate | AbsoluteGate

DEFAULT_GATES: tuple[Gate, ...] = (
    RelativeGate("error_ratio", slack=0.005, floor=0.01),
    RelativeGate("ttft_p90", factor=1.2),
    RelativeGate("ttft_p99", factor=1.5),
    RelativeGate("ttft_mean", factor=1.2),
    RelativeGate("itl_p90", factor=1.2),
    RelativeGate("itl_mean", factor=1.2),
    RelativeGate("queue_depth", factor=1.5, floor=1.0),
    RelativeGate("kv_cache_usage", slack=0.1, floor=0.9),
    RelativeGate("prefix_cache_hit_ratio", factor=0.8),
)


@dataclass(frozen=True)
class Analysis:
    gates: tuple[Gate, ...] = DEFAULT_GATES
    min_requests: int = DEFAULT_MIN_REQUESTS


# --- parsing -------------------------------------------------------------------------------------

_KEYS = ("metric", "factor", "slack", "floor", "limit")


def _number(raw: Mapping[str, object], key: str, where: str, *, positive: bool = False,
            ratio: bool = False) -> float | None:
    if key not in raw:
        return None
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        raise ConfigError(f"{where}.{key}", f"must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{where}.{key}", f"must be {'> 0' if positive else '>= 0'}, "
                          f"got {value}")
    if ratio and value > 1:
        raise ConfigError(f"{where}.{key}", f"{raw['metric']} is a fraction (0.01 = 1 %), "
                          f"got {value}")
    return float(value)


def parse_gate(raw: object, where: str = "gate") -> Gate:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, f"must be a mapping like {{metric: ttft_p90, factor: 1.2}}, "
                          f"got {raw!r}")
    unknown = sorted(map(str, set(raw) - set(_KEYS)))
    if unknown:
        raise ConfigError(where, f"unknown key(s) {', '.join(map(repr, unknown))}; known: "
                          f"{', '.join(_KEYS)}")
    metric = raw.get("metric")
    if metric == "requests":
        raise ConfigError(f"{where}.metric", "requests are not gated; set `min_requests`")
    if not isinstance(metric, str) or metric not in FIGURES:
        raise ConfigError(f"{where}.metric", f"unknown metric {metric!r}; known: "
                          f"{', '.join(GATED)}")
    ratio = FIGURES[metric].unit == "ratio"
    factor = _number(raw, "factor", where, positive=True)
    slack = _number(raw, "slack", where, ratio=ratio)
    floor = _number(raw, "floor", where, ratio=ratio)
    limit = _number(raw, "limit", where, ratio=ratio)
    if limit is not None:
        if (factor, slack, floor) != (None, None, None):
            raise ConfigError(where, "give `limit` (an absolute gate) or `factor`/`slack`/"
                              "`floor` (a gate relative to the old version), not both")
        return AbsoluteGate(metric, limit)
    if (factor, slack, floor) == (None, None, None):
        raise ConfigError(where, "sets no bound: give `limit` (absolute) or `factor`, "
                          "`slack`, `floor` (relative to the old version)")
    return RelativeGate(metric, 1.0 if factor is None else factor, slack or 0.0, floor)


def parse_gates(raw: object, field: str = "gates") -> tuple[Gate, ...]:
    """Gates from parameters (a list of mappings); None: `DEFAULT_GATES`. A list replaces
    the defaults whole (what the form shows is what judges)."""
    if raw is None:
        return DEFAULT_GATES
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        raise ConfigError(field, f"must be a list of gates, got {raw!r}")
    if not raw:
        raise ConfigError(field, "is empty: a rollout judged by no gate would always pass")
    gates: list[Gate] = []
    seen: dict[tuple[str, str], int] = {}
    for i, item in enumerate(raw):
        gate = parse_gate(item, f"{field}[{i}]")
        key = (gate.metric, gate.kind)
        if key in seen:
            raise ConfigError(f"{field}[{i}]", f"a second {gate.kind} gate on {gate.metric!r} "
                              f"(the first is {field}[{seen[key]}])")
        seen[key] = i
        gates.append(gate)
    return tuple(gates)


def parse_analysis(gates: object = None, min_requests: object = DEFAULT_MIN_REQUESTS
                   ) -> Analysis:
    if isinstance(min_requests, bool) or not isinstance(min_requests, int) or min_requests < 1:
        raise ConfigError("min_requests", f"must be an integer >= 1, got {min_requests!r}")
    return Analysis(parse_gates(gates), min_requests)


# --- judging -------------------------------------------------------------------------------------

class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WAIT = "wait"


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    value: float | None  # the new version's
    baseline: float | None  # the old version's (relative gates)
    limit: float | None
    passed: bool
    note: str = ""  # why it failed without numbers
    final: bool = False  # failed for series that do not exist: waiting will not help


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    results: tuple[GateResult, ...]
    requests: float | None
    baseline_requests: float | None
    min_requests: int

    @property
    def failed(self) -> tuple[GateResult, ...]:
        return tuple(r for r in self.results if not r.passed)


def _evaluate(gate: Gate, new: WindowMetrics, old: WindowMetrics | None) -> GateResult:
    value = new.value(gate.metric)
    if isinstance(gate, AbsoluteGate):
        base, limit = None, gate.bound
    else:
        base = old.value(gate.metric) if old is not None else None
        if base is None:
            note = "no baseline window" if old is None else \
                "old version: " + old.missing.get(gate.metric, "no data")
            return GateResult(gate, value, None, None, False, note,
                              old is None or gate.metric in old.absent)
        limit = gate.limit(base)
    if value is None:
        return GateResult(gate, None, base, limit, False,
                          "new version: " + new.missing.get(gate.metric, "no data"),
                          gate.metric in new.absent)
    higher = FIGURES[gate.metric].higher_is_better
    return GateResult(gate, value, base, limit, value >= limit if higher else value <= limit)


def judge(analysis: Analysis, new: WindowMetrics, old: WindowMetrics | None) -> Verdict:
    """The new version's window against the old one's over the same time (`old` may be None
    when only absolute gates are set)."""
    results = tuple(_evaluate(g, new, old) for g in analysis.gates)
    relative = any(isinstance(g, RelativeGate) for g in analysis.gates)
    n, base_n = new.requests, old.requests if old is not None else None
    least = analysis.min_requests

    def verdict(status: Status, reason: str) -> Verdict:
        return Verdict(status, reason, results, n, base_n, least)

    final = [r for r in results if r.final]
    if final:
        return verdict(Status.FAIL, "no data: " + "; ".join(
            f"{r.gate.metric}: {r.note}" for r in final))
    for side, window in (("new", new), ("old", old if relative else None)):
        if window is not None and "requests" in window.absent:
            return verdict(Status.FAIL, f"no request counts for the {side} version: "
                           + window.missing.get("requests", "no data"))
    # The series exist but have no samples in the window yet (it is shorter than two scrapes):
    # more time brings them; a flow's step timeout ends a wait that never does.
    if n is None:
        return verdict(Status.WAIT, "no request samples for the new version in the window yet")
    if relative and base_n is None:
        return verdict(Status.WAIT, "no request samples for the old version in the window yet")
    if n < least:
        return verdict(Status.WAIT, f"the new version finished {n:.0f} requests in the "
                       f"window; {least} are needed to judge")
    if relative and base_n is not None and base_n < least:
        return verdict(Status.WAIT, f"the old version finished {base_n:.0f} requests in the "
                       f"window; {least} are needed to compare with it")
    failed = [r for r in results if not r.passed]
    if failed:
        return verdict(Status.FAIL, "failed: " + ", ".join(r.gate.metric for r in failed))
    return verdict(Status.PASS, f"all {len(results)} gates passed on {n:.0f} requests")
