"""Why did this container restart? A cause, a confidence and the exact evidence behind it.

Every rule (`restart_rules.yaml`, plus an operator's own) is checked against the evidence;
a rule that holds scores its base confidence plus a small bonus for each supporting
condition that also holds, less its `recency.stale_penalty` when the log lines it rests on
were written long before the termination (an error the application handled earlier). The best score wins, ties going to the higher `priority`; the
best rule of each other cause that held is kept as an alternative, so a person sees "liveness
(0.90), or an external SIGKILL (0.50)" rather than a verdict with no doubt. There is always a
diagnosis: when no rule holds it is `unknown`, with the termination facts as its evidence.

Exit code 137 is the classic trap: it means SIGKILL, which is an OOM kill only when the
reason says `OOMKilled`; near a failing liveness probe it is the kubelet's kill, otherwise
someone else's. The rules encode that; see the shipped file.

Pure: evidence in, diagnosis out; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from gpuops.common.redact import redact_text
from gpuops.tasks.restarts.conditions import Match, RestartFacts, evaluate
from gpuops.tasks.restarts.evidence import RestartEvidence
from gpuops.tasks.restarts.rules import Rule, RuleSet, default_rules, load_rules

__all__ = ["Diagnosis", "RuleSet", "default_rules", "diagnose", "exit_meaning", "load_rules"]

UNKNOWN_CAUSE = "unknown"
UNKNOWN_CONFIDENCE = 0.1
MAX_ALTERNATIVES = 3
MAX_EVIDENCE_LINES = 12

SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
                7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE",
                14: "SIGALRM", 15: "SIGTERM"}
EXIT_MEANINGS = {
    0: "success",
    1: "general application error",
    2: "misuse of a shell builtin or bad command-line arguments",
    126: "command found but not executable",
    127: "command not found",
    128: "the container could not start its process",
    130: "interrupted (SIGINT)",
    134: "aborted (SIGABRT: abort(), a failed assertion or an uncaught C++ exception)",
    137: "killed (SIGKILL)",
    139: "segmentation fault (SIGSEGV)",
    143: "asked to stop (SIGTERM)",
    255: "exit status out of range",
}


class Diagnosis(BaseModel):
    """The cause of one restart, with the lines of evidence that support it."""

    model_config = ConfigDict(frozen=True)

    cause: str
    title: str
    confidence: float = Field(ge=0, le=1)
    evidence_lines: list[str]
    explanation: str
    fault: bool  # False for planned terminations and clean completions
    rule_id: str
    alternatives: list[tuple[str, float]] = Field(default_factory=list)
    #: the GPU Xid an Xid rule matched (what a quarantine acts on); None for other causes
    xid: int | None = None


@dataclass(frozen=True)
class _Scored:
    rule: Rule
    score: float
    match: Match
    order: int

    @property
    def key(self) -> tuple[float, int, int]:
        return (-self.score, -self.rule.priority, self.order)


def exit_meaning(code: int | None, signal: int | None = None) -> str:
    """What an exit code says, in words: 137 -> "killed (SIGKILL)".

    Without `signal`, codes 129..192 are read as 128 + the signal that ended the process."""
    if code is None:
        return "no exit code"
    if code in EXIT_MEANINGS:
        return EXIT_MEANINGS[code]
    if signal is None and 128 < code <= 192:
        signal = code - 128
    if signal is not None:
        return f"ended by signal {signal} ({SIGNAL_NAMES.get(signal, 'unknown signal')})"
    return "application-defined error" if code else "success"


def _facts_for_templates(facts: RestartFacts, captures: Mapping[str, str]) -> dict[str, str]:
    ev, t = facts.evidence, facts.terminated
    signal = facts.signal
    values = {
        "container": ev.container, "container_kind": ev.container_kind, "pod": ev.pod,
        "namespace": ev.namespace, "node": ev.node or "(unscheduled)", "image": ev.image,
        "workload": f"{ev.workload.kind}/{ev.workload.name}",
        "restart_count": str(ev.restart_count),
        "exit_code": "none" if facts.exit_code is None else str(facts.exit_code),
        "reason": (t.reason if t else "") or "(none)",
        "signal": "none" if signal is None else str(signal),
        "signal_name": SIGNAL_NAMES.get(signal, "none") if signal else "none",
        "exit_meaning": exit_meaning(facts.exit_code, signal),
        "memory_limit": ev.limits.get("memory", "no limit"),
        "memory_request": ev.requests.get("memory", "no request"),
    }
    return {**values, **captures}


def _render(template: str, values: Mapping[str, str]) -> str:
    """Fill `{name}` placeholders with known facts; unknown ones are left as written."""
    return re.sub(r"\{([a-z_]+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


def _score(rule: Rule, facts: RestartFacts, order: int) -> _Scored | None:
    required = evaluate(rule.when, facts, rule.window_s)
    if required is None:
        return None
    match, extra = required, 0
    for conditions in rule.supporting:
        found = evaluate(conditions, facts, rule.window_s)
        if found is not None:
            match, extra = match + found, extra + 1
    score = rule.confidence + rule.bonus * extra
    if facts.log_stale(required.log_at, rule.recency):
        # what the rule rests on was logged long before the end: weigh it by its age
        score -= rule.recency.stale_penalty
    return _Scored(rule, max(0.0, min(1.0, score)), match, order)


def _clean(lines: list[str]) -> list[str]:
    return [redact_text(line) for line in dict.fromkeys(lines)][:MAX_EVIDENCE_LINES]


def _unknown(facts: RestartFacts) -> Diagnosis:
    ev = facts.evidence
    lines = [facts.termination_line()]
    lines += [facts.waiting_line(label, s) for label, s in facts.waiting_states()]
    if facts.exception_line:
        lines.append(facts.exception_line)
    elif facts.log_lines:
        lines.append(facts.log_lines[-1])
    if ev.log_error:
        lines.append(f"previous log unavailable: {ev.log_error}")
    meaning = exit_meaning(facts.exit_code, facts.signal)
    return Diagnosis(
        cause=UNKNOWN_CAUSE, title="Restart with no recognised cause",
        confidence=UNKNOWN_CONFIDENCE, evidence_lines=_clean(lines),
        explanation=(f"No rule matched. The container {ev.container!r} ended with exit code "
                     f"{facts.exit_code} ({meaning}). Read the log tail and events below; "
                     "if this cause recurs, add a rule for it (see `load_rules`)."),
        fault=True, rule_id="fallback-unknown")


def diagnose(evidence: RestartEvidence, rules: RuleSet | None = None) -> Diagnosis:
    """The most likely cause of one restart; never fails to answer (`unknown` at worst)."""
    facts = RestartFacts(evidence)
    candidates = [s for i, rule in enumerate((rules or default_rules()).enabled())
                  if (s := _score(rule, facts, i)) is not None]
    if not candidates:
        return _unknown(facts)
    candidates.sort(key=lambda s: s.key)
    best = candidates[0]
    alternatives: dict[str, float] = {}
    for other in candidates[1:]:
        if other.rule.cause != best.rule.cause and other.rule.cause not in alternatives:
            alternatives[other.rule.cause] = round(other.score, 2)
    values = _facts_for_templates(facts, best.match.captures)
    return Diagnosis(
        cause=best.rule.cause, title=redact_text(_render(best.rule.title, values)),
        confidence=round(best.score, 3),
        evidence_lines=_clean(list(best.match.lines) or [facts.termination_line()]),
        explanation=redact_text(_render(best.rule.explanation, values).strip()),
        fault=best.rule.fault, rule_id=best.rule.id,
        alternatives=list(alternatives.items())[:MAX_ALTERNATIVES],
        xid=_xid(best.match.captures.get("xid")))


def _xid(captured: str | None) -> int | None:
    return int(captured) if captured and captured.isdigit() else None
