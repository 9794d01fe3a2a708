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

Loads. Latency, queue depth, KV-cache usage and prefix-cache hits depend on how busy a replica
is (`Figure.load_raises`), and the two pools are not equally busy: at a 1 % step the new
pool's replicas are nearly idle while the old ones carry the rest, so a version only slower
than the old one looks faster. Nothing model-free turns a latency at one load into the latency
at another, but for any one version each of these figures moves one way as the load per
replica rises — latency, queue depth and KV-cache usage up (worse), the prefix-cache hit ratio
up too (better: more requests share prefixes) — and that is enough to know which comparisons
prove something (`load_match`, 0.8): a verdict at unequal loads counts only where the load
difference cannot explain it.

    new load / old load < load_match       load-worsened figure (latency): worse FAILs
                                           (worse while less busy), within the limit is
                                           not comparable (less load flatters it);
                                           prefix-cache hits: within the limit passes,
                                           worse is not comparable (less load lowers them)
    new load / old load > 1 / load_match   the mirror: latency within the limit passes,
                                           worse is not comparable; prefix-cache hits
                                           worse FAIL, within the limit not comparable
    in between                             judged as is

where the load is the requests each side's serving replicas finished per second in the window.
A not-comparable gate neither passes nor fails its window; a rollout promotes only once every
load-dependent gate has passed at a comparable load (`unproven`), and the steps carry a step
where the loads match (`with_comparable_step`: with as many new replicas as old, 50 %); a
window judged against the old version's own past counts the direction only
(`against_history`). The
stronger remedy, Kayenta's, compares the new version with a fresh copy of the old of the same
size and traffic (matched at every step, 1 % included) at the price of that copy's GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.metrics import FIGURES, WindowMetrics

DEFAULT_MIN_REQUESTS = 200
DEFAULT_LOAD_MATCH = 0.8  # loads per replica within 0.8x..1.25x of each other are comparable
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
    load_match: float | None = DEFAULT_LOAD_MATCH  # None: compare at whatever loads


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


def parse_analysis(gates: object = None, min_requests: object = DEFAULT_MIN_REQUESTS,
                   load_match: object = DEFAULT_LOAD_MATCH) -> Analysis:
    if isinstance(min_requests, bool) or not isinstance(min_requests, int) or min_requests < 1:
        raise ConfigError("min_requests", f"must be an integer >= 1, got {min_requests!r}")
    if load_match is not None and (isinstance(load_match, bool) or not isinstance(
            load_match, (int, float)) or not 0 < load_match <= 1):
        raise ConfigError("load_match", f"must be a fraction in (0, 1] (0.8: loads per "
                          f"replica within 0.8x..1.25x compare), got {load_match!r}")
    return Analysis(parse_gates(gates), min_requests,
                    None if load_match is None else float(load_match))


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
    note: str = ""  # why it failed without numbers, or why it is not comparable
    final: bool = False  # failed for series that do not exist: waiting will not help
    comparable: bool = True  # False: the loads per replica differ the way that proves nothing

    @property
    def failing(self) -> bool:
        return not self.passed and self.comparable

    @property
    def proven(self) -> bool:
        return self.passed and self.comparable


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    results: tuple[GateResult, ...]
    requests: float | None
    baseline_requests: float | None
    min_requests: int

    load_ratio: float | None = None  # new / old requests per second per serving replica

    @property
    def failed(self) -> tuple[GateResult, ...]:
        return tuple(r for r in self.results if r.failing)

    @property
    def not_comparable(self) -> tuple[GateResult, ...]:
        return tuple(r for r in self.results if not r.comparable)


def load_ratio(new: WindowMetrics, old: WindowMetrics | None) -> float | None:
    """The new pool's requests per second per serving replica over the old pool's."""
    if old is None:
        return None
    new_rps, old_rps = new.rps_per_replica, old.rps_per_replica
    if new_rps is None or not old_rps:
        return None
    return new_rps / old_rps


def _match_loads(result: GateResult, ratio: float | None, load_match: float | None
                 ) -> GateResult:
    """`result` marked not comparable where the loads per replica say it proves nothing."""
    gate = result.gate
    if load_match is None or ratio is None or result.value is None or \
            result.baseline is None or not isinstance(gate, RelativeGate) or \
            not FIGURES[gate.metric].load_dependent:
        return result
    # A verdict at unequal loads counts only where the load difference pushes the figure
    # the other way: less load flatters latency but lowers prefix-cache hits.
    less, more = ratio < load_match, ratio > 1 / load_match
    flattered = (less if FIGURES[gate.metric].load_worsens else more) and result.passed
    blamed = (more if FIGURES[gate.metric].load_worsens else less) and not result.passed
    if not (flattered or blamed):
        return result
    outcome = ("as good" if result.passed else "worse") + \
        (" while less busy" if less else " while busier")
    note = (f"not comparable: the new replicas carried {ratio:.2f}x the old's load per "
            f"replica ({outcome} proves nothing for {gate.metric})")
    return replace(result, comparable=False, note=note)


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
    ratio = load_ratio(new, old)
    results = tuple(_match_loads(_evaluate(g, new, old), ratio, analysis.load_match)
                    for g in analysis.gates)
    relative = any(isinstance(g, RelativeGate) for g in analysis.gates)
    n, base_n = new.requests, old.requests if old is not None else None
    least = analysis.min_requests

    def verdict(status: Status, reason: str) -> Verdict:
        return Verdict(status, reason, results, n, base_n, least, ratio)

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
    failed = [r for r in results if r.failing]
    if failed:
        return verdict(Status.FAIL, "failed: " + ", ".join(r.gate.metric for r in failed))
    unmatched = [r.gate.metric for r in results if not r.comparable]
    if unmatched:
        return verdict(Status.PASS, f"{len(results) - len(unmatched)} gates passed on {n:.0f} "
                       f"requests; not comparable at {ratio:.2f}x the old version's load per "
                       f"replica: {', '.join(unmatched)}")
    return verdict(Status.PASS, f"all {len(results)} gates passed on {n:.0f} requests")


# --- load matching over a rollout -----------------------------------------------------------------

def unproven(analysis: Analysis, verdicts: Sequence[Verdict]) -> tuple[str, ...]:
    """The load-dependent relative gates no passed window has passed at a comparable load:
    what the rollout does not know yet about the new version."""
    if analysis.load_match is None:
        return ()
    proven = {r.gate.metric for v in verdicts if v.status is Status.PASS
              for r in v.results if r.proven}
    return tuple(g.metric for g in analysis.gates if isinstance(g, RelativeGate)
                 and FIGURES[g.metric].load_dependent and g.metric not in proven)


def against_history(analysis: Analysis) -> Analysis:
    """The analysis for a window judged against the old version's own past (the 100 % window
    against the first step's): only the direction of the loads counts (`load_match` 1). Its
    loads never match by construction — the old version carried 100 - w % then, the new one
    carries everything now, and demand drifts in between — and near saturation 5 % more load
    is 10 % more latency, so a latency worse while busier, however slightly, proves nothing;
    errors, and latency worse while less busy, still fail."""
    if analysis.load_match is None:
        return analysis
    return replace(analysis, load_match=1.0)


def step_load_ratio(weight: int, old_replicas: int, new_replicas: int) -> float:
    """New / old requests per replica when the new pool gets `weight` % (weights split the
    requests, each pool spreads them evenly over its replicas)."""
    if not 0 < weight < 100 or old_replicas < 1 or new_replicas < 1:
        raise ValueError(f"a judged step needs 0 < weight < 100 and replicas on both sides, "
                         f"got {weight} %, {old_replicas} old, {new_replicas} new")
    return (weight / new_replicas) / ((100 - weight) / old_replicas)


def with_comparable_step(steps: Sequence[int], old_replicas: int, new_replicas: int,
                         load_match: float | None) -> tuple[int, ...]:
    """`steps`, plus the step where the loads per replica match when no judged step has them
    comparable (1 -> 5 -> 25 -> 100 with as many new replicas as old: 50 % is added)."""
    steps = tuple(steps)
    if load_match is None or old_replicas < 1 or new_replicas < 1:
        return steps
    if any(load_match <= step_load_ratio(w, old_replicas, new_replicas) <= 1 / load_match
           for w in steps if w < 100):
        return steps
    matched = min(99, max(1, round(100 * new_replicas / (old_replicas + new_replicas))))
    return tuple(sorted({*steps, matched}))
