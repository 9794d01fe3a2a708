"""How each rule condition is checked against one restart's evidence, and what it cites.

A condition that holds returns the exact evidence it rests on (the termination fields, the
event message, the log line), so a diagnosis can show a person *why*, not only *what*.
Conditions are a registry keyed by the name rule files use; a test keeps it in step with
the schema in `rules.py`.

Events and Xids count only near the termination (a rule's `window_s`): a liveness failure an
hour ago does not explain this restart. Pod events about another container of the same pod
(by `involvedObject.fieldPath`, or kubelet's "Container NAME ..." messages) are not this
container's evidence.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache
from typing import Any

from gpuops.common.annotations import EVICTED_BY, EVICTED_BY_FLOW, EVICTED_BY_RUN
from gpuops.tasks.restarts.evidence import (
    ContainerState,
    KubeEvent,
    NodeCondition,
    PodCondition,
    RestartEvidence,
    TerminatedState,
    XidEvent,
    parse_timestamp,
    rfc3339,
)
from gpuops.tasks.restarts.logtime import written_by
from gpuops.tasks.restarts.rules import (
    CONDITION_KEYS,
    Conditions,
    LogWords,
    NodeConditionMatch,
    PodConditionMatch,
    Recency,
    XidMatch,
)

MAX_LINES_PER_CONDITION = 3
_FIELD_PATH_CONTAINER = re.compile(r"\{([^}]+)\}")
# kubelet messages that name their container: Killing, BackOff, Created/Started, Pulling…
_MESSAGE_CONTAINER = re.compile(
    r"^(?:Container|Stopping container|Back-off restarting failed container|"
    r"Created container|Started container) ([a-z0-9]([-a-z0-9]*[a-z0-9])?)\b")
_TRACEBACK_HEAD = "Traceback (most recent call last):"
# `PCI:0000:3b:00`, `00000000:3B:00.0`, `3b:00.0`: (domain, bus, device)
_PCI = re.compile(r"(?:\b([0-9a-fA-F]{4,8}):)?\b([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\b")
_XID_PCI = re.compile(r"\(PCI:([0-9a-fA-F:.]+)\)")


def pci_key(text: str) -> tuple[int, int, int] | None:
    """A PCI bus id as (domain, bus, device), however the driver or nvidia-smi writes it."""
    found = _PCI.search(text or "")
    if found is None:
        return None
    domain, bus, device = found.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16)


def parse_time(value: datetime | str | None) -> datetime | None:
    """A time of the evidence (parsed when the evidence was), or an RFC 3339 string such as
    a timeline's; None when absent or not a time. Naive times are taken as UTC."""
    if not value:
        return None
    try:
        return parse_timestamp(value)
    except ValueError:
        return None


def quoted(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Match:
    """A condition that holds: the evidence lines it cites and values for titles."""

    lines: tuple[str, ...] = ()
    captures: Mapping[str, str] = field(default_factory=dict)
    #: the log lines (0-based line numbers) among `lines`, to judge how recent they are
    log_at: tuple[int, ...] = ()

    def __add__(self, other: Match) -> Match:
        return Match(self.lines + tuple(x for x in other.lines if x not in self.lines),
                     {**other.captures, **self.captures},
                     self.log_at + tuple(i for i in other.log_at if i not in self.log_at))


class RestartFacts:
    """The evidence of one restart, seen the ways conditions need it (computed once)."""

    def __init__(self, evidence: RestartEvidence) -> None:
        self.evidence = evidence
        # A restart's is `lastState`; a container that was not restarted has only its current
        # state; a pod taken away ends with whatever killed it, not with an older crash.
        self.terminated: TerminatedState | None = evidence.termination()
        self.terminated_field = evidence.termination_field

    @cached_property
    def exit_code(self) -> int | None:
        return None if self.terminated is None else self.terminated.exit_code

    @cached_property
    def signal(self) -> int | None:
        """The signal that ended the process: `signal` when given, else exit code - 128."""
        t = self.terminated
        if t is None:
            return None
        if t.signal:
            return t.signal
        if t.exit_code is not None and 128 < t.exit_code <= 128 + 64:
            return t.exit_code - 128
        return None

    @cached_property
    def reference_time(self) -> datetime | None:
        """When the container ended (or, failing that, when the restart was seen)."""
        t = self.terminated
        return parse_time(t.finished_at if t else None) or parse_time(self.evidence.observed_at)

    @cached_property
    def run_seconds(self) -> float | None:
        t = self.terminated
        if t is None:
            return None
        start, end = parse_time(t.started_at), parse_time(t.finished_at)
        return None if start is None or end is None else (end - start).total_seconds()

    @cached_property
    def log_text(self) -> str:
        """The previous log, and after it the termination message when the log does not
        already end with it: with `terminationMessagePolicy: FallbackToLogsOnError` the
        kubelet keeps the log's last lines there, which is all that is left when the log
        itself is gone (rotated, or the node's runtime lost it)."""
        log = self.evidence.previous_log
        message = (self.terminated.message if self.terminated else "").strip()
        if not message or message in log:
            return log
        return log + ("" if not log or log.endswith("\n") else "\n") + message + "\n"

    @cached_property
    def log_lines(self) -> list[str]:
        # split at "\n" only, so line numbers agree with offsets in the text
        lines = self.log_text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [line.rstrip("\r") for line in lines]

    @cached_property
    def pod_events(self) -> list[KubeEvent]:
        return [e for e in self.evidence.pod_events if self._about_this_container(e)]

    def _about_this_container(self, event: KubeEvent) -> bool:
        name = self.evidence.container
        if event.field_path:
            named = _FIELD_PATH_CONTAINER.search(event.field_path)
            return named is None or named.group(1) == name
        in_message = _MESSAGE_CONTAINER.match(event.message)
        return in_message is None or in_message.group(1) == name

    def near(self, when: datetime | str | None, window_s: float) -> bool:
        """Whether a time is within `window_s` of the termination (unknown times count)."""
        at, ref = parse_time(when), self.reference_time
        if at is None or ref is None:
            return True
        return abs((at - ref).total_seconds()) <= window_s

    def termination_line(self) -> str:
        t = self.terminated
        if t is None:
            return "no terminated state recorded"
        line = f"{self.terminated_field}.reason={t.reason or '(none)'} exitCode={t.exit_code}"
        if t.signal:
            line += f" signal={t.signal}"
        return line

    def waiting_line(self, label: str, state: ContainerState) -> str:
        line = f"{label}.waiting.reason={state.waiting_reason}"
        return line + (f" message={quoted(state.waiting_message)}" if state.waiting_message
                       else "")

    def waiting_states(self) -> list[tuple[str, ContainerState]]:
        return [(label, s) for label, s in (("state", self.evidence.state),
                                            ("lastState", self.evidence.last_state))
                if s.waiting_reason]

    @cached_property
    def _line_starts(self) -> list[int]:
        text = self.log_text
        return [0, *(m.end() for m in re.finditer("\n", text))]

    @cached_property
    def written_by(self) -> list[datetime | None]:
        """Per log line, the latest time it can have been written (logtime.py)."""
        ref = self.reference_time
        return written_by(self.log_lines, ref) if ref is not None else [None] * len(
            self.log_lines)

    def log_stale(self, at: Iterable[int], recency: Recency) -> bool:
        """Whether the latest of the log lines `at` is stale by `recency`: written more
        than `within_s` before the termination, or, when nothing after it tells its time,
        followed by more than `tail_lines` lines."""
        positions = list(at)
        if not positions:
            return False
        last = max(positions)
        ref, when = self.reference_time, (self.written_by[last]
                                          if last < len(self.written_by) else None)
        if ref is not None and when is not None:
            return (ref - when).total_seconds() > recency.within_s
        return len(self.log_lines) - 1 - last > recency.tail_lines

    @cached_property
    def container_gpus(self) -> tuple[set[tuple[int, int, int]], set[int]]:
        """The container's GPUs as PCI keys and as indexes (empty: not known)."""
        keys = {k for g in self.evidence.gpus if (k := pci_key(g.pci_bus_id)) is not None}
        indexes = {g.index for g in self.evidence.gpus if g.index is not None}
        return keys, indexes

    def xid_on_container_gpu(self, x: XidEvent) -> bool | None:
        """True/False when the evidence tells whether Xid `x` is on a GPU the container was
        given (by PCI bus id, else by index), None when it cannot."""
        keys, indexes = self.container_gpus
        found = _XID_PCI.search(x.message)
        xid_key = pci_key(x.pci_bus_id) or (pci_key(found.group(1)) if found else None)
        if keys and xid_key is not None:
            return xid_key in keys
        if indexes and x.gpu is not None:
            return x.gpu in indexes
        return None

    def log_matches(self, patterns: list[re.Pattern[str]]) -> list[tuple[int, str]]:
        """(line number, line) of the lines any of `patterns` matches, in log order.

        Each pattern first runs over the whole log (with `^`/`$` at line breaks), and only
        the lines it hits are checked one by one: a 1 MiB log costs a few regex scans, not
        tens of thousands of per-line searches for every rule."""
        text, starts = self.log_text, self._line_starts
        hits: list[tuple[int, str]] = []
        for pattern in patterns:
            wide, pos = _whole_log(pattern), 0
            while (found := wide.search(text, pos)) is not None:
                number = bisect.bisect_right(starts, found.start()) - 1
                line = self.log_lines[number] if number < len(self.log_lines) else ""
                if pattern.search(line):
                    hits.append((number, line))
                end = text.find("\n", found.start())
                if end < 0:
                    break
                pos = end + 1
        return sorted(set(hits))

    @cached_property
    def exception_line(self) -> str | None:
        """The last line of the last Python traceback in the log (the exception raised).

        Prefixes that launchers put on every line (`[rank0]: `) are taken off the lines
        that follow the traceback's head before looking for its unindented last line."""
        return None if self._exception is None else self._exception[2]

    @cached_property
    def exception_line_number(self) -> int | None:
        """The 0-based log line number of `exception_line` (to judge how recent it is)."""
        return None if self._exception is None else self._exception[1]

    @cached_property
    def traceback_lines(self) -> list[tuple[int, str]]:
        """(line number, line) of the last Python traceback, its head to its exception."""
        if self._exception is None:
            return []
        head, last, _ = self._exception
        return list(enumerate(self.log_lines))[head:last + 1]

    @cached_property
    def _exception(self) -> tuple[int, int, str] | None:
        """(head line number, exception line number, exception line) of the last traceback."""
        text = self.log_text
        at = text.rfind(_TRACEBACK_HEAD)
        if at < 0:
            return None
        line_start = text.rfind("\n", 0, at) + 1
        head_number = text.count("\n", 0, at)
        prefix = text[line_start:at]
        for offset, line in enumerate(text[at:].split("\n")[1:], start=1):
            line = line.rstrip("\r")
            body = line[len(prefix):] if prefix and line.startswith(prefix) else line
            if body.strip() and not body[:1].isspace() and not body.startswith(_TRACEBACK_HEAD):
                return head_number, head_number + offset, line
        return None


@lru_cache(maxsize=1024)
def _whole_log(pattern: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(pattern.pattern, pattern.flags | re.MULTILINE)


def event_line(scope: str, event: KubeEvent) -> str:
    count = f" (×{event.count})" if event.count > 1 else ""
    return f"{scope} event {event.reason}{count}: {event.message}"


def node_condition_line(c: NodeCondition) -> str:
    line = f"node condition {c.type}={c.status}"
    line += f" reason={c.reason}" if c.reason else ""
    return line + (f": {c.message}" if c.message else "")


def xid_line(x: XidEvent) -> str:
    gpu = f" on GPU {x.gpu}" if x.gpu is not None else ""
    gpu += f" (PCI {x.pci_bus_id})" if x.pci_bus_id else ""
    at = f" at {rfc3339(x.time)}" if x.time else ""
    return f"node Xid {x.xid}{gpu}{at}" + (f": {x.message}" if x.message else "")


# --- the registry ------------------------------------------------------------------------------

Evaluator = Callable[[Any, RestartFacts, float], Match | None]
EVALUATORS: dict[str, Evaluator] = {}


def condition(key: str) -> Callable[[Evaluator], Evaluator]:
    """Register the check for the rule-file key `key`; a second one for a key is an error."""
    def register(fn: Evaluator) -> Evaluator:
        if key in EVALUATORS:
            raise ValueError(f"condition {key!r} is registered twice "
                             f"({EVALUATORS[key].__name__} and {fn.__name__})")
        EVALUATORS[key] = fn
        return fn
    return register


def evaluate(conditions: Conditions, facts: RestartFacts, window_s: float) -> Match | None:
    """The combined match when every condition of the set holds, else None."""
    combined = Match()
    for key, value in conditions.given():
        found = EVALUATORS[key](value, facts, window_s)
        if found is None:
            return None
        combined = combined + found
    return combined


def _last(lines: Iterable[str], limit: int = MAX_LINES_PER_CONDITION) -> tuple[str, ...]:
    unique = list(dict.fromkeys(lines))
    return tuple(unique[-limit:])


@condition("terminated.reason")
def _terminated_reason(value: list[str], facts: RestartFacts, _: float) -> Match | None:
    t = facts.terminated
    return Match((facts.termination_line(),)) if t and t.reason in value else None


@condition("terminated.exit_code")
def _terminated_exit_code(value: list[tuple[int, int]], facts: RestartFacts,
                          _: float) -> Match | None:
    code = facts.exit_code
    if code is None or not any(low <= code <= high for low, high in value):
        return None
    return Match((facts.termination_line(),))


@condition("terminated.message_regex")
def _terminated_message(value: list[re.Pattern[str]], facts: RestartFacts,
                        _: float) -> Match | None:
    t = facts.terminated
    if t is None or not t.message or not any(p.search(t.message) for p in value):
        return None
    return Match((f"{facts.terminated_field}.message={quoted(t.message)}",))


@condition("signal")
def _signal(value: list[int], facts: RestartFacts, _: float) -> Match | None:
    return Match((facts.termination_line(),)) if facts.signal in value else None


@condition("ran_for_at_most_s")
def _ran_for_at_most(value: float, facts: RestartFacts, _: float) -> Match | None:
    seconds, t = facts.run_seconds, facts.terminated
    if seconds is None or t is None or seconds > value:
        return None
    ran = (f"ran {seconds:g} s (startedAt={rfc3339(t.started_at)} "
           f"finishedAt={rfc3339(t.finished_at)})")
    return Match((ran,))


@condition("waiting_reason")
def _waiting_reason(value: list[str], facts: RestartFacts, _: float) -> Match | None:
    lines = [facts.waiting_line(label, s) for label, s in facts.waiting_states()
             if s.waiting_reason in value]
    return Match(tuple(lines)) if lines else None


@condition("waiting_message_regex")
def _waiting_message(value: list[re.Pattern[str]], facts: RestartFacts,
                     _: float) -> Match | None:
    lines = [facts.waiting_line(label, s) for label, s in facts.waiting_states()
             if any(p.search(s.waiting_message) for p in value)]
    return Match(tuple(lines)) if lines else None


@condition("log_regex")
def _log_regex(value: list[re.Pattern[str]], facts: RestartFacts, _: float) -> Match | None:
    hits = facts.log_matches(value)
    if not hits:
        return None
    cited = _last(line for _, line in hits)
    return Match(cited, log_at=tuple(n for n, line in hits if line in cited))


@condition("log_words")
def _log_words(value: list[LogWords], facts: RestartFacts, _: float) -> Match | None:
    hits: set[tuple[int, str]] = set()
    for words in value:
        first, *rest = words.all_of
        hits.update((n, line) for n, line in facts.log_matches(first)
                    if all(any(t.search(line) for t in group) for group in rest)
                    and not any(p.search(line) for p in words.unless))
    if not hits:
        return None
    ordered = sorted(hits)
    cited = _last(line for _, line in ordered)
    return Match(cited, log_at=tuple(n for n, line in ordered if line in cited))


@condition("log_exception_regex")
def _log_exception(value: list[re.Pattern[str]], facts: RestartFacts,
                   _: float) -> Match | None:
    line = facts.exception_line
    if line is None or not any(p.search(line) for p in value):
        return None
    # shortened: it may stand in a title (a Slack header holds 150 characters)
    named = line.strip() if len(line.strip()) <= 100 else line.strip()[:99] + "…"
    return Match((line,), {"exception": named},
                 log_at=(facts.exception_line_number,) if facts.exception_line_number is not None
                 else ())


@condition("log_traceback_regex")
def _log_traceback_regex(value: list[re.Pattern[str]], facts: RestartFacts,
                         _: float) -> Match | None:
    hits = [(n, line) for n, line in facts.traceback_lines if any(p.search(line) for p in value)]
    if not hits:
        return None
    cited = _last(line for _, line in hits)
    return Match(cited, log_at=tuple(n for n, line in hits if line in cited))


@condition("log_traceback")
def _log_traceback(value: bool, facts: RestartFacts, _: float) -> Match | None:
    line = facts.exception_line
    if value:
        return Match((line,), {"exception": line.strip()}) if line else None
    return Match() if line is None else None


def _events(events: list[KubeEvent], facts: RestartFacts, window_s: float,
            keep: Callable[[KubeEvent], bool], scope: str) -> Match | None:
    hits = [e for e in events if keep(e) and facts.near(e.last_seen, window_s)]
    return Match(_last(event_line(scope, e) for e in hits)) if hits else None


@condition("pod_event_reason")
def _pod_event_reason(value: list[str], facts: RestartFacts, window_s: float) -> Match | None:
    return _events(facts.pod_events, facts, window_s, lambda e: e.reason in value, "pod")


@condition("pod_event_message_regex")
def _pod_event_message(value: list[re.Pattern[str]], facts: RestartFacts,
                       window_s: float) -> Match | None:
    return _events(facts.pod_events, facts, window_s,
                   lambda e: any(p.search(e.message) for p in value), "pod")


@condition("node_event_reason")
def _node_event_reason(value: list[str], facts: RestartFacts, window_s: float) -> Match | None:
    return _events(facts.evidence.node_events, facts, window_s, lambda e: e.reason in value,
                   "node")


@condition("node_event_message_regex")
def _node_event_message(value: list[re.Pattern[str]], facts: RestartFacts,
                        window_s: float) -> Match | None:
    return _events(facts.evidence.node_events, facts, window_s,
                   lambda e: any(p.search(e.message) for p in value), "node")


def _node_condition_holds(want: NodeConditionMatch, have: NodeCondition) -> bool:
    return (have.type == want.type and have.status in want.status
            and (want.reason is None or have.reason in want.reason)
            and (want.message_regex is None
                 or any(p.search(have.message) for p in want.message_regex)))


@condition("node_condition")
def _node_condition(value: list[NodeConditionMatch], facts: RestartFacts,
                    _: float) -> Match | None:
    lines = [node_condition_line(c) for c in facts.evidence.node_conditions
             if any(_node_condition_holds(want, c) for want in value)]
    return Match(tuple(lines)) if lines else None


def _xids(value: list[int], facts: RestartFacts, window_s: float, *,
          assigned: bool = True) -> Match | None:
    seen: dict[tuple[int, int | None, str, datetime | None], XidEvent] = {}
    for x in facts.evidence.node_xids:
        if x.xid not in value or not facts.near(x.time, window_s):
            continue
        if assigned and facts.xid_on_container_gpu(x) is False:
            continue  # on another GPU of the node: not this container's evidence
        seen.setdefault((x.xid, x.gpu, x.pci_bus_id, x.time), x)
    if not seen:
        return None
    hits = list(seen.values())
    last = hits[-1]
    return Match(_last(xid_line(x) for x in hits),
                 {"xid": str(last.xid), "xid_message": last.message})


@condition("node_xid_in")
def _node_xid_in(value: list[int], facts: RestartFacts, window_s: float) -> Match | None:
    return _xids(value, facts, window_s)


@condition("node_xid")
def _node_xid(value: list[XidMatch], facts: RestartFacts, window_s: float) -> Match | None:
    combined = Match()
    for want in value:  # every one must hold; the first's Xid names the title
        found = _xids(want.xids, facts, want.window_s or window_s,
                      assigned=want.gpu == "assigned")
        if found is None:
            return None
        combined = combined + found
    return combined


@condition("pod_reason")
def _pod_reason(value: list[str], facts: RestartFacts, _: float) -> Match | None:
    ev = facts.evidence
    return Match((_pod_status_line(ev),)) if ev.pod_reason in value else None


@condition("pod_message_regex")
def _pod_message(value: list[re.Pattern[str]], facts: RestartFacts, _: float) -> Match | None:
    ev = facts.evidence
    if not ev.pod_message or not any(p.search(ev.pod_message) for p in value):
        return None
    return Match((_pod_status_line(ev),))


def _pod_status_line(ev: RestartEvidence) -> str:
    line = f"pod status.phase={ev.pod_phase or '(unknown)'} reason={ev.pod_reason or '(none)'}"
    return line + (f" message={quoted(ev.pod_message)}" if ev.pod_message else "")


def _pod_condition_holds(want: PodConditionMatch, have: PodCondition) -> bool:
    return (have.type == want.type and have.status in want.status
            and (want.reason is None or have.reason in want.reason))


@condition("pod_condition")
def _pod_condition(value: list[PodConditionMatch], facts: RestartFacts,
                   _: float) -> Match | None:
    lines = []
    for c in facts.evidence.pod_conditions:
        if any(_pod_condition_holds(want, c) for want in value):
            line = f"pod condition {c.type}={c.status}" + (f" reason={c.reason}" if c.reason
                                                           else "")
            lines.append(line + (f": {c.message}" if c.message else ""))
    return Match(tuple(lines)) if lines else None


@condition("pod_deleting")
def _pod_deleting(value: bool, facts: RestartFacts, _: float) -> Match | None:
    if facts.evidence.pod_deleting != value:
        return None
    return Match(("pod is being deleted (metadata.deletionTimestamp is set)",) if value else ())


@condition("workload_rolling_out")
def _workload_rolling_out(value: bool, facts: RestartFacts, _: float) -> Match | None:
    w = facts.evidence.workload
    if w.rolling_out != value:
        return None
    return Match((f"{w.kind}/{w.name} is rolling out a new revision",) if value else ())


@condition("trigger")
def _trigger(value: list[str], facts: RestartFacts, _: float) -> Match | None:
    return Match() if facts.evidence.trigger in value else None


_EVICTING = ("EvictionByEvictionAPI",)


@condition("evicted_by_gpuops")
def _evicted_by_gpuops(value: bool, facts: RestartFacts, _: float) -> Match | None:
    """The pod was evicted through the Eviction API by a gpuops run, which recorded itself on
    the pod first (`gpuops.io/evicted-by`, set by the evict action)."""
    ev = facts.evidence
    run_id = ev.pod_annotations.get(EVICTED_BY, "")
    evicted = ev.trigger == "pod-failed" and (ev.pod_reason == "Evicted" or any(
        c.type == "DisruptionTarget" and c.status == "True" and c.reason in _EVICTING
        for c in ev.pod_conditions))
    # The evict action marks the pod just before it calls the Eviction API and takes the mark
    # off when the eviction is refused, so a marked pod that is being deleted is that
    # eviction, even where no DisruptionTarget condition was recorded (before Kubernetes 1.26).
    evicted = evicted or ev.pod_deleting
    if bool(run_id and evicted) != value:
        return None
    if not value:
        return Match()
    run = ev.pod_annotations.get(EVICTED_BY_RUN, "") or run_id
    flow = ev.pod_annotations.get(EVICTED_BY_FLOW, "") or "a gpuops flow"
    return Match((f"pod annotation {EVICTED_BY}={run_id} (flow run {run} of {flow})",),
                 {"evicted_by_run": run, "evicted_by_flow": flow, "evicted_by": run_id})


@condition("container_kind")
def _container_kind(value: list[str], facts: RestartFacts, _: float) -> Match | None:
    return Match() if facts.evidence.container_kind in value else None


@condition("limits_set")
def _limits_set(value: list[str], facts: RestartFacts, _: float) -> Match | None:
    limits = facts.evidence.limits
    if not all(name in limits for name in value):
        return None
    return Match(tuple(f"limits.{name}={limits[name]}" for name in value))


@condition("namespace")
def _namespace(value: list[str], facts: RestartFacts, _: float) -> Match | None:
    return Match() if facts.evidence.namespace in value else None


@condition("image_regex")
def _image(value: list[re.Pattern[str]], facts: RestartFacts, _: float) -> Match | None:
    return Match() if any(p.search(facts.evidence.image) for p in value) else None


@condition("any")
def _any(value: list[Conditions], facts: RestartFacts, window_s: float) -> Match | None:
    found = [m for m in (evaluate(c, facts, window_s) for c in value) if m is not None]
    if not found:
        return None
    combined = Match()
    for m in found:
        combined = combined + m
    return combined


@condition("not")
def _not(value: Conditions, facts: RestartFacts, window_s: float) -> Match | None:
    return Match() if evaluate(value, facts, window_s) is None else None


_missing = set(CONDITION_KEYS.values()) ^ set(EVALUATORS)
if _missing:  # the schema and the checks must name the same conditions
    raise RuntimeError(f"conditions without both a schema field and a check: {sorted(_missing)}")
