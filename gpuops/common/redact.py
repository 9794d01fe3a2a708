"""Secret redaction for anything that leaves gpuops: Slack, artifacts, events, logs, MCP.

Two ways a secret is caught: by its value (we know it: pod env values, Block secrets) and
by its shape (tokens, keys, passwords and credentials in connection strings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "[REDACTED]"

_SECRET_WORDS = (r"(?:password|passwd|pwd|secret|token(?!s)|api[_-]?key|access[_-]?key|"
                 r"private[_-]?key|credentials?|authorization)")
# The key is matched from its secret word on (a prefix like `DB_` is kept as written anyway):
# a leading `[\w.-]*` would make every word boundary of a long log line a costly start.
# (the look-ahead on the first letter lets the regex engine skip most positions quickly)
_SECRET_KEY = r"(?=[pPsStTaAcC])" + _SECRET_WORDS + r"[A-Za-z0-9_.-]{0,64}"
_SECRET_WORD_TRIGGERS = ("password", "passwd", "pwd", "secret", "token", "api", "key",
                         "credential", "authorization")


class _Shape:
    """A secret's shape: a pattern, its replacement, and substrings (lower case) without
    which it cannot match, checked first so that a 1 MiB log costs milliseconds, not
    seconds. Repeats are bounded so no pattern turns quadratic on a long unbroken run."""

    def __init__(self, pattern: str, replacement: str, triggers: tuple[str, ...],
                 flags: int = 0) -> None:
        self.pattern = re.compile(pattern, flags)
        self.replacement = replacement
        self.triggers = triggers

    def apply(self, text: str, lowered: str) -> str:
        if not any(t in lowered for t in self.triggers):
            return text
        return self.pattern.sub(self.replacement, text)


# Order matters: whole blocks (PEM) before the key=value rule would cut them in half.
_SHAPES: list[_Shape] = [
    # PEM private keys: whole, or the part a truncated log still shows (no END / no BEGIN)
    _Shape(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----.*?-----END [A-Z ]{0,40}PRIVATE KEY-----",
           MASK, ("private key",), re.DOTALL),
    _Shape(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----(?:\s{0,4}(?:\\n)?[A-Za-z0-9+/=]{16,})*",
           MASK, ("private key",)),
    _Shape(r"(?:^[ \t]{0,8}[A-Za-z0-9+/=]{40,128}[ \t]{0,8}\r?\n)+[ \t]{0,8}-----END "
           r"[A-Z ]{0,40}PRIVATE KEY-----", MASK, ("private key",), re.MULTILINE),
    # Authorization headers and bearer tokens
    _Shape(r"(?=[bB])\b(bearer|basic)\s{1,8}[A-Za-z0-9._~+/=-]{12,}", r"\1 " + MASK,
           ("bearer", "basic"), re.IGNORECASE),
    _Shape(r"(?=[tT])\b(token)\s{1,8}(?=[A-Za-z0-9._~+/=-]{0,256}\d)[A-Za-z0-9._~+/=-]{12,}",
           r"\1 " + MASK, ("token",), re.IGNORECASE),
    # AWS access key ids and secret keys
    _Shape(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b", MASK, ("akia", "asia")),
    _Shape(r"(aws_secret_access_key|aws_session_token)(\s{0,8}[=:]\s{0,8})\S+", r"\1\2" + MASK,
           ("aws_secret_access_key", "aws_session_token"), re.IGNORECASE),
    # Slack, GitHub, GitLab, Google, OpenAI/Anthropic/HF-style tokens; Slack webhook URLs
    _Shape(r"\bxox[abposr]-[A-Za-z0-9-]{10,}", MASK, ("xox",)),
    _Shape(r"\bxapp-[A-Za-z0-9-]{10,}", MASK, ("xapp-",)),
    _Shape(r"\bgh[pousr]_[A-Za-z0-9]{20,}", MASK, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    _Shape(r"\bgithub_pat_[A-Za-z0-9_]{20,}", MASK, ("github_pat_",)),
    _Shape(r"\bglpat-[A-Za-z0-9_-]{20,}", MASK, ("glpat-",)),
    _Shape(r"\bAIza[0-9A-Za-z_-]{35}", MASK, ("aiza",)),
    _Shape(r"(hooks\.slack\.com/services/)[A-Za-z0-9/]+", r"\1" + MASK, ("hooks.slack.com",)),
    _Shape(r"\b(sk|hf)[-_][A-Za-z0-9_-]{16,}", MASK, ("sk-", "sk_", "hf_", "hf-")),
    # JWTs
    _Shape(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", MASK, ("eyj",)),
    # credentials inside URLs / connection strings: scheme://user:password@host. The user may
    # be empty (redis://:pw@host); the password may hold '/' or '@' (masked to the last '@').
    _Shape(r"((?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^/\s:@]{0,256}:)"
           r"(?:[^\s@]{0,256}@){1,4}", r"\1" + MASK + "@", ("://",)),
    # key=value / key: value / "key": "value" for secret-looking keys; quoted values whole
    _Shape(r"(" + _SECRET_KEY + r")(\"?\s{0,8}[=:]\s{0,8})([\"'])(?:(?!\3)[^\n]){0,1024}\3",
           r"\1\2\3" + MASK + r"\3", _SECRET_WORD_TRIGGERS, re.IGNORECASE),
    _Shape(r"(" + _SECRET_KEY + r")(\"?\s{0,8}[=:]\s{0,8}\"?)(?!\[REDACTED\])([^\s\"',;]+)",
           r"\1\2" + MASK, _SECRET_WORD_TRIGGERS, re.IGNORECASE),
    # command-line flags: --password VALUE, --api-key=VALUE
    _Shape(r"(--?[A-Za-z0-9_-]{0,32}?" + _SECRET_KEY + r")(\s{1,8}|=)(?!-)(\S+)",
           r"\1\2" + MASK, _SECRET_WORD_TRIGGERS, re.IGNORECASE),
]


def redact_text(text: str, known_secrets: Iterable[str] = ()) -> str:
    """Mask known secret values first (longest first), then anything shaped like a secret."""
    for secret in sorted({s for s in known_secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    lowered = text.lower()
    for shape in _SHAPES:
        masked = shape.apply(text, lowered)
        if masked != text:
            text, lowered = masked, masked.lower()
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
