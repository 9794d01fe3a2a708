"""Where a pod may run, and whether the planner may move it at all.

Placement rules are kube-scheduler's filters that a move could break: node selector,
required node affinity, taints (NoSchedule and NoExecute; PreferNoSchedule only scores),
cordons, and the GPU model a pod allows. Resource fit is counted in `state.py`.

Movability is the rebalance's own rule set (issue 17, "Plan"): never a pod without a
controller (nothing would recreate it), never a DaemonSet pod (recreated on the same node
only), never a pod with local storage unless allowed, never one that opts out —
`gpuops.io/do-not-move: "true"`, `karpenter.sh/do-not-disrupt: "true"`,
`cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`. Priority and PDB budgets depend
on the plan as a whole and are enforced by the planner.
"""

from __future__ import annotations

from typing import Any

from gpuops.common.annotations import CA_SAFE_TO_EVICT, DO_NOT_MOVE, KARPENTER_DO_NOT_DISRUPT
from gpuops.tasks.rebalance.model import CONTROLLER_KINDS, Node, Pod

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def admits(node: Node, pod: Pod) -> str | None:
    """Why `node` cannot take `pod` (ignoring free resources), or None if it can."""
    if node.cordoned:
        return "cordoned"
    if pod.gpu_count and pod.gpu_count > node.gpus:
        return f"has {node.gpus} GPU(s), the pod asks for {pod.gpu_count}"
    if pod.gpu_count and pod.gpu_models and node.gpu_model not in pod.gpu_models:
        return f"GPU model {node.gpu_model!r} is not one of {sorted(pod.gpu_models)}"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return f"node selector {key}={value} does not match"
    if pod.affinity and not any(all(r.matches(node.labels) for r in term)
                                for term in pod.affinity):
        return "required node affinity does not match"
    for taint in node.taints:
        if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint)
                                                         for t in pod.tolerations):
            return f"taint {taint.key}={taint.value}:{taint.effect} is not tolerated"
    return None


def constraint_signature(pod: Pod) -> tuple[Any, ...]:
    """Pods with equal signatures are admitted by the same nodes (cached masks)."""
    return (pod.gpu_count > 0, pod.gpu_count, tuple(sorted(pod.gpu_models)),
            tuple(sorted(pod.node_selector.items())), pod.affinity,
            tuple(sorted(pod.tolerations, key=repr)))


def why_unmovable(pod: Pod, *, allow_local_storage: bool = False) -> str | None:
    """Why the planner must leave `pod` where it is, or None if it may move it."""
    if pod.owner_kind is None:
        return "no controller would recreate it"
    if pod.owner_kind == "DaemonSet":
        return "a DaemonSet pod"
    if pod.owner_kind not in CONTROLLER_KINDS:
        return f"owner kind {pod.owner_kind!r} is not known to recreate it"
    annotations = pod.annotations
    if annotations.get(DO_NOT_MOVE, "").lower() == "true":
        return f"{DO_NOT_MOVE}: true"
    if annotations.get(KARPENTER_DO_NOT_DISRUPT, "").lower() == "true":
        return f"{KARPENTER_DO_NOT_DISRUPT}: true"
    if annotations.get(CA_SAFE_TO_EVICT, "").lower() == "false":
        return f"{CA_SAFE_TO_EVICT}: false"
    if pod.local_storage and not allow_local_storage:
        return "uses local storage"
    return None
