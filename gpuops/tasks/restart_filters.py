"""Whether a restart is reported, and to which channel (pure)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from gpuops.tasks.diagnose import Diagnosis
from gpuops.tasks.evidence import RestartEvidence

CHANNEL_KEY = "gpuops.io/slack-channel"


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """The label-selector grammar (`a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`)."""
    if not selector.strip():
        return True
    for part in re.split(r",(?![^()]*\))", selector):
        part = part.strip()
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", part):
            values = {v.strip() for v in m.group(3).split(",")}
            inside = labels.get(m.group(1)) in values
            if inside != (m.group(2) == "in"):
                return False
        elif m := re.fullmatch(r"([^!=\s]+)\s*(==|=|!=)\s*(\S*)", part):
            equal = labels.get(m.group(1)) == m.group(3)
            if equal != (m.group(2) != "!="):
                return False
        elif part.startswith("!"):
            if part[1:].strip() in labels:
                return False
        elif part not in labels:
            return False
    return True


def skip_reason(evidence: RestartEvidence, diagnosis: Diagnosis, policy, now: datetime
                ) -> str | None:
    """Why this restart is not posted (None: post it)."""
    ns = evidence.namespace
    if policy.namespaces_allow and ns not in policy.namespaces_allow:
        return f"namespace {ns} is not in the allow list"
    if ns in policy.namespaces_deny:
        return f"namespace {ns} is denied"
    if not _selector_matches(policy.pod_label_selector, evidence.pod_labels):
        return f"pod labels do not match {policy.pod_label_selector!r}"
    if evidence.trigger == "restart" and evidence.restart_count < policy.min_restart_count:
        return f"restartCount {evidence.restart_count} < {policy.min_restart_count}"
    term = evidence.last_state.terminated
    if policy.ignore_exit_code_zero and term and term.exit_code == 0 and not diagnosis.fault:
        return "exit code 0"
    if policy.ignore_planned and not diagnosis.fault:
        return f"planned ({diagnosis.cause})"
    observed = datetime.fromisoformat(evidence.observed_at)
    if now - observed > timedelta(minutes=policy.max_event_age_minutes):
        return f"stale: observed {observed.isoformat()}"
    return None


def route_channel(evidence: RestartEvidence, policy) -> str:
    for source in (evidence.namespace_labels, evidence.namespace_annotations):
        if source.get(CHANNEL_KEY):
            channel = source[CHANNEL_KEY]
            return channel if channel.startswith(("#", "C", "G")) else f"#{channel}"
    return policy.channel_by_namespace.get(evidence.namespace, policy.default_channel)
