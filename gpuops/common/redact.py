"""Secret redaction for anything that leaves gpuops: Slack, artifacts, events, logs, MCP.

Two ways a secret is caught: by its value (we know it: pod env values, Block secrets) and
by its shape (tokens, keys, passwords and credentials in connection strings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "[REDACTED]"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # Authorization headers and bearer tokens
    (re.compile(r"(?i)\b(bearer|token|basic)\s+[A-Za-z0-9._~+/=-]{12,}"), r"\1 " + MASK),
    # AWS access key ids and secret keys
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), MASK),
    (re.compile(r"(?i)(aws_secret_access_key|aws_session_token)(\s*[=:]\s*)\S+"),
     r"\1\2" + MASK),
    # Slack, GitHub, OpenAI/HF-style tokens
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MASK),
    (re.compile(r"\bxapp-[A-Za-z0-9-]{10,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\b(sk|hf)[-_][A-Za-z0-9_-]{16,}"), MASK),
    # JWTs
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
    # credentials inside URLs / connection strings: scheme://user:password@host
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@"), r"\1" + MASK + "@"),
    # key=value / key: value for secret-looking keys
    (re.compile(r"(?i)\b([A-Za-z0-9_.-]*(password|passwd|pwd|secret|token|api[_-]?key|"
                r"access[_-]?key|private[_-]?key|credentials?)[A-Za-z0-9_.-]*)"
                r"(\"?\s*[=:]\s*\"?)([^\s\"',;]+)"), r"\1\3" + MASK),
    # PEM private keys
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
                re.DOTALL), MASK),
]


def redact_text(text: str, known_secrets: Iterable[str] = ()) -> str:
    """Mask known secret values first (longest first), then anything shaped like a secret."""
    for secret in sorted({s for s in known_secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any, known_secrets: Iterable[str] = ()) -> Any:
    """Redact every string inside a JSON-like structure (dicts, lists, strings)."""
    secrets = list(known_secrets)
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    return value


def pod_env_secrets(pod: dict[str, Any]) -> list[str]:
    """Literal env values of a pod's containers: any of them may be a secret."""
    values = []
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(group) or []:
            for env in container.get("env") or []:
                if env.get("value"):
                    values.append(str(env["value"]))
    return values


def scrub_pod_spec(pod: dict[str, Any]) -> dict[str, Any]:
    """A copy of a pod whose env values are masked (valueFrom references are kept)."""
    import copy

    pod = copy.deepcopy(pod)
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for container in (pod.get("spec") or {}).get(group) or []:
            for env in container.get("env") or []:
                if "value" in env:
                    env["value"] = MASK
    return pod
