"""Which version of a model server a pod runs, and the load times injected per version.

A serving version is what its pods' spec says: the container image, the served model and the
engine's command line. Faults that describe a version (`bad-version`, `slow-version`) match
pods by globs on those, so a Deployment created after the fault, by a rollout say, behaves
like its version from its first replica. The kubelet (model-load time) and the metrics engine
(latency, errors, warm-up) both need the match; `LoadTimes` is the one object they share, built
once by cluster.py: the metrics engine's `slow-version` fault writes it, the kubelet reads it
when a container starts.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def vllm_model_arg(containers: Iterable[Mapping[str, Any]]) -> str | None:
    """The model a vLLM container serves: `--served-model-name`, `--model` or `vllm serve M`."""
    for container in containers:
        argv = command_line(container)
        found: dict[str, str] = {}
        for i, arg in enumerate(argv):
            for flag in ("--served-model-name", "--model"):
                if arg == flag and i + 1 < len(argv):
                    found.setdefault(flag, argv[i + 1])
                elif arg.startswith(flag + "="):
                    found.setdefault(flag, arg.split("=", 1)[1])
            if arg == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                found.setdefault("serve", argv[i + 1])
        for key in ("--served-model-name", "--model", "serve"):
            if key in found:
                return found[key]
    return None


def command_line(container: Mapping[str, Any]) -> list[str]:
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


@dataclass(frozen=True)
class VersionMatch:
    """Globs on a pod's version; every one given must match (none given matches nothing).

    `image` matches any container's image, `model` the served model name, `args` the command
    line joined by spaces (`*--enable-chunked-prefill*`)."""

    image: str | None = None
    model: str | None = None
    args: str | None = None

    def given(self) -> bool:
        return bool(self.image or self.model or self.args)

    def matches(self, images: Sequence[str], model: str | None, argv: str) -> bool:
        if not self.given():
            return False
        if self.image and not any(fnmatch.fnmatchcase(i, self.image) for i in images):
            return False
        if self.model and not (model and fnmatch.fnmatchcase(model, self.model)):
            return False
        return not self.args or fnmatch.fnmatchcase(argv, self.args)

    def describe(self) -> dict[str, str]:
        return {k: v for k, v in (("image", self.image), ("model", self.model),
                                  ("args", self.args)) if v}


@dataclass(frozen=True)
class LoadTime:
    match: VersionMatch
    seconds: float


class LoadTimes:
    """Model-load seconds per version (`slow-version` faults); the latest matching rule wins
    and replaces the pod's own `sim.gpuops.io/load-seconds`."""

    def __init__(self) -> None:
        self.rules: list[LoadTime] = []

    def add(self, rule: LoadTime) -> None:
        self.rules.append(rule)

    def remove(self, keep: Any) -> int:
        """Drop the rules for which `keep(rule)` is false; how many were dropped."""
        before = len(self.rules)
        self.rules = [r for r in self.rules if keep(r)]
        return before - len(self.rules)

    def seconds_for(self, image: str, argv: Sequence[str]) -> float | None:
        if not self.rules:
            return None
        model = vllm_model_arg([{"args": list(argv)}])
        joined = " ".join(argv)
        for rule in reversed(self.rules):
            if rule.match.matches((image,), model, joined):
                return rule.seconds
        return None
