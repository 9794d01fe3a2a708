"""The capacity pre-warm configuration Block: pools, model profiles, quotas, demand queries.

Why a Block: operators change prices, pool limits and queries in the Prefect UI without a
deploy, and every run records which document it used. Values are checked when the Block is
built or loaded, with errors naming the field (`pools['h100'].max_size: 2 is below min_size
4`), so a bad edit fails before any query or solver work, never half way through applying.

The pool and model entries mirror `tasks.capacity.NodePoolSpec` / `ModelProfile`, plus how
each pool is sized (EKS node group, Auto Scaling group, or placeholder pods for Karpenter).
`from_settings()` describes the embedded default cluster (`gpuops up`, scenario `default`).
"""

from __future__ import annotations

from typing import Any, Literal

from prefect.blocks.core import Block
from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_DEMAND_QUERY = 'sum(rate(vllm:request_success_total{{model_name="{model}"}}[5m]))'


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class PoolConfig(_Entry):
    """One node pool the plan may size (fields as in `NodePoolSpec`, without `current_size`:
    that is read from AWS or the cluster at each run)."""

    name: str = Field(min_length=1, description="Pool name (nodes' `gpuops.io/pool` label).")
    instance_type: str = Field(min_length=1, examples=["p5.48xlarge"])
    gpus_per_node: int = Field(ge=1)
    gpu_product: str = Field("", examples=["NVIDIA-H100-80GB-HBM3"])
    price_per_hour: float = Field(ge=0, allow_inf_nan=False, description="$ per node-hour.")
    min_size: int = Field(0, ge=0)
    max_size: int = Field(ge=0)
    lead_time_hours: int = Field(1, ge=0, description="Hours from request to a node that "
                                 "serves (boot, device plugin, image, weights), rounded up.")
    gpu_family: str = Field("", description="Quota family; empty: the instance family "
                            "(`p5` for `p5.48xlarge`).")
    max_nodes_added_per_hour: int | None = Field(None, ge=0)
    backing: Literal["eks", "asg", "placeholder"] = Field(
        "eks", description="eks: raise the managed node group's minSize; asg: set the Auto "
        "Scaling group's desired capacity; placeholder: low-priority pods (Karpenter).")
    aws_name: str = Field("", description="Node group / ASG name; empty: the pool name.")
    node_selector: str = Field("", description="Label selector of the pool's nodes; empty: "
                               "`gpuops.io/pool=<name>`.")
    warm_pool: bool = Field(False, description="asg only: keep the rest of the day's peak "
                            "as stopped, pre-initialised instances in the ASG's warm pool.")

    @model_validator(mode="after")
    def _sizes(self) -> PoolConfig:
        if self.max_size < self.min_size:
            raise ValueError(f"pools[{self.name!r}].max_size: {self.max_size} is below "
                             f"min_size {self.min_size}")
        if self.warm_pool and self.backing != "asg":
            raise ValueError(f"pools[{self.name!r}].warm_pool: only Auto Scaling groups "
                             f"have warm pools here, this pool's backing is {self.backing!r}")
        return self

    @property
    def family(self) -> str:
        return self.gpu_family or self.instance_type.split(".", 1)[0]

    @property
    def group_name(self) -> str:
        return self.aws_name or self.name

    @property
    def selector(self) -> str:
        return self.node_selector or f"gpuops.io/pool={self.name}"


class ModelConfig(_Entry):
    """How one model serves (as `ModelProfile`), and the query that measures its demand."""

    name: str = Field(min_length=1, description="Model name as vLLM serves it.")
    gpus_per_replica: int = Field(ge=1)
    allowed_pools: list[str] = Field(min_length=1)
    throughput_per_replica: float = Field(gt=0, allow_inf_nan=False, description="Demand "
                                          "units per hour one replica serves at its SLO.")
    load_time_s: float = Field(0.0, ge=0)
    min_replicas: int = Field(0, ge=0)
    demand_query: str = Field("", description="PromQL for the demand; empty: the default "
                              "request rate, " + DEFAULT_DEMAND_QUERY.format(model="M"))
    demand_is_counter: bool = Field(False, description="The query returns a raw counter "
                                    "(rates are then computed here, resets handled).")

    def query(self) -> str:
        return self.demand_query or DEFAULT_DEMAND_QUERY.format(model=self.name)


class QuotaConfig(_Entry):
    family: str = Field(min_length=1, examples=["p5"])
    max_gpus: int = Field(ge=0)


class PlaceholderConfig(_Entry):
    """Placeholder pods for pools sized by Karpenter (or cluster-autoscaler without a node
    group gpuops may touch)."""

    namespace: str = Field("default")
    priority_class: str = Field("gpuops-placeholder", description="Must have value -10: "
                                "cluster-autoscaler ignores pods below -10 when scaling up.")
    gpus_per_pod: int = Field(0, ge=0, description="GPUs each pause pod requests; 0: a "
                              "whole node's GPUs.")
    image: str = Field("registry.k8s.io/pause:3.10")


class CapacityConfig(Block):
    """What capacity pre-warm plans for and how it measures demand."""

    _block_type_name = "gpuops capacity config"
    _block_type_slug = "gpuops-capacity-config"
    _description = "Node pools, model profiles, quotas and demand queries for capacity pre-warm."
    model_config = ConfigDict(hide_input_in_errors=True)  # errors name fields, not values

    pools: list[PoolConfig] = Field(min_length=1)
    models: list[ModelConfig] = Field(min_length=1)
    quotas: list[QuotaConfig] = Field(default_factory=list)
    prometheus_url: str = Field("", description="Prometheus base URL; empty: "
                                "GPUOPS_PROMETHEUS_URL.", examples=["http://prometheus:9090"])
    eks_cluster_name: str = Field("", description="EKS cluster of the node groups; empty: "
                                  "the KubernetesCluster Block's cluster_name.")
    demand_scale: float = Field(3600.0, gt=0, description="Multiply a query's value by this "
                                "to get demand per hour (3600: a per-second rate).")
    history_days: int = Field(14, ge=1, le=90)
    quantile: float = Field(0.9, gt=0, lt=1)
    headroom: bool = Field(True, description="Add the measured intra-hour burst headroom.")
    headroom_days: int = Field(7, ge=1, le=30)
    horizon_hours: int = Field(24, ge=1, le=168)
    chart_days: int = Field(3, ge=1, le=14, description="Days of forecast vs actual to chart.")
    approval_cost_per_hour: float = Field(50.0, ge=0, description="Ask for approval when the "
                                          "change adds more than this many $ per hour.")
    time_limit_s: float = Field(60.0, gt=0)
    mip_rel_gap: float = Field(0.01, ge=0, lt=1)
    placeholder: PlaceholderConfig = Field(default_factory=PlaceholderConfig)

    @model_validator(mode="after")
    def _references(self) -> CapacityConfig:
        names = [p.name for p in self.pools]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"pools[{i}].name: duplicate pool {name!r}")
        seen: set[str] = set()
        for model in self.models:
            if model.name in seen:
                raise ValueError(f"models[{model.name!r}].name: duplicate model")
            seen.add(model.name)
            for pool in model.allowed_pools:
                if pool not in names:
                    raise ValueError(f"models[{model.name!r}].allowed_pools: unknown pool "
                                     f"{pool!r}; known pools: {sorted(names)}")
                gpus = next(p.gpus_per_node for p in self.pools if p.name == pool)
                if gpus < model.gpus_per_replica:
                    raise ValueError(f"models[{model.name!r}].allowed_pools: pool {pool!r} "
                                     f"has {gpus} GPUs per node, a replica needs "
                                     f"{model.gpus_per_replica}")
        families = {p.family for p in self.pools}
        for quota in self.quotas:
            if quota.family not in families:
                raise ValueError(f"quotas[{quota.family!r}].family: no pool has this GPU "
                                 f"family; pool families: {sorted(families)}")
        return self

    def pool(self, name: str) -> PoolConfig:
        return next(p for p in self.pools if p.name == name)

    # The planner's inputs (imported lazily: cvxpy costs a second to import).

    def node_pool_specs(self, current_sizes: dict[str, int]) -> list[Any]:
        from gpuops.tasks.capacity.plan import NodePoolSpec

        return [NodePoolSpec(
            name=p.name, instance_type=p.instance_type, gpus_per_node=p.gpus_per_node,
            gpu_product=p.gpu_product, price_per_hour=p.price_per_hour, min_size=p.min_size,
            max_size=p.max_size, lead_time_hours=p.lead_time_hours, gpu_family=p.family,
            current_size=current_sizes[p.name],
            max_nodes_added_per_hour=p.max_nodes_added_per_hour) for p in self.pools]

    def model_profiles(self) -> list[Any]:
        from gpuops.tasks.capacity.plan import ModelProfile

        return [ModelProfile(
            name=m.name, gpus_per_replica=m.gpus_per_replica,
            allowed_pools=tuple(m.allowed_pools), throughput_per_replica=m.throughput_per_replica,
            load_time_s=m.load_time_s, min_replicas=m.min_replicas) for m in self.models]

    def gpu_quotas(self) -> list[Any]:
        from gpuops.tasks.capacity.plan import GpuQuota

        return [GpuQuota(q.family, q.max_gpus) for q in self.quotas]

    def plan_options(self) -> Any:
        from gpuops.tasks.capacity.plan import PlanOptions

        return PlanOptions(time_limit_s=self.time_limit_s, mip_rel_gap=self.mip_rel_gap)

    @classmethod
    def from_settings(cls) -> CapacityConfig:
        """The embedded default cluster's pools and models (scenario `default`)."""
        return cls(**_DEFAULT)


_DEFAULT: dict[str, Any] = {
    "pools": [
        {"name": "h100", "instance_type": "p5.48xlarge", "gpus_per_node": 8,
         "gpu_product": "NVIDIA-H100-80GB-HBM3", "price_per_hour": 55.04, "max_size": 8,
         "lead_time_hours": 1, "backing": "eks"},
        {"name": "l4", "instance_type": "g6.12xlarge", "gpus_per_node": 4,
         "gpu_product": "NVIDIA-L4", "price_per_hour": 4.6016, "min_size": 1, "max_size": 10,
         "lead_time_hours": 1, "backing": "asg", "aws_name": "sim-l4"},
    ],
    "models": [
        # capacity-rps annotations of the scenario, x 3600 s: requests per hour per replica.
        {"name": "llama-3-8b", "gpus_per_replica": 1, "allowed_pools": ["l4"],
         "throughput_per_replica": 8 * 3600, "load_time_s": 40, "min_replicas": 1},
        {"name": "qwen-72b", "gpus_per_replica": 4, "allowed_pools": ["h100"],
         "throughput_per_replica": 3 * 3600, "load_time_s": 180, "min_replicas": 1},
    ],
}
