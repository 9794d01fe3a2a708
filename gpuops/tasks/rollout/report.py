"""A verdict as people read it: table rows for an artifact, fixed-width text for Slack (pure).

Values in their units (ms or s, %, counts); a ratio's slack in percentage points, so
`max(1.00 %, baseline + 0.50 pt)` reads as the gate was meant.
"""

from __future__ import annotations

from gpuops.tasks.rollout.gates import AbsoluteGate, Gate, GateResult, Verdict
from gpuops.tasks.rollout.metrics import FIGURES


def format_value(metric: str, value: float | None) -> str:
    if value is None:
        return "no data"
    unit = FIGURES[metric].unit
    if unit == "s":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.2f} s"
    if unit == "ratio":
        return f"{value * 100:.2f} %"
    if unit == "requests":
        return f"{value:.0f}"
    return f"{value:.2f}"


def _delta(metric: str, value: float) -> str:
    if FIGURES[metric].unit == "ratio":
        return f"{value * 100:.2f} pt"
    return format_value(metric, value)


def describe(gate: Gate) -> str:
    """`ttft_p90 <= 1.2 x baseline`, `error_ratio <= max(1.00 %, baseline + 0.50 pt)`."""
    higher = FIGURES[gate.metric].higher_is_better
    op = ">=" if higher else "<="
    if isinstance(gate, AbsoluteGate):
        return f"{gate.metric} {op} {format_value(gate.metric, gate.bound)}"
    bound = "baseline" if gate.factor == 1 else f"{gate.factor:g} x baseline"
    if gate.slack:
        bound += f" {'-' if higher else '+'} {_delta(gate.metric, gate.slack)}"
    if gate.floor is not None:
        bound = f"{'min' if higher else 'max'}({format_value(gate.metric, gate.floor)}, {bound})"
    return f"{gate.metric} {op} {bound}"


def result_row(result: GateResult) -> dict[str, str]:
    metric = result.gate.metric
    return {"gate": describe(result.gate), "new": format_value(metric, result.value),
            "baseline": "-" if isinstance(result.gate, AbsoluteGate)
            else format_value(metric, result.baseline),
            "limit": format_value(metric, result.limit),
            "result": mark(result), "note": result.note}


def mark(result: GateResult) -> str:
    """pass, FAIL, or n/c: not comparable at these loads per replica (`gates`)."""
    if not result.comparable:
        return "n/c"
    return "pass" if result.passed else "FAIL"


def verdict_rows(verdict: Verdict) -> list[dict[str, str]]:
    """One row per gate, for `create_table_artifact`."""
    return [result_row(r) for r in verdict.results]


def verdict_text(verdict: Verdict) -> str:
    """The verdict as a fixed-width table (a Slack code block, a log line)."""
    rows = verdict_rows(verdict)
    columns = ("gate", "new", "baseline", "limit", "result")
    widths = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in columns}
    lines = [f"{verdict.status.value.upper()}: {verdict.reason}",
             (f"requests: new {format_value('requests', verdict.requests)}, old "
             f"{format_value('requests', verdict.baseline_requests)} "
             f"(at least {verdict.min_requests} each)"
             + ("" if verdict.load_ratio is None else
                f"; load per replica new/old {verdict.load_ratio:.2f}")),
             "  ".join(c.ljust(widths[c]) for c in columns)]
    for row in rows:
        line = "  ".join(row[c].ljust(widths[c]) for c in columns)
        lines.append(f"{line}  {row['note']}".rstrip())
    return "\n".join(lines)
