"""Whether a restart is reported, and to which channel (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuops.common.labels import LabelSelectorError, labels_match, parse_label_selector
from gpuops.tasks.restarts.diagnose import Diagnosis
from gpuops.tasks.restarts.evidence import JobFailure, RestartEvidence

CHANNEL_KEY = "gpuops.io/slack-channel"


def _scope_reason(namespace: str, pod_labels: dict[str, str], policy) -> str | None:
    """Why the policy leaves this namespace or these pods out (None: it covers them)."""
    if policy.namespaces_allow and namespace not in policy.namespaces_allow:
        return f"namespace {namespace} is not in the allow list"
    if namespace in policy.namespaces_deny:
        return f"namespace {namespace} is denied"
    try:
        selector = parse_label_selector(policy.pod_label_selector)
    except LabelSelectorError as e:
        return f"invalid pod_label_selector (fix it in the `gpuops-restart-policy` block): {e}"
    if not labels_match(selector, pod_labels):
        return f"pod labels do not match {policy.pod_label_selector!r}"
    return None


def job_skip_reason(failure: JobFailure, policy, now: datetime) -> str | None:
    """Why this Job's failure is not posted (None: post it): the Job's pods are out of the
    policy's scope (their template's labels), or it is stale."""
    why = _scope_reason(failure.namespace, failure.pod_labels, policy)
    if why:
        return why
    if now - failure.observed_at > timedelta(minutes=policy.max_event_age_minutes):
        return f"stale: observed {failure.observed_at.isoformat()}"
    return None


def skip_reason(evidence: RestartEvidence, diagnosis: Diagnosis, policy, now: datetime
                ) -> str | None:
    """Why this restart is not posted (None: post it)."""
    why = _scope_reason(evidence.namespace, evidence.pod_labels, policy)
    if why:
        return why
    if evidence.trigger == "restart" and evidence.restart_count < policy.min_restart_count:
        return f"restartCount {evidence.restart_count} < {policy.min_restart_count}"
    term = evidence.termination()
    # A pod taken away may well exit 0 on SIGTERM: that is its ending, not a completion.
    if policy.ignore_exit_code_zero and evidence.trigger == "restart" and term \
            and term.exit_code == 0 and not diagnosis.fault:
        return "exit code 0"
    if policy.ignore_planned and not diagnosis.fault:
        return f"planned ({diagnosis.cause})"
    if now - evidence.observed_at > timedelta(minutes=policy.max_event_age_minutes):
        return f"stale: observed {evidence.observed_at.isoformat()}"
    return None


def route_channel(evidence: RestartEvidence | JobFailure, policy) -> str:
    for source in (evidence.namespace_labels, evidence.namespace_annotations):
        if source.get(CHANNEL_KEY):
            channel = source[CHANNEL_KEY]
            return channel if channel.startswith(("#", "C", "G")) else f"#{channel}"
    return policy.channel_by_namespace.get(evidence.namespace, policy.default_channel)
