"""gpuops' error classes, one module for all: callers catch a few meaningful kinds.

Two kinds steer retries (as in kopf): a `PermanentError` is never retried; a
`TemporaryError` carries the delay after which trying again may succeed, which is the delay
`gpuops.common.retry.with_retries` waits (None: no hint, the retrier backs off).
"""

from __future__ import annotations

from typing import Any


class GpuopsError(Exception):
    """Base of every error gpuops raises on purpose."""


class PermanentError(GpuopsError):
    """Retrying will not help (bad input, forbidden, not found)."""


class TemporaryError(GpuopsError):
    """Retrying after `delay` seconds may help (throttling, conflicts, server errors).
    `delay` None: the server gave no hint, so the retrier backs off (doubling)."""

    delay: float | None

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class ConfigError(PermanentError):
    """Invalid configuration or input: names the field (and the YAML line and column when
    known): `rules.yaml:4:3: rules[0].confidence: ...` like a compiler, or
    `line 4, column 3: ...` when there is no file."""

    def __init__(self, field: str, message: str, *, line: int | None = None,
                 source: str | None = None, column: int | None = None) -> None:
        super().__init__(f"{_where(source, line, column)}{field}: {message}")
        self.field = field
        self.line = line
        self.column = column
        self.source = source


def _where(source: str | None, line: int | None, column: int | None) -> str:
    if line is None:
        return f"{source}: " if source else ""
    if source:
        return f"{source}:{line}:{column}: " if column else f"{source}:{line}: "
    return f"line {line}, column {column}: " if column else f"line {line}: "


class BlockError(ConfigError):
    """A saved Block document that cannot be used: names the Block (type and name) and the
    field, never the field's value (a Block may hold a secret)."""

    def __init__(self, block_type: str, name: str, field: str, message: str) -> None:
        super().__init__(field, message, source=f"Block {block_type}/{name}")
        self.block_type = block_type
        self.name = name


class BlockNotFound(BlockError):
    """No Block document of that type and name is saved on the Prefect server."""


# --- Kubernetes API errors: one class per status, keeping the parsed Status -------------------

class KubeError(GpuopsError):
    def __init__(self, message: str, *, status: int | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or {}

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", ""))


class KubeNotFound(KubeError, PermanentError):
    pass


class KubeForbidden(KubeError, PermanentError):
    pass


class KubeInvalid(KubeError, PermanentError):
    pass


class KubeConflict(KubeError, TemporaryError):
    """409: someone changed the object meanwhile; re-read it and try again at once."""

    def __init__(self, message: str, **kw: Any) -> None:
        KubeError.__init__(self, message, **kw)
        self.delay = 0.05


class KubeTooManyRequests(KubeError, TemporaryError):
    """429: throttled, or an eviction refused by a PodDisruptionBudget."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw: Any) -> None:
        KubeError.__init__(self, message, **kw)
        self.delay = retry_after


class KubeServerError(KubeError, TemporaryError):
    """5xx: no hint how long the trouble lasts, so retries back off."""

    def __init__(self, message: str, **kw: Any) -> None:
        KubeError.__init__(self, message, **kw)
        self.delay = None


class KubeUnavailable(KubeError, TemporaryError):
    """The API server could not be reached (connection refused, reset, timeout): retries
    back off."""

    def __init__(self, message: str, **kw: Any) -> None:
        KubeError.__init__(self, message, **kw)
        self.delay = None


# --- actions and approvals -----------------------------------------------------------------------

class PostconditionFailed(GpuopsError):
    """An action ran but the cluster or cloud does not show its effect."""


class LimitViolation(PermanentError):
    """A requested change breaks a limit gpuops enforces (min <= desired <= max, quotas).

    `field` names what was out of bounds (e.g. `scalingConfig.desiredSize`); the message
    starts with it."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class NotApproved(GpuopsError):
    """A change was rejected, or its approval timed out (a timeout is a "no")."""


# --- AWS and Prometheus: one class per kind of answer, like the Kubernetes ones ------------------

class AwsError(GpuopsError):
    """An AWS API call failed; `code` is AWS's error code (e.g. `ResourceNotFoundException`)."""

    def __init__(self, message: str, *, code: str = "", operation: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.operation = operation


class AwsNotFound(AwsError, PermanentError):
    pass


class AwsForbidden(AwsError, PermanentError):
    pass


class AwsInvalid(AwsError, PermanentError):
    pass


class AwsThrottled(AwsError, TemporaryError):
    def __init__(self, message: str, **kw: Any) -> None:
        AwsError.__init__(self, message, **kw)
        self.delay = 2.0


class AwsUnavailable(AwsError, TemporaryError):
    """AWS answered 5xx, or could not be reached at all: retries back off."""

    def __init__(self, message: str, **kw: Any) -> None:
        AwsError.__init__(self, message, **kw)
        self.delay = None


# --- Slack: one class per kind of answer, like the Kubernetes and AWS ones ---------------------

class SlackError(GpuopsError):
    """A Slack Web API call failed; `code` is Slack's error (e.g. `channel_not_found`)."""

    def __init__(self, message: str, *, code: str = "", method: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.method = method


class SlackNotFound(SlackError, PermanentError):
    """The message, thread or channel is gone (deleted, or never there)."""


class SlackArchived(SlackError, PermanentError):
    """The channel is archived: nothing can be posted into it."""


class SlackRefused(SlackError, PermanentError):
    """Any other definite answer (bad token, missing scope, invalid blocks): fix the call or
    the Slack app."""


class SlackThrottled(SlackError, TemporaryError):
    """Still rate limited after slack-sdk's own retries: wait Retry-After."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw: Any) -> None:
        SlackError.__init__(self, message, **kw)
        self.delay = retry_after


class SlackUnavailable(SlackError, TemporaryError):
    """Slack's own trouble (internal_error, service_unavailable, a timeout): retries back
    off."""

    def __init__(self, message: str, **kw: Any) -> None:
        SlackError.__init__(self, message, **kw)
        self.delay = None


class PrometheusError(GpuopsError):
    pass


class PrometheusQueryError(PrometheusError, PermanentError):
    """Prometheus refused the query (bad PromQL, too many points): fix the query."""


class PrometheusUnavailable(PrometheusError, TemporaryError):
    """Prometheus could not be reached, timed out or answered 5xx: retries back off."""

    def __init__(self, message: str) -> None:
        TemporaryError.__init__(self, message)
