"""Whether a restart is reported, and to which channel (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from gpuops.common.labels import LabelSelectorError, labels_match, parse_label_selector
from gpuops.tasks.restarts.diagnose import Diagnosis
from gpuops.tasks.restarts.evidence import JobFailure, RestartEvidence

CHANNEL_KEY = "gpuops.io/slack-channel"


class ReportPolicy(Protocol):
    """What these rules read of the restart policy (blocks/restart_policy.RestartPolicy: a
    Prefect Block, which this pure module does not import)."""

    @property
    def namespaces_allow(self) -> Sequence[str]: ...
    @property
    def namespaces_deny(self) -> Sequence[str]: ...
    @property
    def pod_label_selector(self) -> str: ...
    @property
    def ignore_exit_code_zero(self) -> bool: ...
    @property
    def ignore_planned(self) -> bool: ...
    @property
    def min_restart_count(self) -> int: ...
    @property
    def max_event_age_minutes(self) -> int: ...
    @property
    def default_channel(self) -> str: ...
    @property
    def channel_by_namespace(self) -> Mapping[str, str]: ...


def _scope_reason(namespace: str, pod_labels: dict[str, str], policy: ReportPolicy
                  ) -> str | None:
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


def job_skip_reason(failure: JobFailure, policy: ReportPolicy, now: datetime) -> str | None:
    """Why this Job's failure is not posted (None: post it): the Job's pods are out of the
    policy's scope (their template's labels), or it is stale."""
    why = _scope_reason(failure.namespace, failure.pod_labels, policy)
    if why:
        return why
    if now - failure.observed_at > timedelta(minutes=policy.max_event_age_minutes):
        return f"stale: observed {failure.observed_at.isoformat()}"
    return None


def skip_reason(evidence: RestartEvidence, diagnosis: Diagnosis, policy: ReportPolicy,
                now: datetime) -> str | None:
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


def route_channel(evidence: RestartEvidence | JobFailure, policy: ReportPolicy) -> str:
    for source in (evidence.namespace_labels, evidence.namespace_annotations):
        if source.get(CHANNEL_KEY):
            channel = str(source[CHANNEL_KEY])
            return channel if channel.startswith(("#", "C", "G")) else f"#{channel}"
    return policy.channel_by_namespace.get(evidence.namespace, policy.default_channel)
