"""The serving rollout policy Block: the defaults a rollout's parameters fall back on.

Why a Block: the steps, gates and windows a team trusts are set once in the Prefect UI, not
retyped per rollout, and every run records which document it used. A run's own parameters
(steps, gates, window, minimum requests, mode, approval) override these. Values are checked
when the Block is built or loaded, with errors naming the field, before anything is read from
the cluster; the gates are parsed by the same code the flow judges with.
"""

from __future__ import annotations

from typing import Any, Literal

from prefect.blocks.core import Block
from pydantic import ConfigDict, Field, field_validator

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.gates import DEFAULT_MIN_REQUESTS, parse_gates
from gpuops.tasks.rollout.params import DEFAULT_STEPS, parse_steps


class RolloutPolicy(Block):
    """Defaults of the serving-rollout flow."""

    _block_type_name = "gpuops rollout policy"
    _block_type_slug = "gpuops-rollout-policy"
    _description = "Steps, gates, windows, warm-up, approval and clean-up for serving rollouts."
    model_config = ConfigDict(hide_input_in_errors=True)

    steps: list[int] = Field(default_factory=lambda: list(DEFAULT_STEPS), description="The "
                             "new version's traffic percentages, increasing, ending at 100.")
    gates: list[dict[str, Any]] | None = Field(None, description="Gates, each `{metric, "
                                               "factor, slack, floor}` (relative to the old "
                                               "version) or `{metric, limit}`; empty: the "
                                               "built-in gates.",
                                               examples=[[{"metric": "ttft_p90",
                                                           "factor": 1.2}]])
    min_requests: int = Field(DEFAULT_MIN_REQUESTS, ge=1, description="Requests each version "
                              "must finish in a window before it is judged.")
    window_s: float = Field(300.0, gt=0, allow_inf_nan=False, description="Analysis window "
                            "after each step.")
    step_timeout_s: float = Field(1800.0, gt=0, allow_inf_nan=False, description="How long a "
                                  "window may grow while waiting for requests; then the step "
                                  "fails.")
    poll_s: float = Field(15.0, gt=0, allow_inf_nan=False, description="How often a growing "
                          "window is judged again.")
    ready_timeout_s: float = Field(1800.0, gt=0, allow_inf_nan=False, description="New "
                                   "replicas must be Ready and warm within this.")
    warmup_requests: int = Field(10, ge=0, description="Warm-up requests per replica and "
                                 "batch (0: no warm-up).")
    warmup_interval_s: float = Field(15.0, gt=0, allow_inf_nan=False, description="Time "
                                     "between warm-up batches.")
    warm_tolerance: float = Field(0.15, gt=0, lt=1, description="Warm when a batch's mean "
                                  "TTFT is this close to the batch before.")
    keep_old_s: float = Field(3600.0, ge=0, allow_inf_nan=False, description="After 100 %, "
                              "how long the old version stays warm (a quick way back).")
    on_success: Literal["scale-to-zero", "delete"] = Field(
        "scale-to-zero", description="What becomes of the old version after keep_old_s.")
    mode: Literal["auto", "blue-green", "fixed-capacity"] = Field(
        "auto", description="blue-green needs spare GPUs for a full copy; fixed-capacity "
        "moves capacity_step replicas at a time; auto picks blue-green when it fits.")
    capacity_step: int = Field(1, ge=1, description="Replicas moved at a time in "
                               "fixed-capacity mode.")
    approve: Literal["final", "every-step", "none"] = Field(
        "final", description="Ask for approval before 100 %, before every step, or never.")
    baseline: Literal["auto", "none", "fresh-copy"] = Field(
        "auto", description="fresh-copy: a copy of the old version as large as the new one, "
        "started and warmed with it and given its weight below 50 %, so both are judged "
        "equally busy from the first step (a version only slower is caught at 1 %); "
        "blue-green only, and it needs its GPUs too (else the plan says so and runs without "
        "it). auto: fresh-copy when there is room for it, else none (the old pool).")
    no_room: Literal["fixed-capacity", "prewarm"] = Field(
        "fixed-capacity", description="Without spare GPUs for a blue-green copy: "
        "fixed-capacity, or prewarm: ask the capacity side (gpuops.gpu.capacity-needed) for "
        "nodes for the new replicas and wait up to prewarm_timeout_s, then blue-green.")
    prewarm_timeout_s: float = Field(900.0, gt=0, allow_inf_nan=False, description="How "
                                     "long a pre-warm waits for the new pods to be placed.")
    prewarm_fallback: Literal["fixed-capacity", "fail"] = Field(
        "fixed-capacity", description="After a pre-warm timed out (its pods removed): "
        "fixed-capacity, or fail the rollout.")
    adapt_steps: bool | None = Field(None, description="Raise a first step whose window "
                                     "would not see min_requests at the pool's measured "
                                     "traffic (at most max_first_step); empty: on for the "
                                     "built-in steps, off for steps given to a run.")
    max_first_step: int = Field(10, ge=1, lt=50, description="The most a first step is "
                                "raised to by adapt_steps, %.")
    approval_policy_block: str = Field("", description="The ApprovalPolicy Block approvals "
                                       "use; empty: the flow's policy_block parameter.")
    notify_channel: str = Field("", description="Slack channel told of rollbacks (with the "
                                "failed gates' numbers); empty: the approval channel.")
    prometheus_url: str = Field("", description="Prometheus HTTP API; empty: "
                                "GPUOPS_PROMETHEUS_URL.")
    lock_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False, description="How long a "
                                  "run waits for another rollout of the pool to end before it "
                                  "gives up.")

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: list[int]) -> list[int]:
        try:
            return list(parse_steps(steps))
        except ConfigError as e:
            raise ValueError(str(e)) from None

    @field_validator("gates")
    @classmethod
    def _gates(cls, gates: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if gates:
            try:
                parse_gates(gates)
            except ConfigError as e:
                raise ValueError(str(e)) from None
        return gates or None

    @classmethod
    def from_settings(cls) -> RolloutPolicy:
        return cls()
