"""Secret redaction for anything that leaves gpuops: Slack, artifacts, events, logs, MCP.

Two ways a secret is caught: by its value (we know it: pod env values, the Secrets a pod
references, Block secrets) and by its shape (`redact_shapes`: key blocks, vendor tokens,
headers, URLs, command-line passwords, key/value pairs in every notation logs use). In a
mapping, a value under a secret-looking key is masked whole, whatever it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuops.common.redact_blocks import mask_key_blocks
from gpuops.common.redact_shapes import CONTEXT_SHAPES, MASK, VENDOR_TOKENS, is_secret_key

__all__ = ["MASK", "is_secret_key", "pod_env_secrets", "redact", "redact_text"]

MIN_KNOWN_SECRET_CHARS = 4  # shorter values would mask common words and numbers everywhere


def redact_text(text: str, known_secrets: Iterable[str] = ()) -> str:
    """Mask known secret values first (longest first), then anything shaped like a secret."""
    for secret in sorted({s for s in known_secrets if s and len(s) >= MIN_KNOWN_SECRET_CHARS},
                         key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = mask_key_blocks(text, MASK)
    lowered = text.lower()
    for shape in (*VENDOR_TOKENS, *CONTEXT_SHAPES):
        masked = shape.apply(text, lowered)
        if masked != text:
            text, lowered = masked, masked.lower()
    return text


def _masked_whole(value: Any) -> bool:
    """A value under a secret-looking key that is worth masking (not None, '', a bool)."""
    return value not in (None, "") and not isinstance(value, bool)


def redact(value: Any, known_secrets: Iterable[str] = ()) -> Any:
    """Redact every string inside a JSON-like structure (dicts, lists, strings); a value under
    a secret-looking key (`password`, `api_key`, `Authorization`...) is masked whole."""
    secrets = list(known_secrets)
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and is_secret_key(k) and _masked_whole(v)
                else redact(v, secrets) for k, v in value.items()}
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
