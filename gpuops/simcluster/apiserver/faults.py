"""Faults of the API itself: latency, 429 with Retry-After and 500s on matching requests, and
watch streams dropped or forced to 410 Gone."""

from __future__ import annotations

import asyncio
import fnmatch
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from ..core import errors
from ..core.faults import FaultParams, FaultRegistry
from ..core.store import Store


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


Method = Literal["*", "GET", "POST", "PUT", "PATCH", "DELETE"]


class LatencyParams(FaultParams):
    seconds: float | None = Field(None, ge=0, le=60, description="added to every API "
                                  "request (or give ms)")
    ms: float | None = Field(None, ge=0, le=60_000, description="the same in milliseconds")


class ErrorParams(FaultParams):
    count: int = Field(1, ge=1, le=1_000_000, description="how many requests get the error")
    path: str = Field("*", min_length=1, description="a glob on the request path, e.g. "
                      "/api/v1/namespaces/*/pods")
    method: Method = Field("*", description="only requests with this method")


class ThrottleParams(ErrorParams):
    retry_after: int = Field(1, ge=0, le=3600, description="the Retry-After header, seconds")


def register_api_faults(reg: FaultRegistry, faults: ApiFaults, store: Store) -> None:

    def latency(_target: str | None, p: dict[str, Any]) -> dict[str, Any]:
        faults.latency_s = float(p.get("seconds", p.get("ms", 0.0) / 1000))
        return {"latency_s": faults.latency_s}

    def error_rule(code: int) -> Any:
        def add(_target: str | None, p: dict[str, Any]) -> dict[str, Any]:
            rule = ErrorRule(code, p["count"], p.get("retry_after", 1), p["path"], p["method"])
            faults.rules.append(rule)
            return {"code": code, "count": rule.remaining, "path": rule.path}
        return add

    def drop_watches(_target: str | None, _p: dict[str, Any]) -> dict[str, Any]:
        return {"dropped": store.drop_all_watches()}

    def force_410(_target: str | None, _p: dict[str, Any]) -> dict[str, Any]:
        store.compact()
        return {"dropped": store.drop_all_watches(), "compacted_to": store.resource_version}

    def clear(_target: str | None, _p: dict[str, Any]) -> dict[str, Any]:
        faults.clear()
        return {"cleared": True}

    reg.register("api-latency", latency, "add latency to every API request",
                 params=LatencyParams)
    reg.register("api-429", error_rule(429), "answer the next `count` requests with 429 and "
                 "Retry-After", params=ThrottleParams)
    reg.register("api-500", error_rule(500), "answer the next `count` requests with 500",
                 params=ErrorParams)
    reg.register("drop-watches", drop_watches, "close every open watch connection")
    reg.register("force-410", force_410, "forget watch history: older resourceVersions get "
                 "410 Gone, open watches are closed")
    reg.register("api-clear", clear, "remove API latency and pending error rules")
