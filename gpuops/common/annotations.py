"""Annotations gpuops writes on the cluster objects it changes, so that whoever reads the
object later (a person, another gpuops run, the restart diagnosis) knows what gpuops did.

An eviction gpuops performs records the flow run on the pod first: the diagnosis then calls
the pod's end planned, and names the run, instead of reading the pod's last crash as the cause.
"""

from __future__ import annotations

PREFIX = "gpuops.io/"
EVICTED_BY = PREFIX + "evicted-by"  # the flow run's id
EVICTED_BY_RUN = PREFIX + "evicted-by-run"  # the flow run's name
EVICTED_BY_FLOW = PREFIX + "evicted-by-flow"  # the flow's name (drain-node, ...)
EVICTION_MARKS = (EVICTED_BY, EVICTED_BY_RUN, EVICTED_BY_FLOW)
# A label, not an annotation: on the placeholder pods that hold capacity for a node pool, so
# that counting a pool's use leaves them out.
PLACEHOLDER_LABEL = PREFIX + "placeholder"


def gpuops_annotations(annotations: dict[str, str] | None) -> dict[str, str]:
    """The `gpuops.io/` annotations of an object: what gpuops recorded on it."""
    return {k: v for k, v in (annotations or {}).items() if k.startswith(PREFIX)}

# Opt-outs and settings users put on their pods for GPU rebalance (tasks/rebalance).
DO_NOT_MOVE = PREFIX + "do-not-move"  # "true": the rebalance planner never moves this pod
MOVE_COST = PREFIX + "move-cost"  # a number: what moving this pod costs (default 1)
# Other tools' opt-outs the planner honours too.
KARPENTER_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"  # "true"
CA_SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"  # "false" = do not evict

# Set by simcluster's scheduler when it binds a GPU pod (as a GPU-sharing scheduler does):
# the indices of the node's GPUs the pod holds, "3" or "0,1". Read by the kubelet, the DCGM
# exporter and gpuops' packing (which GPU of a node is free, and how much of it).
GPU_INDEX = PREFIX + "gpu-index"

# Temporary changes of a GPU rebalance run (flows/gpu_rebalance.py), recorded on the objects
# so that the next run removes what a crashed one left. The taint's value is the run's id;
# nodes and pods it changed carry the run's id and the time after which the change may be
# presumed abandoned (RFC 3339, UTC) even if the run still looks alive.
REBALANCE_TAINT = PREFIX + "rebalance"  # taint key on the nodes a plan frees
REBALANCE_RUN = PREFIX + "rebalance-run"  # annotation: the flow run id
REBALANCE_EXPIRES = PREFIX + "rebalance-expires"  # annotation: RFC 3339 UTC
REBALANCE_NOMINATED = PREFIX + "rebalance-nominated"  # pod annotation: the node it nominated

# A node gpuops is removing (cordon, drain, terminate its instance: tasks/actions/scale_in.py),
# recorded before the cordon so that the next run finishes or undoes what a crashed one left:
# the flow run's id, whether gpuops made the cordon (so only its own is taken back), and the
# time after which the removal may be presumed abandoned (RFC 3339, UTC).
SCALE_IN_RUN = PREFIX + "scale-in-run"
SCALE_IN_CORDONED = PREFIX + "scale-in-cordoned"  # "true": the node was schedulable before
SCALE_IN_EXPIRES = PREFIX + "scale-in-expires"
SCALE_IN_MARKS = (SCALE_IN_RUN, SCALE_IN_CORDONED, SCALE_IN_EXPIRES)

# A serving rollout in progress (flows/serving_rollout.py), recorded on the HTTPRoute it moves
# in the same patch as each weight change, so that the next run resumes or rolls back what a
# crashed one left: one JSON document (tasks/rollout/state.py). When a rollout ends the record
# goes and a one-line summary of how it ended stays.
ROLLOUT = PREFIX + "rollout"
ROLLOUT_LAST = PREFIX + "rollout-last"
# Set by `gpuops rollout abort` (who and why): the run going checks it between its waits and
# rolls back.
ROLLOUT_ABORT = PREFIX + "rollout-abort"
# On the objects a rollout creates (the new model server, InferencePool, endpoint picker): the
# run that made them, and the name the next version's names are derived from (a label, so a
# rollout of a rollout does not grow `-1a2b3c-4d5e6f` names).
ROLLOUT_RUN = PREFIX + "rollout-run"
ROLLOUT_BASE = PREFIX + "rollout-base"
