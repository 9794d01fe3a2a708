"""A runbook run's plan and record as data, and how a person reads them (pure).

The plan is what a dry run computes from live state: each step's rendered call, what it
would change, what would get in its way. The same text is what an approval shows, so the
approvals layer's digest binds the answer to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TARGET_ARGS = {"node": "node", "pool": "nodepool"}  # argument -> the lock target's kind


@dataclass(frozen=True)
class PlannedStep:
    name: str
    action: str
    args: Mapping[str, Any]
    skipped: str = ""  # why it would not run (its `when:` is false)
    changes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    output: Mapping[str, Any] | None = None

    def call(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.action}({shown})"


@dataclass(frozen=True)
class Plan:
    runbook: str
    parameters: Mapping[str, Any]
    checks: tuple[tuple[str, bool, str], ...] = ()  # preconditions: (check, ok, detail)
    steps: tuple[PlannedStep, ...] = ()

    def changes(self) -> tuple[str, ...]:
        return tuple(c for s in self.steps for c in s.changes)

    def targets(self) -> tuple[str, ...]:
        found: list[str] = []
        for step in self.steps:
            for arg, kind in TARGET_ARGS.items():
                value = step.args.get(arg)
                if isinstance(value, str) and f"{kind}/{value}" not in found and step.changes:
                    found.append(f"{kind}/{value}")
        return tuple(found)

    def text(self) -> str:
        """The plan as an approval shows it: every step, its call, its changes."""
        lines = [f"runbook {self.runbook}"]
        for i, step in enumerate(self.steps, 1):
            if step.skipped:
                lines.append(f"{i}. {step.name}: skipped ({step.skipped})")
                continue
            lines.append(f"{i}. {step.name}: {step.call()}")
            lines += [f"   - {change}" for change in step.changes]
            lines += [f"   ! {warning}" for warning in step.warnings]
        return "\n".join(lines)


@dataclass
class StepRecord:
    name: str
    action: str
    args: Mapping[str, Any]
    outcome: str  # done | skipped | failed | undone | undo-failed | compensation
    seconds: float = 0.0
    detail: str = ""


@dataclass
class RunRecord:
    runbook: str
    parameters: Mapping[str, Any]
    dry_run: bool
    outcome: str = "completed"  # completed | failed | not-approved | plan-changed | ...
    message: str = ""
    approver: str = ""
    steps: list[StepRecord] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    plan: str = ""  # the plan's text (a dry run's answer)
    started_by: str = ""  # as the run declared it
    earlier: list[str] = field(default_factory=list)  # what earlier runs left, undone first


def run_markdown(record: RunRecord, plan: Plan | None) -> str:
    """The run's artifact: parameters, the plan, each step's call, result and duration,
    who approved, what was undone."""
    mode = "dry run" if record.dry_run else "run"
    out = [f"# Runbook {record.runbook} ({mode}): {record.outcome}", ""]
    if record.message:
        out += [record.message, ""]
    out += ["## Parameters", "", "| name | value |", "|---|---|"]
    out += [f"| {k} | `{v}` |" for k, v in record.parameters.items()]
    if record.earlier:
        out += ["", "## Left by earlier runs", ""] + [f"- {line}" for line in record.earlier]
    if plan is not None:
        if plan.checks:
            out += ["", "## Preconditions", "", "| check | holds | detail |", "|---|---|---|"]
            out += [f"| {c} | {'yes' if ok else 'NO'} | {d} |" for c, ok, d in plan.checks]
        out += ["", "## Plan", "", "```", plan.text(), "```"]
    if record.steps:
        out += ["", "## Steps", "", "| step | call | outcome | seconds | detail |",
                "|---|---|---|---|---|"]
        for s in record.steps:
            call = f"{s.action}({', '.join(f'{k}={v!r}' for k, v in s.args.items())})"
            detail = s.detail.replace("|", "\\|").replace("\n", " ")
            out.append(f"| {s.name} | `{call}` | {s.outcome} | {s.seconds:.1f} | {detail} |")
    if record.started_by:
        out += ["", f"Started by {record.started_by}."]
    if record.approver:
        out += ["", f"Approved by {record.approver}."]
    return "\n".join(out) + "\n"
