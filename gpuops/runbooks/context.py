"""What a step's binding is handed: the cluster, the run's mode and the connections it may
use, and nothing more (kwok's typed config rather than a god object)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.tasks.clients.aws import Aws
from gpuops.tasks.clients.kube import Kube

# (runbook name, parameters, dry run) -> that run's outcome and its steps' outputs
RunRunbook = Callable[[str, Mapping[str, Any], bool], Awaitable[dict[str, Any]]]


@dataclass
class StepContext:
    kube: Kube
    dry_run: bool
    runbook: str = ""
    step: str = ""
    run_id: str = ""  # the runbook's flow run, recorded on what a step changes
    plan: str = ""  # the dry-run plan, shown when a step asks for approval
    targets: tuple[str, ...] = ()  # what the plan changes (`node/<name>`...)
    slack: SlackConnection | None = None
    policy: ApprovalPolicy | None = None
    run_runbook: RunRunbook | None = None
    capacity: CapacityConfig | None = None  # the pools scale-node-pool may size
    aws: Aws | None = None
    deployment_parameters: Mapping[str, Any] = field(default_factory=dict)
    started_by: str = ""  # who started the run, as it said (Prefect has no user identity)
    separate_approver: bool = False  # the starter may not approve (the runbook says so)

    def need_slack(self) -> SlackConnection:
        if self.slack is None:
            raise RuntimeError("this step needs a Slack connection and the run has none")
        return self.slack
