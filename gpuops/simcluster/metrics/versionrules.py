"""The serving-version faults' rules and parameters: which pods a `bad-version` degrades, what a
`slow-version` changes, and the typed parameters of both (and of `good-version`) that the fault
registry validates before any handler runs (a bad value is a 400 naming the field)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ..core.faults import FaultParams
from ..core.versions import VersionMatch
from .serving import Degradation, PoolKey
from .servingindex import PodView


@dataclass(frozen=True)
class DegradeRule:
    """A `bad-version` fault: pods of `pool`, or pods of a version (image, model, command-line
    globs), are degraded."""

    pool: PoolKey | None
    version: VersionMatch
    degradation: Degradation

    def matches(self, view: PodView, pools: set[PoolKey]) -> bool:
        if self.pool is not None and self.pool in pools:
            return True
        return self.version.matches(view.images, view.model, view.facts.argv)


@dataclass(frozen=True)
class SlowRule:
    """A `slow-version` fault: its load time is the kubelet's (`LoadTimes`); what it says of
    the cold period after Ready replaces the pods' own (`warmup`: Warmup's field names)."""

    version: VersionMatch
    load_seconds: float
    warmup: dict[str, float]

    def matches(self, view: PodView) -> bool:
        return self.version.matches(view.images, view.model, view.facts.argv)


class VersionParams(FaultParams):
    image: str | None = Field(None, min_length=1, description="a glob on the pods' image, "
                              "e.g. vllm/vllm-openai:v0.12.0-*")
    model: str | None = Field(None, min_length=1, description="a glob on the served model "
                              "name (sim.gpuops.io/model, --served-model-name, --model)")
    args: str | None = Field(None, min_length=1, description="a glob on the containers' "
                             "command and args joined by spaces, e.g. *--max-num-seqs 512*")


class BadVersionParams(VersionParams):
    ttft_factor: float = Field(3.0, ge=0, le=1000, description="time to first token x this")
    itl_factor: float | None = Field(None, ge=0, le=1000, description="inter-token latency x "
                                     "this (default: ttft_factor)")
    error_rate: float = Field(0.05, ge=0, le=1, description="share of requests that fail "
                              "(finished_reason=error), drawn per request")
    prefix_hit_factor: float = Field(1.0, ge=0, le=10, description="prefix-cache hit ratio x "
                                     "this (capped at 1); fewer hits also lengthen TTFT")
    min_rps_per_replica: float = Field(0.0, ge=0, le=100000, description="apply only while "
                                       "a replica's offered load is at least this many "
                                       "requests/s")
    min_utilisation: float = Field(0.0, ge=0, le=100, description="apply only while a "
                                   "replica's offered load / capacity is at least this")


class SlowVersionParams(VersionParams):
    load_seconds: float = Field(600.0, ge=0, le=86400, description="model-load time after "
                                "the container starts: startup and readiness probes fail "
                                "until then")
    warmup_s: float | None = Field(None, ge=0, le=86400, description="cold period after "
                                   "Ready (default: the pods' sim.gpuops.io/warmup-seconds, "
                                   "else 90)")
    cold_ttft_factor: float | None = Field(None, ge=1, le=1000, description="TTFT multiplier "
                                           "at Ready, decaying to 1 (default 2.5)")
    cold_itl_factor: float | None = Field(None, ge=1, le=1000, description="inter-token "
                                          "latency multiplier at Ready (default 1.2)")


class GoodVersionParams(FaultParams):
    image: str | None = Field(None, min_length=1, description="clear only the bad-version "
                              "and slow-version faults of this image glob")


WARMUP_PARAMS = {"warmup_s": "seconds", "cold_ttft_factor": "ttft_factor",
                  "cold_itl_factor": "itl_factor"}  # slow-version's name: Warmup's


def version_of(params: dict[str, Any]) -> VersionMatch:
    return VersionMatch(params.get("image"), params.get("model"), params.get("args"))
