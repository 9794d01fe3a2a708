"""How a simulated cluster is configured: what it is, and each component's typed settings.

`SimConfig` is what a caller (`gpuops sim serve`, a test, a benchmark) starts a cluster with.
`Knobs` are the simulated components' settings in the shape of a scenario file's `sim:`
section (plus its `demand:`), so that a scenario and a caller set them the same way; they are
validated once, here, and cluster.py hands each component only its own section (kwok's typed
`Config`, not a dict every component digs in).
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from .cloud.nodepools import NodePoolsConfig
from .controllers.nodelifecycle import NodeLifecycleConfig
from .kubelet.kubelet import KubeletConfig
from .kubelet.runtime import Tunables
from .kubelet.spec import DEFAULT_PULL_SECONDS, PullTimes
from .metrics.serving import DemandModel
from .scheduler.scheduler import SchedulerConfig

DEFAULT_CLUSTER_NAME = "sim"  # SimConfig's default: a scenario's cluster.name replaces it


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KubeletKnobs(_Section):
    """`sim.kubelet`: image pull times, and the `Tunables` (unset ones keep their default)."""

    pull_seconds: float = DEFAULT_PULL_SECONDS  # an image pull the pod does not time
    image_pull_seconds: dict[str, float] = Field(default_factory=dict)  # {image glob: seconds}
    log_interval: float | None = None
    max_backfill_lines: int | None = None
    pull_fail_seconds: float | None = None
    show_err_image_pull: float | None = None
    mount_retry_cap: float | None = None

    def config(self) -> KubeletConfig:
        tunables = self.model_dump(exclude_none=True,
                                   exclude={"pull_seconds", "image_pull_seconds"})
        return KubeletConfig(PullTimes(self.pull_seconds,
                                       tuple(self.image_pull_seconds.items())),
                             Tunables(**tunables))


class Knobs(_Section):
    """The simulated components' settings (a scenario's `sim:` section, and `demand:`)."""

    scheduler_scoring: str = "LeastAllocated"  # or MostAllocated, which packs nodes
    kubelet: KubeletKnobs = Field(default_factory=KubeletKnobs)
    node_lifecycle_tick_seconds: float = NodeLifecycleConfig.tick_seconds
    nodepool_tick_seconds: float = NodePoolsConfig.tick_seconds
    aws_poll_seconds: float = NodePoolsConfig.aws_poll_seconds
    # per model: {baseRps, peakRps, peakHourUtc, weekendFactor}, read by the metrics engine
    demand: dict[str, Any] = Field(default_factory=dict)
    # the cluster's seed: every random draw of the serving model (which request fails, its
    # latencies) follows from it, so a run can be repeated
    seed: int = Field(0, ge=0)

    @field_validator("scheduler_scoring")
    @classmethod
    def _known_scoring(cls, value: str) -> str:
        SchedulerConfig(value)  # raises naming the strategies
        return value

    @field_validator("demand")
    @classmethod
    def _valid_demand(cls, value: dict[str, Any]) -> dict[str, Any]:
        DemandModel.from_config(value)  # raises naming the model and field
        return value

    def merged(self, sim: Knobs, demand: dict[str, Any]) -> Knobs:
        """These knobs with a scenario's `sim:` over them (each key given replaces this one)
        and its `demand:` models added to (or replacing) those here."""
        data = {**self.model_dump(exclude_unset=True), **sim.model_dump(exclude_unset=True)}
        if demand:
            data["demand"] = {**data.get("demand", {}), **demand}
        return Knobs.model_validate(data)

    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(self.scheduler_scoring)

    def node_lifecycle(self) -> NodeLifecycleConfig:
        return NodeLifecycleConfig(self.node_lifecycle_tick_seconds)

    def node_pools(self, aws_endpoint: str | None) -> NodePoolsConfig:
        return NodePoolsConfig(self.nodepool_tick_seconds, aws_endpoint, self.aws_poll_seconds)

    def demand_model(self) -> DemandModel:
        return DemandModel.from_config(self.demand)


class SimConfig(BaseModel):
    """One simulated cluster: its name, scenario, clock speed, AWS, and components' knobs."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    cluster_name: str = DEFAULT_CLUSTER_NAME
    scenario: str = "default"  # a name of a shipped scenario or a path to a YAML file
    speed: float = 1.0
    aws_endpoint: str | None = None  # moto's URL: node pools follow their node group / ASG
    history_window: int = 50_000
    controllers: bool = True  # False: a bare API server (for the scale benchmark)
    # `extra` is the name callers and tests have long used for these knobs.
    knobs: Knobs = Field(default_factory=Knobs,
                         validation_alias=AliasChoices("knobs", "extra"))
