"""The rollout's timeline: one entry per step, with each gate's numbers and the verdict (pure).

What a person reads to see how a rollout went (the run's table artifact) and what an approver
is shown before 100 % (fixed-width text): per step the new version's share, the replicas on
each side (and in the baseline a step was judged against), the window, the requests each side
finished, every gate's value against its limit, and what was decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuops.tasks.rollout.gates import Verdict
from gpuops.tasks.rollout.report import format_value, mark

OUTCOMES = ("passed", "failed", "timed out", "rejected", "not ready", "serving", "rolled back")


@dataclass(frozen=True)
class StepResult:
    index: int  # 1-based
    weight: int  # the new version's share, %
    old_replicas: int  # Ready, when the step began
    new_replicas: int
    started: datetime
    ended: datetime | None = None
    verdict: Verdict | None = None
    outcome: str = "passed"
    note: str = ""
    baseline_replicas: int | None = None  # Ready in the baseline it was judged against

    @property
    def window_s(self) -> float | None:
        if self.ended is None:
            return None
        return (self.ended - self.started).total_seconds()


def _gates(verdict: Verdict | None) -> str:
    if verdict is None:
        return "-"
    parts = []
    for r in verdict.results:
        parts.append(f"{r.gate.metric} {format_value(r.gate.metric, r.value)} "
                     f"(limit {format_value(r.gate.metric, r.limit)}) "
                     f"{'ok' if mark(r) == 'pass' else mark(r)}")
    return "; ".join(parts)


def timeline_rows(steps: Sequence[StepResult]) -> list[dict[str, str]]:
    """One row per step, for `create_table_artifact`."""
    rows = []
    for s in steps:
        v = s.verdict
        rows.append({
            "step": str(s.index), "new %": str(s.weight),
            "replicas old/new": f"{s.old_replicas}/{s.new_replicas}",
            "replicas baseline": "-" if s.baseline_replicas is None
            else str(s.baseline_replicas),
            "started": s.started.strftime("%H:%M:%S"),
            "window": "-" if s.window_s is None else f"{s.window_s:.0f} s",
            "requests new/old": "-" if v is None else
            f"{format_value('requests', v.requests)}/"
            f"{format_value('requests', v.baseline_requests)}",
            # how busy the new replicas were next to the old ones: latency compares near 1
            "load per replica new/old": "-" if v is None or v.load_ratio is None
            else f"{v.load_ratio:.2f}",
            "gates": _gates(v), "verdict": "-" if v is None else v.status.value,
            "outcome": s.outcome, "note": s.note})
    return rows


def timeline_text(steps: Sequence[StepResult]) -> str:
    """The steps as fixed-width lines, then each judged step's failing or closest gates."""
    if not steps:
        return "no step yet"
    lines = ["step  new %  old/new  window  requests new/old  outcome"]
    for s in steps:
        v = s.verdict
        requests = "-" if v is None else (f"{format_value('requests', v.requests)}/"
                                          f"{format_value('requests', v.baseline_requests)}")
        window = "-" if s.window_s is None else f"{s.window_s:.0f} s"
        lines.append(f"{s.index:<4}  {s.weight:>5}  {s.old_replicas:>3}/{s.new_replicas:<3}  "
                     f"{window:>6}  {requests:>16}  {s.outcome}")
    last = next((s for s in reversed(steps) if s.verdict is not None), None)
    if last is not None and last.verdict is not None:
        lines.append(f"gates at step {last.index} ({last.weight} %):")
        lines += [f"  {r.gate.metric}: {format_value(r.gate.metric, r.value)} vs old "
                  f"{format_value(r.gate.metric, r.baseline)}, limit "
                  f"{format_value(r.gate.metric, r.limit)} "
                  f"{'ok' if mark(r) == 'pass' else mark(r)}"
                  for r in last.verdict.results]
    return "\n".join(lines)
