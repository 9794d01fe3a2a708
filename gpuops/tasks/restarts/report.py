"""What people read about restarts: Slack messages, the per-restart report, the timeline rows.

One Slack thread per (cluster, workload, cause): a parent message that is edited as restarts
add up ("5× in 30 min, same cause"), a short threaded reply for each batch of later restarts, and a
"recovered" reply. Each restart also gets a markdown artifact with everything captured, and
a row in its workload's timeline table.

Everything rendered from evidence passes through `redact_text` here, even though the watcher
already masked the pod's env values: log lines are the likeliest place for a token, and this
is the last step before text leaves gpuops (defence in depth). Slack limits are respected
(a section's text is capped at 3,000 characters, a header at 150): long text is cut on line
boundaries, keeping the end of a log, which is where the reason is.

Pure: data in, Block Kit / markdown / rows out; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuops.common.redact import redact_text
from gpuops.tasks.restarts.conditions import parse_time
from gpuops.tasks.restarts.diagnose import Diagnosis, exit_meaning
from gpuops.tasks.restarts.evidence import (
    ContainerState,
    JobFailure,
    RestartEvidence,
    Workload,
    rfc3339,
)

SECTION_LIMIT = 3000  # Slack: a section's text
FIELD_LIMIT = 2000  # Slack: one section field
HEADER_LIMIT = 150  # Slack: a header's plain text
CONTEXT_LIMIT = 2000
FALLBACK_LIMIT = 400
LOG_LINE_LIMIT = 300  # one log line in a Slack code block
PARENT_LOG_LINES = 20
REPLY_LOG_LINES = 8
REPLY_MAX_LISTED = 12  # restarts listed one per line in a reply
ARTIFACT_LOG_LINES = 200
REDACTION_MARGIN_LINES = 64  # a 4096-bit PEM key is about 50 lines
TRUNCATED = "… (truncated)"
_NEVER = datetime.min.replace(tzinfo=UTC)

Restart = tuple[RestartEvidence, Diagnosis]


@dataclass(frozen=True)
class RestartLinks:
    """Where a person can read more (URLs made by the flow; any may be missing): the
    restart's own report artifact and the workload's timeline; the flow run (a standing run
    handles hundreds of restarts) only when there is neither to point at."""

    flow_run_url: str | None = None
    artifact_url: str | None = None
    timeline_url: str | None = None


@dataclass(frozen=True)
class SlackMessage:
    """Block Kit blocks plus the plain `text` Slack shows in notifications and old clients."""

    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)


def thread_key(evidence: RestartEvidence, diagnosis: Diagnosis) -> str:
    """One Slack thread per (cluster, workload, cause)."""
    return f"{evidence.workload_key}/{diagnosis.cause}"


# --- text helpers --------------------------------------------------------------------------------

class _Redactor:
    """Redacts with the pod's known secret values (if the caller has them) and by shape."""

    def __init__(self, known_secrets: Iterable[str]) -> None:
        self.secrets = [s for s in known_secrets if s]

    def __call__(self, text: str) -> str:
        return redact_text(text, self.secrets)

    def log_tail(self, evidence: RestartEvidence, lines: int) -> tuple[list[str], int]:
        """The last `lines` lines of the previous log, redacted, and the log's line count.

        Redaction runs on a block with a margin before the tail, not line by line: a
        multi-line secret (a PEM key) is only recognisable as a block."""
        every = evidence.previous_log.splitlines()
        block = "\n".join(every[-(lines + REDACTION_MARGIN_LINES):])
        tail = [line.rstrip("\r") for line in self(block).splitlines()][-lines:]
        return tail, len(every)


def escape_mrkdwn(text: str) -> str:
    """Slack treats &, < and > as control characters (links, @channel): escape them."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int, marker: str = TRUNCATED) -> str:
    """At most `limit` characters, never ending inside an escaped entity (`&amp;`)."""
    if len(text) <= limit:
        return text
    cut = text[:max(0, limit - len(marker))]
    cut = re.sub(r"&[a-z]{0,3}$", "", cut)
    return cut + marker


def _inline_code(text: str, limit: int = 400) -> str:
    return "`" + truncate(escape_mrkdwn(text.replace("`", "'")), limit) + "`"


def _code_block(lines: Sequence[str], budget: int) -> str:
    """The last lines that fit in `budget` characters as a code block (log tails end there)."""
    fence = "```"
    shown: list[str] = []
    used = 2 * len(fence) + 1
    for line in reversed(lines):
        safe = truncate(escape_mrkdwn(line.replace(fence, "ˋˋˋ")), LOG_LINE_LIMIT, "…")
        if used + len(safe) + 1 > budget - 60:  # room for the "omitted" note
            break
        shown.insert(0, safe)
        used += len(safe) + 1
    omitted = len(lines) - len(shown)
    if omitted:
        shown.insert(0, f"… {omitted} earlier line{'s' * (omitted > 1)} not shown")
    return fence + "\n".join(shown or [" "]) + fence


def _link(url: str | None, label: str) -> str | None:
    if not url:
        return None
    safe = url.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C").replace(" ", "%20")
    return f"<{safe}|{label}>"


def _slack_time(when: datetime | str | None) -> str:
    """A timestamp each reader sees in their own time zone (with a UTC fallback)."""
    at = parse_time(when)
    if at is None:
        return escape_mrkdwn(rfc3339(when) or "unknown time")
    fallback = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} {{time_secs}}|{fallback}>"


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    if minutes < 1:
        return f"{int(seconds)} s"
    if minutes < 120:
        return f"{round(minutes)} min"
    return f"{minutes / 60:.1f} h"


def _confidence_word(confidence: float) -> str:
    return "high" if confidence >= 0.85 else "medium" if confidence >= 0.6 else "low"


_POD_ENDINGS = {  # why a pod was taken away, as a person says it
    "EvictionByEvictionAPI": "Evicted (Eviction API)", "Evicted": "Evicted",
    "PreemptionByScheduler": "Preempted", "Preempting": "Preempted",
    "TerminationByKubelet": "Terminated by the kubelet",
    "DeletionByTaintManager": "Deleted by the taint manager (node unreachable)",
    "DeletionByPodGC": "Deleted by the pod garbage collector", "Shutdown": "Node shut down",
    "NodeShutdown": "Node shut down", "Terminated": "Terminated (node shutdown)",
    "DeadlineExceeded": "Active deadline exceeded", "NodeLost": "Node lost",
}


def what_happened(evidence: RestartEvidence) -> str:
    """ "Restart #7", "Failed, not restarted", "Evicted (Eviction API)", "Cannot start:
    ErrImagePull": what was seen, in words (a pod taken away is not a restart)."""
    ev = evidence
    if ev.trigger == "restart":
        return f"Restart #{ev.restart_count}"
    if ev.trigger == "terminated":
        return "Failed, not restarted"
    if ev.trigger == "waiting":
        return f"Cannot start: {ev.trigger_reason}"
    return _POD_ENDINGS.get(ev.trigger_reason, f"Pod ended: {ev.trigger_reason}")


def exit_summary(evidence: RestartEvidence) -> str:
    """ "137 (OOMKilled)", "139 (Error), segmentation fault (SIGSEGV)", or the waiting reason."""
    t = evidence.termination()
    if t is None:
        if evidence.trigger == "pod-failed":
            return "none (the container was still running)"
        return evidence.state.waiting_reason or "not terminated"
    code = "?" if t.exit_code is None else str(t.exit_code)
    text = f"{code} ({t.reason})" if t.reason else code
    if t.exit_code and t.reason in ("Error", ""):
        text += f", {exit_meaning(t.exit_code, t.signal or None)}"
    return text


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, SECTION_LIMIT)}}


def _context(parts: Iterable[str | None]) -> dict[str, Any] | None:
    elements = [{"type": "mrkdwn", "text": truncate(p, CONTEXT_LIMIT)} for p in parts if p]
    return {"type": "context", "elements": elements[:10]} if elements else None


def _evidence_section(lines: Sequence[str], clean: _Redactor, *, limit: int | None = None
                      ) -> dict[str, Any] | None:
    if not lines:
        return None
    shown = list(lines)[:limit] if limit else list(lines)
    text = "*Evidence*"
    for i, line in enumerate(shown):
        bullet = "\n• " + _inline_code(clean(line))
        if len(text) + len(bullet) > SECTION_LIMIT - 60:
            text += f"\n… {len(shown) - i} more in the restart report"
            break
        text += bullet
    return _section(text)


def _log_section(evidence: RestartEvidence, clean: _Redactor, lines: int,
                 title: str) -> dict[str, Any]:
    tail, _ = clean.log_tail(evidence, lines)
    if not tail:
        why = evidence.log_error or "the previous container wrote nothing"
        return _section(f"*{title}*\n_No previous log: {escape_mrkdwn(clean(why))}_")
    which = "previous instance" if evidence.trigger == "restart" else "the instance that ended"
    heading = f"*{title}* (`{escape_mrkdwn(evidence.container)}`, {which})"
    return _section(heading + "\n" + _code_block(tail, SECTION_LIMIT - len(heading) - 1))


def _links_context(links: RestartLinks) -> dict[str, Any] | None:
    report = _link(links.artifact_url, "Restart report")
    if report is None and links.timeline_url is None:
        report = _link(links.flow_run_url, "Prefect flow run")
    return _context([report, _link(links.timeline_url, "Restart timeline")])


def _latest(restarts: Sequence[Restart]) -> Restart:
    return max(restarts, key=lambda r: (parse_time(r[0].observed_at) or _NEVER,
                                        r[0].restart_count))


def _earliest_time(restarts: Sequence[Restart]) -> datetime | None:
    times = [t for r in restarts if (t := parse_time(r[0].observed_at)) is not None]
    return min(times) if times else None


# --- Slack -----------------------------------------------------------------------------------

def restart_summary(restarts: Sequence[Restart], *, total_restarts: int | None = None,
                    first_seen: str | None = None) -> str:
    """ "5× in 30 min, same cause" (or "first restart with this cause")."""
    count = total_restarts if total_restarts is not None else len(restarts)
    latest = parse_time(_latest(restarts)[0].observed_at)
    first = parse_time(first_seen) or _earliest_time(restarts)
    if count <= 1:
        return "first restart with this cause"
    if first is None or latest is None:
        return f"{count}×, same cause"
    return f"{count}× in {_duration((latest - first).total_seconds())}, same cause"


def parent_blocks(restarts: Sequence[Restart], *, links: RestartLinks = RestartLinks(),
                  total_restarts: int | None = None, first_seen: str | None = None,
                  known_secrets: Iterable[str] = ()) -> SlackMessage:
    """The thread's parent message for one (cluster, workload, cause), about the latest restart.

    `restarts` are this thread's restarts (at least the latest); `total_restarts` counts those
    not passed in too, `first_seen` is when the thread's first restart was seen."""
    if not restarts:
        raise ValueError("parent_blocks needs at least one (evidence, diagnosis)")
    clean = _Redactor(known_secrets)
    ev, dx = _latest(restarts)
    workload = f"{ev.workload.kind}/{ev.workload.name}"
    summary = restart_summary(restarts, total_restarts=total_restarts, first_seen=first_seen)
    icon = "🔴" if dx.fault else "ℹ️"
    header = truncate(clean(f"{icon} {dx.title} · {workload}"), HEADER_LIMIT, "…")
    pods = sorted({f"{e.pod}/{e.container}" for e, _ in restarts})
    fields = [
        ("Cause", f"`{dx.cause}`"),
        ("Confidence", f"{dx.confidence:.2f} ({_confidence_word(dx.confidence)})"),
        ("Container", f"`{escape_mrkdwn(ev.container)}` ({ev.container_kind})"),
        ("Pod", f"`{escape_mrkdwn(ev.namespace)}/{escape_mrkdwn(ev.pod)}`"),
        ("Node", f"`{escape_mrkdwn(ev.node)}`" if ev.node else "_not scheduled_"),
        ("Image", _inline_code(clean(ev.image), 300) if ev.image else "_unknown_"),
        ("Event", escape_mrkdwn(what_happened(ev)) + (
            f" (restart count {ev.restart_count})" if ev.trigger != "restart"
            and ev.restart_count else "")),
        ("Exit", escape_mrkdwn(clean(exit_summary(ev)))),
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": True}},
        _section(f"*{escape_mrkdwn(summary)}* · cluster `{escape_mrkdwn(ev.cluster)}` · "
                 f"{escape_mrkdwn(workload)} in `{escape_mrkdwn(ev.namespace)}`"
                 + (f" · {len(pods)} containers: " + ", ".join(
                     f"`{escape_mrkdwn(p)}`" for p in pods[:5]) if len(pods) > 1 else "")
                 + "\n" + escape_mrkdwn(clean(dx.explanation))),
        {"type": "section", "fields": [
            {"type": "mrkdwn", "text": truncate(f"*{name}*\n{value}", FIELD_LIMIT)}
            for name, value in fields]},
    ]
    evidence = _evidence_section(dx.evidence_lines, clean)
    if evidence:
        blocks.append(evidence)
    blocks.append(_log_section(ev, clean, PARENT_LOG_LINES,
                               f"Last {PARENT_LOG_LINES} log lines"))
    alternatives = _context(["Other possible causes: " + ", ".join(
        f"`{cause}` ({score:.2f})" for cause, score in dx.alternatives)] if dx.alternatives
        else [])
    if alternatives:
        blocks.append(alternatives)
    more = _links_context(links)
    if more:
        blocks.append(more)
    text = truncate(escape_mrkdwn(clean(
        f"{dx.title}: {workload} in {ev.cluster}/{ev.namespace} ({summary}; container "
        f"{ev.container}, pod {ev.pod})")), FALLBACK_LIMIT)
    return SlackMessage(text=text, blocks=[b for b in blocks if b])


def _restart_line(ev: RestartEvidence, dx: Diagnosis, clean: _Redactor) -> str:
    who = f"`{escape_mrkdwn(ev.pod)}/{escape_mrkdwn(ev.container)}` ({ev.container_kind})"
    return (f"*{escape_mrkdwn(what_happened(ev))}* at {_slack_time(ev.observed_at)} · {who} · "
            f"exit {escape_mrkdwn(clean(exit_summary(ev)))} · confidence {dx.confidence:.2f}"
            + (f" · node `{escape_mrkdwn(ev.node)}`" if ev.node else ""))


def reply_blocks(restarts: Sequence[Restart], *, links: RestartLinks = RestartLinks(),
                 log_lines: int = REPLY_LOG_LINES, evidence_lines: int = 3,
                 max_listed: int = REPLY_MAX_LISTED, known_secrets: Iterable[str] = ()
                 ) -> SlackMessage:
    """One threaded reply for the restarts of this thread's cause that a run found since its
    last reply: a line per restart (the newest `max_listed`), then the evidence and log tail of
    the latest. One reply per batch, not per restart, keeps a storm within Slack's limits."""
    if not restarts:
        raise ValueError("reply_blocks needs at least one (evidence, diagnosis)")
    clean = _Redactor(known_secrets)
    ordered = sorted(restarts, key=lambda r: (parse_time(r[0].observed_at) or _NEVER,
                                              r[0].restart_count))
    ev, dx = ordered[-1]
    lines = [_restart_line(e, d, clean) for e, d in ordered[-max_listed:]]
    if len(ordered) > max_listed:
        lines.insert(0, f"_… {len(ordered) - max_listed} earlier restarts: see the restart "
                        "timeline_")
    head = "\n".join(lines)
    while len(head) > SECTION_LIMIT and len(lines) > 2:  # drop the oldest listed ones
        lines.pop(1)
        head = "\n".join(lines)
    blocks: list[dict[str, Any] | None] = [
        _section(head),
        _evidence_section(dx.evidence_lines, clean, limit=evidence_lines),
        _log_section(ev, clean, log_lines, f"Last {log_lines} log lines"),
        _links_context(links),
    ]
    latest = (f"{what_happened(ev)} of {ev.pod}/{ev.container}" if ev.trigger == "restart"
              else f"{ev.pod}/{ev.container} · {what_happened(ev)}")
    text = latest if len(ordered) == 1 else f"{len(ordered)} restarts, latest {latest}"
    text = truncate(escape_mrkdwn(clean(f"{text}: {dx.title}")), FALLBACK_LIMIT)
    return SlackMessage(text=text, blocks=[b for b in blocks if b])


def recovered_blocks(*, cluster: str, workload: Workload, ready_minutes: float,
                     restarts: int, links: RestartLinks = RestartLinks()) -> SlackMessage:
    """The reply that closes a thread: the workload has been Ready for a while."""
    name = escape_mrkdwn(f"{workload.kind}/{workload.name}")
    what = (f"✅ *Recovered*: {name} in `{escape_mrkdwn(workload.namespace)}` "
            f"(cluster `{escape_mrkdwn(cluster)}`) has been Ready for "
            f"{_duration(ready_minutes * 60)}, after {restarts} "
            f"restart{'s' * (restarts != 1)} in this thread.")
    blocks = [b for b in (_section(what), _links_context(links)) if b]
    text = truncate(f"Recovered: {name} Ready for {_duration(ready_minutes * 60)}",
                    FALLBACK_LIMIT)
    return SlackMessage(text=text, blocks=blocks)


def _pods(n: int) -> str:
    return f"{n} failed pod{'s' * (n != 1)}"


def job_failure_summary(failure: JobFailure) -> str:
    """ "Job failed: backoffLimit (2) reached after 3 failed pods", "Job failed:
    activeDeadlineSeconds (3600 s) passed after 1 failed pod"."""
    f = failure
    if f.reason == "BackoffLimitExceeded":
        limit = 6 if f.backoff_limit is None else f.backoff_limit  # Kubernetes' default
        return f"Job failed: backoffLimit ({limit}) reached after {_pods(f.failed_pods)}"
    if f.reason == "DeadlineExceeded":
        deadline = (f" ({f.active_deadline_seconds} s)" if f.active_deadline_seconds
                    is not None else "")
        after = f" after {_pods(f.failed_pods)}" if f.failed_pods else ""
        return f"Job failed: activeDeadlineSeconds{deadline} passed{after}"
    return f"Job failed: {f.reason or 'no reason given'}" + (
        f" after {_pods(f.failed_pods)}" if f.failed_pods else "")


def job_failure_blocks(failure: JobFailure, *, in_thread: bool,
                       links: RestartLinks = RestartLinks()) -> SlackMessage:
    """The Job's own end: a reply in the threads of its pods' failures (`in_thread`), or a
    parent of its own when none of its pods' failures was reported (a deadline that struck
    a running pod)."""
    f = failure
    summary = job_failure_summary(f)
    job = f"Job/{f.name}"
    ran = ""
    start, end = parse_time(f.started_at), parse_time(f.failed_at)
    if start and end:
        ran = f" after running {_duration((end - start).total_seconds())}"
    lines = [(f"🛑 *{escape_mrkdwn(summary)}*{ran} · {escape_mrkdwn(job)} in "
             f"`{escape_mrkdwn(f.namespace)}` (cluster `{escape_mrkdwn(f.cluster)}`)")]
    if f.message:
        lines.append(f"Job condition Failed, reason `{escape_mrkdwn(f.reason)}`: "
                     f"{escape_mrkdwn(redact_text(f.message))}")
    if f.succeeded_pods:
        lines.append(f"{f.succeeded_pods} pod{'s' * (f.succeeded_pods != 1)} succeeded.")
    if f.owner:
        lines.append(f"Created by {escape_mrkdwn(f.owner)}: its next run is a new Job.")
    lines.append("No more pods will be started: fix the cause above and create the Job "
                 f"again (`kubectl describe job -n {escape_mrkdwn(f.namespace)} "
                 f"{escape_mrkdwn(f.name)}`).")
    blocks: list[dict[str, Any] | None] = []
    if not in_thread:
        header = truncate(f"🔴 {summary} · {job}", HEADER_LIMIT, "…")
        blocks.append({"type": "header", "text": {"type": "plain_text", "text": header,
                                                  "emoji": True}})
    blocks += [_section("\n".join(lines)), _links_context(links)]
    text = truncate(escape_mrkdwn(f"{summary}: {job} in {f.cluster}/{f.namespace}"),
                    FALLBACK_LIMIT)
    return SlackMessage(text=text, blocks=[b for b in blocks if b])


# --- artifacts ---------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out


def _fenced(lines: Sequence[str]) -> list[str]:
    """A fenced block that no backtick run inside it can close early."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", *lines, fence]


def _state_rows(label: str, state: ContainerState) -> list[tuple[str, str]]:
    rows = []
    if state.terminated:
        t = state.terminated
        rows += [(f"{label}.terminated.reason", t.reason), (f"{label}.terminated.exitCode",
                                                           str(t.exit_code)),
                 (f"{label}.terminated.signal", str(t.signal) if t.signal else ""),
                 (f"{label}.terminated.startedAt", rfc3339(t.started_at)),
                 (f"{label}.terminated.finishedAt", rfc3339(t.finished_at)),
                 (f"{label}.terminated.message", t.message)]
    if state.waiting_reason:
        rows += [(f"{label}.waiting.reason", state.waiting_reason),
                 (f"{label}.waiting.message", state.waiting_message)]
    if state.running_since:
        rows.append((f"{label}.running.startedAt", rfc3339(state.running_since)))
    return [(k, v) for k, v in rows if v]


def _report_time(evidence: RestartEvidence) -> str:
    at = parse_time(evidence.observed_at)
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "unknown time"


def report_title(evidence: RestartEvidence, diagnosis: Diagnosis) -> str:
    """What a restart's report is called where reports are listed (the artifact's
    description): time, workload, container, cause and exit, in the order a person scans
    them, e.g. `2025-06-01 10:00:01 UTC · Job/finetune · trainer · cuda-oom · exit 1 (Error)`."""
    w = evidence.workload
    return redact_text(f"{_report_time(evidence)} · {w.kind}/{w.name} · {evidence.container} · "
                       f"{diagnosis.cause} · exit {exit_summary(evidence)}")


def restart_markdown(evidence: RestartEvidence, diagnosis: Diagnosis,
                     links: RestartLinks = RestartLinks(), *,
                     log_lines: int = ARTIFACT_LOG_LINES,
                     known_secrets: Iterable[str] = ()) -> str:
    """The per-restart report (a Prefect markdown artifact): everything that was captured,
    led by when, which workload and container, the cause and the exit."""
    clean = _Redactor(known_secrets)
    ev, dx = evidence, diagnosis
    w = ev.workload
    out = [f"# {_report_time(ev)} · {w.kind}/{w.name} · {ev.container}: {dx.title}", "",
           (f"**{what_happened(ev)}** · **cause** `{dx.cause}` · **exit** "
            f"{exit_summary(ev)} · **confidence** {dx.confidence:.2f} "
            f"({_confidence_word(dx.confidence)}) · **fault** {'yes' if dx.fault else 'no'} · "
            f"rule `{dx.rule_id}`"), "", dx.explanation, "", "## Evidence", ""]
    out += [f"- `{line.replace('`', chr(39))}`" for line in dx.evidence_lines] or ["- (none)"]
    if dx.alternatives:
        out += ["", "## Other possible causes", ""]
        out += _table(["cause", "confidence"], [(c, f"{s:.2f}") for c, s in dx.alternatives])
    rolling = " (rolling out)" if w.rolling_out else ""
    facts = [
        ("observed at", rfc3339(ev.observed_at)), ("workload", f"{w.kind}/{w.name}{rolling}"),
        ("container", f"{ev.container} ({ev.container_kind})"), ("event", what_happened(ev)),
        ("exit", exit_summary(ev)), ("cluster", ev.cluster), ("namespace", ev.namespace),
        ("pod", ev.pod), ("restart count", ev.restart_count),
        ("restarts missed", ev.restarts_missed),
        ("image", ev.image), ("node", ev.node),
        ("requests", ", ".join(f"{k}={v}" for k, v in ev.requests.items())),
        ("limits", ", ".join(f"{k}={v}" for k, v in ev.limits.items())),
        ("pod phase", ev.pod_phase), ("pod reason", ev.pod_reason),
        ("pod message", ev.pod_message), ("pod deleting", "yes" if ev.pod_deleting else ""),
        *[(f"pod annotation {k}", v) for k, v in sorted(ev.pod_annotations.items())],
        ("captured at", rfc3339(ev.captured_at)), ("pod uid", ev.pod_uid),
        ("identity", ev.identity),
    ]
    out += ["", "## Restart", ""]
    out += _table(["field", "value"], [(k, v) for k, v in facts if v not in ("", None, 0)
                                       or k == "restart count"])
    states = _state_rows("lastState", ev.last_state) + _state_rows("state", ev.state)
    out += ["", "## Container state", ""]
    out += _table(["field", "value"], states) if states else ["(none recorded)"]
    if ev.pod_conditions:
        out += ["", "## Pod conditions", ""]
        out += _table(["type", "status", "reason", "message"],
                      [(c.type, c.status, c.reason, c.message) for c in ev.pod_conditions])
    for title, events in (("Pod events", ev.pod_events), ("Node events", ev.node_events)):
        out += ["", f"## {title}", ""]
        out += _table(["last seen", "type", "reason", "count", "message"],
                      [(rfc3339(e.last_seen), e.type, e.reason, e.count, e.message) for e in events]
                      ) if events else ["(none)"]
    out += ["", f"## Node conditions ({ev.node or 'no node'})", ""]
    out += _table(["type", "status", "reason", "message"],
                  [(c.type, c.status, c.reason, c.message) for c in ev.node_conditions]
                  ) if ev.node_conditions else ["(none)"]
    out += ["", "## GPU Xids on the node", ""]
    out += _table(["time", "xid", "gpu", "message"],
                  [(rfc3339(x.time), x.xid, x.gpu, x.message) for x in ev.node_xids]
                  ) if ev.node_xids else ["(none)"]
    tail, total = clean.log_tail(ev, log_lines)
    where = " (cut at capture: only the end was kept)" if ev.previous_log_truncated else ""
    which = "Previous log" if ev.trigger == "restart" else "Log of the instance that ended"
    out += ["", f"## {which}: last {len(tail)} of {total} lines{where}", ""]
    if ev.previous_log_ref:
        out.append(f"The whole log is stored as `{ev.previous_log_ref}`.")
        out.append("")
    out += _fenced(tail) if tail else [f"(no log: {ev.log_error or 'empty'})"]
    link_lines = [f"- [{label}]({url})" for label, url in (
        ("Restart timeline", links.timeline_url), ("Prefect flow run", links.flow_run_url))
        if url]
    if link_lines:
        out += ["", "## Links", "", *link_lines]
    # The log was already redacted whole (multi-line secrets); this pass covers the rest.
    return clean("\n".join(out))


def timeline_rows(restarts: Sequence[Restart], *, slack_links: Mapping[str, str] | None = None,
                  known_secrets: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Rows of a workload's restart timeline (a Prefect table artifact), oldest first.

    `slack_links` maps a restart's identity to the Slack message that reported it."""
    clean = _Redactor(known_secrets)
    links = slack_links or {}
    ordered = sorted(restarts, key=lambda r: (parse_time(r[0].observed_at)
                                              or _NEVER, r[0].restart_count))
    return [{
        "time": rfc3339(ev.observed_at),
        "container": f"{ev.container} ({ev.container_kind})",
        "cause": dx.cause,
        "exit": clean(exit_summary(ev)),
        "event": what_happened(ev),
        "pod": ev.pod,
        "node": ev.node,
        "restartCount": ev.restart_count,
        "confidence": round(dx.confidence, 2),
        "slack": links.get(ev.identity, ""),
    } for ev, dx in ordered]
