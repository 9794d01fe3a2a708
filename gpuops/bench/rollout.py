"""`gpuops bench rollout`: how soon the serving rollout's gates catch a bad version, what it
costs, and whether they ever roll back a good one, against a fixed-threshold gate.

What runs. Not the Prefect flow: simcluster's serving model (`simcluster/metrics/serving.py`:
M/M/1-like queueing, the cold period after Ready, a version's `Degradation` with load
thresholds, requests drawn one by one from seeded streams) driven window by window
(`rollout_model`), and the rollout's own decision code on what Prometheus would answer: the
window's figures through `tasks/rollout/metrics.window_metrics`, the verdict from
`tasks/rollout/gates.judge`, the warm-up from `warmup.is_warm`, the fixed-capacity stages and
weights from `tasks/rollout/capacity`. The course mirrors `tasks/rollout/run.py`: warm before
traffic, each step's window judged after `window_s` and again every `poll_s` while it WAITs,
until `step_timeout_s`; a step where both pools are as busy added when the steps have none;
promotion held until latency passed at comparable loads; in blue-green, the 100 % window
judged against the old version's window of the first step, when it carried the rest
(`unmatched_loads` does neither: the gates as they were). Why not the flow on simcluster at a fast clock: the flow waits on the
wall clock (windows, polls, readiness), so one rollout with 5-minute windows takes about a
minute at 20x, and 10 seeds x 5 versions x 3 gate sets would take an hour on two cores; the
decisions are the same pure functions. The flow's I/O (PromQL against a real Prometheus, the
route patches) is covered by `tests/serving_rollout/`.

The scenario. One model, a steady diurnal load (`base_rps` at night to `peak_rps`; each seed
starts at its own time of day), an old pool of `replicas` replicas of `capacity_rps`; per seed
these versions are rolled out:

- `good`: as the old one (blue-green: a full copy beside the old);
- `good_no_spare_gpus`: the same with no spare GPUs (fixed-capacity, k = 1);
- `bad`: 5 % of requests fail and TTFT x2 from the first request;
- `slow`: only slower, TTFT x1.3..1.5 (drawn per seed), no errors;
- `bad_under_load`: errors and TTFT x2, but only while a replica's offered load is at least
  `under_load_utilisation` of its capacity (a batching regression); `..._no_spare_gpus`: the
  same in fixed-capacity mode.

Each with four gate sets on the same seeded requests: `gpuops`, the flow's defaults: the
default gates relative to the old version, `min_requests`, the first step adapted to the
pool's traffic (`traffic.adapt_first_step`, the rate measured over the window before the
rollout), and the default baseline `auto`, Kayenta's practice: where there is room (the
blue-green versions here: the scenario's pool has room for both copies) a fresh copy of the
old version as large as the new one, started and warmed with it and given the same weight
below 50 % (`weights.step_split`, as `tasks/rollout/run.py` sets it), so the gates compare
two pools equally busy at every step (1 % included), at the price of that copy's GPUs until
50 %; without room (fixed-capacity) the old pool. `gpuops_old_pool` is the same with
`--baseline none` (the old pool at every step: the default before); `unmatched_loads` that
without the load matching of `Analysis.load_match` (the gates before it); `fixed_threshold`
an Argo/Flagger-style gate: TTFT p90 <= `slo_ttft_p90_s` and error ratio <= 1 %, absolute,
no baseline, no minimum count.

Figures (medians over seeds; simulated seconds):
- `good_time_to_full_s`: new replicas Ready -> 100 % (warm-up included), per mode;
- `bad_windows_to_rollback`: analysis windows from the first traffic to the rollback (the
  failing one counted; a window extended while it waits for requests counts once), per bad
  version, over the seeds it was rolled back in;
- `bad_request_share_pct`: requests the bad version served / all requests, from its first
  traffic to its rollback (or to 100 % when it was missed);
- `false_rollbacks`: good rollouts (both modes, all seeds) that did not reach 100 %;
- `missed_bad`: bad rollouts that reached 100 %.

About a minute for the default 10 seeds x 6 versions x 4 gate sets on one core; `--seeds 1
--versions good,bad` for a few seconds.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuops.bench.rollout_model import ServingStack, Snapshot
from gpuops.simcluster.metrics.serving import Degradation, DemandCurve, ReplicaProfile, Warmup
from gpuops.tasks.rollout.capacity import capacity_stages, capacity_weight
from gpuops.tasks.rollout.gates import (
    DEFAULT_MIN_REQUESTS,
    AbsoluteGate,
    Analysis,
    Status,
    Verdict,
    against_history,
    judge,
    unproven,
    with_comparable_step,
)
from gpuops.tasks.rollout.params import DEFAULT_STEPS, Timing
from gpuops.tasks.rollout.traffic import adapt_first_step
from gpuops.tasks.rollout.warmup import Batch, is_warm
from gpuops.tasks.rollout.weights import WeightSplit, judged_against_baseline, step_split

VERSIONS = ("good", "good_no_spare_gpus", "bad", "slow", "bad_under_load",
            "bad_under_load_no_spare_gpus")
GOOD = ("good", "good_no_spare_gpus")
FIXED_CAPACITY = ("good_no_spare_gpus", "bad_under_load_no_spare_gpus")
GATE_SETS = ("gpuops", "gpuops_old_pool", "unmatched_loads", "fixed_threshold")
WITH_BASELINE = ("gpuops",)  # the default baseline, auto: a fresh copy where there is room
ADAPTED = ("gpuops", "gpuops_old_pool")  # the flow's default: the first step fits traffic


@dataclass(frozen=True)
class Scenario:
    replicas: int = 4
    capacity_rps: float = 30.0
    base_rps: float = 50.0
    peak_rps: float = 95.0
    steps: tuple[int, ...] = DEFAULT_STEPS
    timing: Timing = field(default_factory=Timing)
    min_requests: int = DEFAULT_MIN_REQUESTS
    load_s: float = 60.0  # a new replica's model load (fixed-capacity waits for it)
    slo_ttft_p90_s: float = 1.0
    under_load_utilisation: float = 0.5
    max_first_step: int = 10  # adapted first steps at most this %

    def profile(self) -> ReplicaProfile:
        return ReplicaProfile(capacity_rps=self.capacity_rps, warmup=Warmup())


@dataclass
class Outcome:
    completed: bool
    windows: int  # judged after the first traffic
    time_to_full_s: float | None
    share_pct: float  # of requests, served by the new version from its first traffic
    failed_at: int | None  # the step's weight
    reason: str
    verdicts: list[Verdict] = field(default_factory=list)


def degradations(version: str, rng: random.Random, scenario: Scenario
                 ) -> tuple[Degradation, ...]:
    if version == "bad":
        return (Degradation(ttft_factor=2.0, itl_factor=1.0, error_rate=0.05),)
    if version == "slow":
        return (Degradation(ttft_factor=rng.uniform(1.3, 1.5)),)
    if version.startswith("bad_under_load"):
        return (Degradation(ttft_factor=2.0, error_rate=0.05,
                            min_utilisation=scenario.under_load_utilisation),)
    return ()


def analysis_for(gate_set: str, scenario: Scenario) -> Analysis:
    if gate_set == "fixed_threshold":
        return Analysis(gates=(AbsoluteGate("ttft_p90", scenario.slo_ttft_p90_s),
                               AbsoluteGate("error_ratio", 0.01)), min_requests=1,
                        load_match=None)
    analysis = Analysis(min_requests=scenario.min_requests)
    return replace(analysis, load_match=None) if gate_set == "unmatched_loads" else analysis


class Course:
    """One rollout on a `ServingStack`, deciding as `tasks/rollout/run.py` does."""

    def __init__(self, stack: ServingStack, scenario: Scenario, analysis: Analysis,
                 new_degradations: tuple[Degradation, ...],
                 judge_full: bool = True, baseline_pool: bool = False,
                 rate_rps: float | None = None) -> None:
        self.stack = stack
        self.scenario = scenario
        self.timing = scenario.timing
        self.analysis = analysis
        self.bad = new_degradations
        self.verdicts: list[Verdict] = []
        self.windows = 0
        self.first_traffic: dict[str, Snapshot] | None = None
        # the old pool's window at the first judged step: the 100 % window's baseline
        self.first_window: tuple[Snapshot, Snapshot] | None = None
        self.judge_full = judge_full
        self.full_at: float | None = None  # when 100 % was set
        self.baseline_pool = baseline_pool
        self.split = WeightSplit(100, 0)  # the route's, as set last
        self.rate_rps = rate_rps  # the pool's, before the rollout: steps adapted to it

    def warm_up(self, deadline: float) -> str | None:
        """Batches until the new replicas' TTFT stops falling; why not, or None."""
        previous: dict[str, Batch] = {}
        n = self.timing.warmup_requests
        if n <= 0:
            return None
        while True:
            batches = []
            for r in self.stack.pools["new"].replicas + self.stack.pools["baseline"].replicas:
                failed, ttft = self.stack.warm_up_batch(r, n)
                batches.append(Batch(r.name, n, failed, ttft))
            if any(b.failed * 2 > b.sent for b in batches):
                return "the new version fails its warm-up requests"
            if is_warm(previous, batches, self.timing.warm_tolerance):
                return None
            if self.stack.t >= deadline:
                return "still warming up"
            previous = {b.pod: b for b in batches}
            self.stack.advance(self.timing.warmup_interval_s)

    def set_weight(self, weight: int) -> None:
        if self.first_traffic is None and weight > 0:
            self.first_traffic = self.stack.snapshot()
        # the flow's split: with a baseline, it takes as much as the new pool below 50 %
        split = step_split(weight, baseline=bool(self.stack.pools["baseline"].replicas))
        self.split = split
        self.stack.weight = split.new
        self.stack.baseline_weight = split.baseline

    def judge_step(self, baseline: tuple[Snapshot, Snapshot] | None = None) -> Verdict:
        """The step's window, extended while it WAITs, as `Course.analyse` does; against
        the old pool over the same time or over `baseline`."""
        self.windows += 1
        start = self.stack.snapshot()
        began = self.stack.t
        self.stack.advance(self.timing.window_s)
        while True:
            end = self.stack.snapshot()
            old_start, old_end = baseline or (start["old"], end["old"])
            against = "baseline" if judged_against_baseline(self.split) else "old"
            if against == "baseline":
                old_start, old_end = start["baseline"], end["baseline"]
            analysis = self.analysis if baseline is None else against_history(self.analysis)
            verdict = judge(analysis, self.stack.window("new", start["new"], end["new"]),
                            self.stack.window(against, old_start, old_end))
            if verdict.status is not Status.WAIT or \
                    self.stack.t - began + self.timing.poll_s > self.timing.step_timeout_s:
                self.verdicts.append(verdict)
                if self.first_window is None:
                    self.first_window = (start["old"], end["old"])
                return verdict
            self.stack.advance(self.timing.poll_s)

    def share_pct(self) -> float:
        if self.first_traffic is None:
            return 0.0
        served = self.stack.requests(self.first_traffic, self.stack.snapshot())
        total = sum(served.values())
        return 100.0 * served["new"] / total if total else 0.0

    def outcome(self, started: float, failed_at: int | None, reason: str) -> Outcome:
        completed = failed_at is None and not reason
        full_at = self.stack.t if self.full_at is None else self.full_at
        return Outcome(completed, self.windows,
                       full_at - started if completed else None, self.share_pct(),
                       failed_at, reason, self.verdicts)

    def blue_green(self) -> Outcome:
        s = self.scenario
        started = self.stack.t
        self.stack.add("new", "new", s.replicas, self.bad)
        if self.baseline_pool:
            self.stack.add("baseline", "old", s.replicas)
        why = self.warm_up(started + self.timing.ready_timeout_s)
        if why:
            return self.outcome(started, 0, why)
        steps = s.steps
        if self.rate_rps is not None:  # as `Course._adapt_steps`
            steps = adapt_first_step(steps, rate_rps=self.rate_rps,
                                     min_requests=self.analysis.min_requests,
                                     window_s=self.timing.window_s,
                                     step_timeout_s=self.timing.step_timeout_s,
                                     cap=s.max_first_step).steps
        steps = with_comparable_step(steps, s.replicas, s.replicas, self.analysis.load_match)
        for weight in steps:
            if weight == 100 and unproven(self.analysis, self.verdicts):
                return self.outcome(started, 100, "latency never compared at equal loads")
            self.set_weight(weight)
            if weight == 100:
                self.full_at = self.stack.t
                # as `Course._judge_full`: the whole load against the old one's own window
                if self.judge_full and self.first_window is not None and \
                        self.judge_step(self.first_window).status is Status.FAIL:
                    self.full_at = None
                    return self.outcome(started, 100, self.verdicts[-1].reason)
                break
            verdict = self.judge_step()
            if verdict.status is not Status.PASS:
                return self.outcome(started, weight, verdict.reason)
        return self.outcome(started, None, "")

    def fixed_capacity(self, k: int = 1) -> Outcome:
        s = self.scenario
        started = self.stack.t
        for old_n, new_n in capacity_stages(s.replicas, k):
            self.stack.scale("old", old_n)
            self.stack.advance(s.load_s)  # the freed GPUs load the new replicas' model
            self.stack.add("new", "new", new_n - len(self.stack.pools["new"].replicas),
                           self.bad)
            why = self.warm_up(self.stack.t + self.timing.ready_timeout_s)
            if why:
                return self.outcome(started, 0, why)
            weight = capacity_weight(old_n, new_n)
            if weight == 100 and unproven(self.analysis, self.verdicts):
                return self.outcome(started, 100, "latency never compared at equal loads")
            self.set_weight(weight)
            if weight == 100:
                self.full_at = self.stack.t
                break
            verdict = self.judge_step()
            if verdict.status is not Status.PASS:
                return self.outcome(started, weight, verdict.reason)
        return self.outcome(started, None, "")


def roll_out(scenario: Scenario, version: str, gate_set: str, seed: int) -> Outcome:
    rng = random.Random(f"{seed}")
    day_start = 1_780_000_000 - 1_780_000_000 % 86400  # a midnight UTC
    start = day_start + rng.uniform(0, 86400)
    bad = degradations(version, rng, scenario)
    stack = ServingStack(seed=seed, demand=DemandCurve(scenario.base_rps, scenario.peak_rps),
                         start=start, profile=scenario.profile())
    stack.add("old", "old", scenario.replicas, warm=True)
    before = stack.snapshot()
    stack.advance(scenario.timing.window_s)  # the old version serving before the rollout
    served = sum(stack.requests(before, stack.snapshot()).values())
    adapt = gate_set in ADAPTED and scenario.steps == DEFAULT_STEPS
    course = Course(stack, scenario, analysis_for(gate_set, scenario), bad,
                    judge_full=gate_set != "unmatched_loads",
                    baseline_pool=gate_set in WITH_BASELINE and version not in FIXED_CAPACITY,
                    rate_rps=served / scenario.timing.window_s if adapt else None)
    return course.fixed_capacity() if version in FIXED_CAPACITY else course.blue_green()


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def figures(outcomes: dict[str, list[Outcome]]) -> dict[str, Any]:
    bad = [v for v in outcomes if v not in GOOD]
    return {
        "good_time_to_full_s": {
            v: _median([o.time_to_full_s for o in outcomes[v] if o.time_to_full_s is not None])
            for v in GOOD if v in outcomes},
        "bad_windows_to_rollback": {
            v: _median([o.windows for o in outcomes[v] if not o.completed]) for v in bad},
        "bad_request_share_pct": {
            v: _median([round(o.share_pct, 2) for o in outcomes[v]]) for v in bad},
        "bad_rolled_back": {v: sum(not o.completed for o in outcomes[v]) for v in bad},
        "false_rollbacks": sum(not o.completed for v in GOOD if v in outcomes
                               for o in outcomes[v]),
        "missed_bad": sum(o.completed for v in bad for o in outcomes[v]),
    }


def run(*, seeds: int = 10, versions: Sequence[str] = VERSIONS,
        gate_sets: Sequence[str] = GATE_SETS, scenario: Scenario | None = None
        ) -> dict[str, Any]:
    scenario = scenario or Scenario()
    unknown = sorted(set(versions) - set(VERSIONS))
    if unknown:
        raise ValueError(f"versions: unknown {', '.join(unknown)}; known: {', '.join(VERSIONS)}")
    unknown = sorted(set(gate_sets) - set(GATE_SETS))
    if unknown:
        raise ValueError(f"gate_sets: unknown {', '.join(unknown)}; known: "
                         f"{', '.join(GATE_SETS)}")
    if seeds < 1:
        raise ValueError(f"seeds: must be >= 1, got {seeds}")
    began = time.monotonic()
    result: dict[str, Any] = {
        "seeds": seeds, "replicas": scenario.replicas, "capacity_rps": scenario.capacity_rps,
        "demand_rps": [scenario.base_rps, scenario.peak_rps], "steps": list(scenario.steps),
        "window_s": scenario.timing.window_s, "min_requests": scenario.min_requests,
        "slo_ttft_p90_s": scenario.slo_ttft_p90_s}
    for gate_set in gate_sets:
        outcomes = {v: [roll_out(scenario, v, gate_set, seed) for seed in range(seeds)]
                    for v in versions}
        found = figures(outcomes)
        if gate_set == gate_sets[0]:
            result.update(found)
        result[gate_set] = found
    result["wall_s"] = round(time.monotonic() - began, 1)
    return result


def main(json_output: bool = True, seeds: int = 10, versions: str | None = None,
         gate_sets: str | None = None, steps: str | None = None, window_s: float = 300.0,
         min_requests: int = DEFAULT_MIN_REQUESTS, replicas: int = 4,
         slo_ttft_p90_s: float = 1.0) -> dict[str, Any]:
    """`versions`, `gate_sets`, `steps`: comma-separated (`--steps 1,10,100`)."""
    timing = replace(Timing(), window_s=float(window_s))
    scenario = Scenario(replicas=int(replicas), timing=timing, min_requests=int(min_requests),
                        slo_ttft_p90_s=float(slo_ttft_p90_s),
                        steps=tuple(int(s) for s in str(steps).split(",")) if steps
                        else DEFAULT_STEPS)
    result = run(seeds=int(seeds),
                 versions=tuple(str(versions).split(",")) if versions else VERSIONS,
                 gate_sets=tuple(str(gate_sets).split(",")) if gate_sets else GATE_SETS,
                 scenario=scenario)
    if not json_output:
        for key, value in result.items():
            print(f"{key:>24}: {value}")
    print(json.dumps(result))
    return result
