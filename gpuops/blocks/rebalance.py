"""The GPU rebalance policy Block: what a repack may move, what a move costs, who approves.

Why a Block: operators tune move costs, budgets and the approval rule in the Prefect UI
without a deploy, and every run records which document it used. Values are checked when the
Block is built or loaded, with errors naming the field (`move_cost_by_owner_kind['Job']:
must be >= 0`), before anything is read from the cluster.

Move costs: a serving replica reloads its weights for minutes, a training pod loses the
progress since its last checkpoint. A pod's own `gpuops.io/move-cost` annotation wins; else
its controller's kind's cost here; else `default_move_cost`.
"""

from __future__ import annotations

import math
import re

from prefect.blocks.core import Block
from pydantic import ConfigDict, Field, field_validator

from gpuops.common.annotations import DO_NOT_MOVE

# A qualified annotation name: optional DNS prefix, then a name of [A-Za-z0-9._-].
_ANNOTATION = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*"
                         r"[A-Za-z0-9])?$")
OWNER_KINDS = ("ReplicaSet", "StatefulSet", "Job", "ReplicationController")


class RebalancePolicy(Block):
    """Defaults of the gpu-rebalance flow (a run's parameters override the budget and time)."""

    _block_type_name = "gpuops rebalance policy"
    _block_type_slug = "gpuops-rebalance-policy"
    _description = "Move budget, move costs, opt-outs and approval for GPU rebalance."
    model_config = ConfigDict(hide_input_in_errors=True)

    max_moves: int = Field(5, ge=0, le=1000, description="Most pods one run evicts.")
    time_limit_s: float = Field(10.0, gt=0, le=600, allow_inf_nan=False,
                                description="Planning time bound (the best plan found by "
                                "then is used).")
    settle_timeout_s: float = Field(600.0, gt=0, le=86400, allow_inf_nan=False,
                                    description="How long the run waits for the pending "
                                    "pods and the moved pods' replacements to be scheduled "
                                    "before it reports what did not happen and cleans up.")
    default_move_cost: float = Field(1.0, ge=0, allow_inf_nan=False,
                                     description="Cost of moving a pod with no other cost.")
    move_cost_by_owner_kind: dict[str, float] = Field(
        default_factory=lambda: {"ReplicaSet": 1.0, "StatefulSet": 3.0, "Job": 5.0},
        description="Cost of moving a pod by its controller's kind (a Job's pod loses its "
        "progress since the last checkpoint); a pod's gpuops.io/move-cost annotation wins.",
        examples=[{"ReplicaSet": 1.0, "Job": 10.0}])
    opt_out_annotation: str = Field(DO_NOT_MOVE, min_length=1, description="Pods with this "
                                    "annotation set to \"true\" are never moved (as are "
                                    "karpenter.sh/do-not-disrupt and cluster-autoscaler's "
                                    "safe-to-evict: \"false\").")
    allow_local_storage: bool = Field(False, description="Move pods with emptyDir/hostPath "
                                      "volumes (their data is lost).")
    expected_wait_hours: float = Field(1.0, ge=0, le=720, allow_inf_nan=False,
                                       description="How long pending pods would wait without "
                                       "the repack (for a new node, or others to finish): "
                                       "GPU-hours saved = GPUs put to work x this.")
    approval_policy_block: str = Field("", description="The ApprovalPolicy Block approvals "
                                       "use; empty: the flow's policy_block parameter, else "
                                       "the settings default.")
    approve_up_to_moves: int = Field(0, ge=0, description="Plans of at most this many moves "
                                     "run without asking (0: always ask).")
    eviction_attempts: int = Field(6, ge=1, le=20, description="Tries of an eviction a "
                                   "PodDisruptionBudget refuses (each after the API's "
                                   "Retry-After) before the run re-plans without that pod, "
                                   "once, and stops if that does not help either.")

    @field_validator("move_cost_by_owner_kind")
    @classmethod
    def _costs(cls, costs: dict[str, float]) -> dict[str, float]:
        for kind, cost in costs.items():
            if kind not in OWNER_KINDS:
                raise ValueError(f"move_cost_by_owner_kind[{kind!r}]: not a controller kind a "
                                 f"rebalance moves; one of {list(OWNER_KINDS)}")
            if not (isinstance(cost, (int, float)) and math.isfinite(cost) and cost >= 0):
                raise ValueError(f"move_cost_by_owner_kind[{kind!r}]: must be a finite "
                                 "number >= 0")
        return costs

    @field_validator("opt_out_annotation")
    @classmethod
    def _annotation(cls, name: str) -> str:
        if not _ANNOTATION.fullmatch(name) or len(name.rsplit("/", 1)[-1]) > 63:
            raise ValueError("opt_out_annotation: not a valid annotation name (e.g. "
                             "gpuops.io/do-not-move)")
        return name

    @classmethod
    def from_settings(cls) -> RebalancePolicy:
        return cls()
