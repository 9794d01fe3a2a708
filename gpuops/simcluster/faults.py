"""Fault injection: faults of the API itself, and a registry for the simulated components' faults.

API faults act on requests (latency, 429 with Retry-After, 500s) and on watch streams
(dropped connections, forced 410). Workload faults (crash loop, OOM, Xid...) are registered
by the components that simulate them, under a unique kind.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import errors

FaultHandler = Callable[[str | None, dict[str, Any]], dict[str, Any]]


@dataclass
class ErrorRule:
    code: int
    remaining: int
    retry_after: int = 1
    path: str = "*"  # a glob on the request path
    method: str = "*"

    def matches(self, method: str, path: str) -> bool:
        return (self.method in ("*", method) and fnmatch.fnmatch(path, self.path))


@dataclass
class ApiFaults:
    latency_s: float = 0.0
    rules: list[ErrorRule] = field(default_factory=list)

    async def before_request(self, method: str, path: str) -> None:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        for rule in self.rules:
            if rule.remaining > 0 and rule.matches(method, path):
                rule.remaining -= 1
                if rule.code == 429:
                    raise errors.too_many_requests("simcluster: injected throttling, please "
                                                   "try again later", rule.retry_after)
                raise errors.ApiError(rule.code, "InternalError",
                                      f"simcluster: injected server error {rule.code}")
        self.rules = [r for r in self.rules if r.remaining > 0]

    def clear(self) -> None:
        self.latency_s = 0.0
        self.rules.clear()


class FaultRegistry:
    """Fault kinds -> handlers; registering a kind twice is a bug and fails loudly."""

    def __init__(self) -> None:
        self._handlers: dict[str, tuple[FaultHandler, str]] = {}

    def register(self, kind: str, handler: FaultHandler, description: str = "") -> None:
        if kind in self._handlers:
            raise ValueError(f"fault kind {kind!r} is already registered")
        self._handlers[kind] = (handler, description)

    def inject(self, kind: str, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        if kind not in self._handlers:
            raise errors.bad_request(f"unknown fault kind {kind!r}; known: "
                                     f"{', '.join(sorted(self._handlers))}")
        return self._handlers[kind][0](target, params)

    def describe(self) -> dict[str, str]:
        return {kind: desc for kind, (_, desc) in sorted(self._handlers.items())}
