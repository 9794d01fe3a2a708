"""A container's environment as the kubelet builds it, and `$(VAR)` expansion in its command.

The kubelet (`makeEnvironmentVariables`) takes `envFrom` sources first, in order, every key of
the ConfigMap or Secret under its prefix; then `env` entries in order, a literal value expanded
against what is defined so far, a `valueFrom` reference read from its ConfigMap or Secret
(Secret `data` is base64 in the API: the container sees it decoded). Command and args are then
expanded against the whole environment: `$(VAR)` becomes VAR's value when VAR is defined and
stays as written when it is not; `$$` is an escaped `$`. Field and resource references are not
simulated (they resolve to nothing). Pure: the caller looks the objects up.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from .spec import ConfigRef, EnvFrom, EnvVar


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `expansion.Expand`: `$(VAR)` -> value if defined, `$$` -> `$`."""
    out: list[str] = []
    checkpoint = cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            following = text[cursor + 1]
            advance = 1
            if following == "$":
                out.append("$")
            elif following == "(":
                end = text.find(")", cursor + 2)
                if end == -1:
                    out.append("$(")
                else:
                    name = text[cursor + 2:end]
                    out.append(env.get(name, f"$({name})"))
                    advance = end - cursor
            else:
                out.append("$" + following)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def config_values(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    """A ConfigMap's or Secret's values as a container sees them (decoded; binary values a
    process could not hold in an environment variable are left out)."""
    values: dict[str, str] = {}
    encoded = dict(obj.get("binaryData") or {}) if kind == "configmap" else dict(
        obj.get("data") or {})
    for key, raw in encoded.items():
        try:
            values[key] = base64.b64decode(str(raw), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
    plain = obj.get("data") if kind == "configmap" else obj.get("stringData")
    values.update({k: str(v) for k, v in (plain or {}).items()})
    return values


def container_environment(env: tuple[EnvVar, ...], env_from: tuple[EnvFrom, ...],
                          lookup: Callable[[ConfigRef], dict[str, str] | None]
                          ) -> dict[str, str]:
    """The environment a container starts with; `lookup` gives a ConfigMap's or Secret's
    decoded values (None when it does not exist: an optional source then adds nothing)."""
    result: dict[str, str] = {}
    for source in env_from:
        for key, value in (lookup(source.ref) or {}).items():
            result[source.prefix + key] = value
    for var in env:
        if var.ref is not None:
            found = (lookup(var.ref) or {}).get(var.ref.key or "")
            if found is not None:
                result[var.name] = found
        elif var.value is not None:
            result[var.name] = expand(var.value, result)
    return result
