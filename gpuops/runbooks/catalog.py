"""The actions a runbook step may call, declared as data (pure): name, argument model, output
model, destructive or not. What each one does is bound in bindings.py, over the project's own
safe actions and flows; validating a runbook needs only these declarations, so it runs
without a cluster, a Prefect server or Slack.

Argument models forbid unknown keys (a misspelt `nod:` is an error, not a default), and
their fields are what a template can read of a step's output (`steps.<name>.<field>`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuops.runbooks.params import DNS_LABEL, DNS_SUBDOMAIN
from gpuops.runbooks.registry import ActionCatalog
from gpuops.runbooks.schema import RUNBOOK_NAME, Duration

CATALOG = ActionCatalog()

NodeName = Annotated[str, Field(pattern=rf"^{DNS_SUBDOMAIN}$", description="A node's name.")]
PoolName = Annotated[str, Field(pattern=rf"^{DNS_SUBDOMAIN}$", description="A node pool.")]


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Output(BaseModel):
    model_config = ConfigDict(frozen=True)


class CheckResult(Output):
    ok: bool = Field(description="Does the condition hold?")
    detail: str = Field("", description="What was seen, for the person reading the run.")


class Changed(Output):
    changed: bool = Field(description="False when the desired state already held.")
    description: str = Field("", description="What was done, as the artifact says it.")


# --- nodes --------------------------------------------------------------------------------------

@CATALOG.action("cordon-node", "Mark a node unschedulable.", output=Changed, destructive=True)
class CordonArgs(Args):
    node: NodeName


@CATALOG.action("uncordon-node", "Make a node schedulable again.", output=Changed,
                destructive=True)
class UncordonArgs(Args):
    node: NodeName


class DrainOutput(Output):
    evicted: list[str] = Field(description="`namespace/name` of the pods evicted.")
    blocked: list[str] = Field(description="Pods a disruption budget kept.")
    skipped: list[str] = Field(description="Pods a drain leaves (DaemonSet, mirror, done).")


@CATALOG.action("drain-node", "Cordon a node and evict its pods through the Eviction API "
                "(disruption budgets honoured).", output=DrainOutput, destructive=True)
class DrainArgs(Args):
    node: NodeName
    eviction_attempts: int = Field(3, ge=1, le=20, description="Tries per pod while a "
                                   "disruption budget refuses.")


class Tainted(Changed):
    ours: bool = Field(True, description="This run holds the taint: False only with "
                       "`exclusive` when another runbook run had put it.")


@CATALOG.action("taint-node", "Put a taint on a node.", output=Tainted, destructive=True)
class TaintArgs(Args):
    node: NodeName
    key: str = Field(min_length=1, max_length=316)
    value: str = Field("", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    exclusive: bool = Field(False, description="Leave the taint, and the run it names, as "
                            "they are when another runbook run put it (`ours` is then "
                            "False): of runs at once, one holds it; the same run started "
                            "again (after an approval that suspended it) still does.")


@CATALOG.action("untaint-node", "Take a taint off a node.", output=Changed, destructive=True)
class UntaintArgs(Args):
    node: NodeName
    key: str = Field(min_length=1, max_length=316)
    value: str = Field("", max_length=63)


# --- node pools, serving, rebalance ---------------------------------------------------------------

class PoolSize(Output):
    previous: int = Field(description="The size before the step.")
    size: int = Field(description="The size asked for.")
    description: str = ""
    cost: str = Field("", description="The new size's price per hour, against now's (and "
                      "the GPU quota it leaves), from the capacity Block.")


@CATALOG.action("scale-node-pool", "Set a node pool's size (within its min/max and the GPU "
                "quota), through the capacity Block's pool configuration.", output=PoolSize,
                destructive=True)
class ScalePoolArgs(Args):
    pool: PoolName
    size: int = Field(ge=0, le=10_000)


class FlowRunOutput(Output):
    flow_run: str = Field(description="The flow run's id.")
    state: str = Field(description="Its final state's name (Completed, NotApproved...).")
    message: str = ""


@CATALOG.action("rollback-serving", "Abort a serving rollout and put the old version's "
                "weights back (the serving-rollout-abort deployment).", output=FlowRunOutput,
                destructive=True)
class RollbackArgs(Args):
    pool: str = Field(pattern=rf"^{DNS_LABEL}/{DNS_SUBDOMAIN}$", description="The "
                      "InferencePool, old or new, `namespace/name`.")
    reason: str = Field("", max_length=500)


class PoolRestart(Output):
    restarted: list[str] = Field(description="The pods evicted, in order.")
    replacements: list[str] = Field(description="The pods that took their place, each "
                                    "Ready and warm before the next eviction.")
    ready: int = Field(description="Ready pods at the start (and at the end).")


@CATALOG.action("restart-pool-replicas", "Rolling restart of an InferencePool's model-server "
                "pods: evict `max_unavailable` at a time (disruption budgets honoured), wait "
                "until as many replacements are Ready, serve the model and are warm, never "
                "going below `min_ready` Ready.", output=PoolRestart, destructive=True)
class RestartPoolArgs(Args):
    pool: str = Field(pattern=rf"^{DNS_LABEL}/{DNS_SUBDOMAIN}$", description="The "
                      "InferencePool, `namespace/name`.")
    max_unavailable: int = Field(1, ge=1, le=100, description="Pods restarted at a time.")
    min_ready: int = Field(1, ge=0, description="Ready pods that must remain while one is "
                           "restarted (the disruption check).")
    timeout: Duration = Field(900, description="Per batch: how long the replacements may "
                              "take to be Ready and warm.")
    warmup_requests: int = Field(4, ge=0, le=100, description="Requests per warm-up batch "
                                 "to each replacement (0: Ready and serving is enough).")
    warm_tolerance: float = Field(0.2, gt=0, le=1, description="Warm when a batch's mean "
                                  "TTFT is within this share of the batch before.")
    interval: Duration = Field(5, description="Look again this often.")


@CATALOG.action("rebalance", "Run a GPU rebalance (the gpu-rebalance deployment) and wait "
                "for it; it asks for its own approval.", output=FlowRunOutput,
                destructive=True)
class RebalanceArgs(Args):
    dry_run: bool = Field(False, description="Plan only (a runbook's dry run always is).")
    max_moves: int | None = Field(None, ge=1)


# --- people ----------------------------------------------------------------------------------------

class SlackPosted(Output):
    channel: str
    ts: str = Field(description="The message's timestamp (its id in Slack).")


@CATALOG.action("slack-post", "Post a message to a Slack channel.", output=SlackPosted,
                destructive=True)
class SlackPostArgs(Args):
    channel: str = Field(min_length=1, pattern=r"^[#@]?[A-Za-z0-9._-]+$")
    text: str = Field(min_length=1, max_length=3000)


class ApprovalOutput(Output):
    approved: bool
    approver: str
    comment: str = ""


@CATALOG.action("request-approval", "Ask for approval (Slack buttons or the Prefect UI), "
                "showing the plan; a timeout is a no.", output=ApprovalOutput,
                destructive=False)
class ApprovalArgs(Args):
    title: str = Field(min_length=1, max_length=150)
    summary: str = Field(min_length=1)
    reason: str = ""


# --- conditions -------------------------------------------------------------------------------------

class WaitOutput(Output):
    ok: bool
    waited_s: float
    detail: str = ""


@CATALOG.action("wait-until", "Wait until a check holds, or fail after the timeout.",
                output=WaitOutput, destructive=False)
class WaitArgs(Args):
    check: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="A registered check.")
    args: dict[str, Any] = Field(default_factory=dict, description="The check's arguments.")
    timeout: Duration = Field(description="Give up after this long.")
    interval: Duration = Field(5, description="Look again this often.")


@CATALOG.action("node-exists", "The node exists.", output=CheckResult, destructive=False,
                check=True)
class NodeExistsArgs(Args):
    node: NodeName


@CATALOG.action("node-has-gpus", "The node has at least `min` allocatable GPUs.",
                output=CheckResult, destructive=False, check=True)
class NodeGpusArgs(Args):
    node: NodeName
    min: int = Field(1, ge=1)


@CATALOG.action("node-drained", "No pod but DaemonSet and mirror pods runs on the node.",
                output=CheckResult, destructive=False, check=True)
class NodeDrainedArgs(Args):
    node: NodeName


@CATALOG.action("max-cordoned-in-pool", "At most `max` nodes of the pool are cordoned.",
                output=CheckResult, destructive=False, check=True)
class MaxCordonedArgs(Args):
    pool: PoolName
    max: int = Field(ge=0)


@CATALOG.action("min-free-gpus", "At least `min` GPUs are free (allocatable, not requested) "
                "on schedulable nodes, outside `excluding` if given.", output=CheckResult,
                destructive=False, check=True)
class MinFreeGpusArgs(Args):
    min: int = Field(ge=0)
    excluding: NodeName | None = Field(None, description="A node not to count (the one "
                                       "being drained).")


# --- runbooks ----------------------------------------------------------------------------------------

class RunbookOutput(Output):
    outcome: str = Field(description="completed | failed | not-approved | dry-run")
    steps: dict[str, Any] = Field(default_factory=dict, description="Its steps' outputs.")


@CATALOG.action("run-runbook", "Run another runbook with the given parameters.",
                output=RunbookOutput, destructive=True)
class RunRunbookArgs(Args):
    runbook: str = Field(pattern=RUNBOOK_NAME, description="Its name (not a template: "
                         "cycles between runbooks are found before any run).")
    params: dict[str, Any] = Field(default_factory=dict)
