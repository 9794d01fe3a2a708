"""Policy Blocks: who may approve, how long an approval may wait, what needs one."""

from __future__ import annotations

from prefect.blocks.core import Block
from pydantic import Field


class ApprovalPolicy(Block):
    """The human gate in front of every change to a live cluster or a cloud bill."""

    _block_type_name = "gpuops approval policy"
    _block_type_slug = "gpuops-approval-policy"
    _description = "Approvers, channel and timeout for gpuops approvals."

    approvers: list[str] = Field(default_factory=list, description="Slack user IDs allowed "
                                 "to approve or reject. Empty (and no group): approvals "
                                 "come only from the Prefect UI. Each request records "
                                 "them and this Block's name; a click must be allowed by "
                                 "both the record and this Block as it is at click time.",
                                 examples=[["U0123ABCD"]])
    approver_group: str | None = Field(None, description="A Slack user group ID whose "
                                       "members may approve.", examples=["S0123ABCD"])
    channel: str = Field("#gpuops-approvals", description="Channel approval requests go to.")
    timeout_s: int = Field(3600, gt=0, description="How long to wait; no answer is a 'no'.")
    poll_interval_s: int = Field(2, gt=0, description="How often the paused run checks "
                                 "whether it was resumed.")
    expiry_grace_s: int = Field(300, ge=60, description="Extra time the server keeps the "
                                "pause open after `timeout_s`, so the flow records the "
                                "timeout itself instead of the server failing the run.")
    suspend_after_s: int = Field(900, ge=0, description="Waits longer than this (`timeout_s` "
                                 "above it) suspend the run instead of pausing it: its "
                                 "process exits and the run starts again from the top when "
                                 "answered, so nothing sits idle. Needs a deployment (a run "
                                 "without one pauses) and the approval sweeper, which "
                                 "`gpuops sensor slack` runs, to turn silence into a 'no'.")

    @classmethod
    def from_settings(cls) -> ApprovalPolicy:
        return cls()

    @property
    def saved_as(self) -> str | None:
        """The name of the Block document this policy was loaded from (None when it was
        built in code or from settings): a request names it so that the Slack receiver
        re-reads it at click time."""
        return self._block_document_name
