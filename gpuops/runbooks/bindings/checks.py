"""Read-only checks (preconditions, `wait-until`): each answers `CheckResult` from live
state. A check changes nothing, so its prediction is the check itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpuops.common.errors import KubeNotFound
from gpuops.common.podfacts import holds_resources, node_allocatable_gpus, pod_gpus
from gpuops.runbooks.bindings import Prediction, predicts, runs
from gpuops.runbooks.catalog import (
    CheckResult,
    MaxCordonedArgs,
    MinFreeGpusArgs,
    NodeDrainedArgs,
    NodeExistsArgs,
    NodeGpusArgs,
)
from gpuops.runbooks.context import StepContext
from gpuops.tasks.actions.drain import plan_drain
from gpuops.tasks.clients.kube import Kube

POOL_LABEL = "gpuops.io/pool"  # what the capacity Block's pools are (blocks/capacity.py)
Check = Callable[[Kube, Any], CheckResult]
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    """Bind a synchronous read-only check as both halves of action `name`."""
    def register(fn: Check) -> Check:
        CHECKS[name] = fn

        async def run(ctx: StepContext, args: Any) -> CheckResult:
            return await asyncio.to_thread(fn, ctx.kube, args)

        async def predict(ctx: StepContext, args: Any) -> Prediction:
            result = await run(ctx, args)
            return Prediction(result, (), () if result.ok else (result.detail,))

        runs(name)(run)
        predicts(name)(predict)
        return fn
    return register


@check("node-exists")
def node_exists(kube: Kube, args: NodeExistsArgs) -> CheckResult:
    try:
        kube.get_node(args.node)
    except KubeNotFound:
        return CheckResult(ok=False, detail=f"node {args.node} does not exist")
    return CheckResult(ok=True, detail=f"node {args.node} exists")


@check("node-has-gpus")
def node_has_gpus(kube: Kube, args: NodeGpusArgs) -> CheckResult:
    try:
        gpus = node_allocatable_gpus(kube.get_node(args.node))
    except KubeNotFound:
        return CheckResult(ok=False, detail=f"node {args.node} does not exist")
    return CheckResult(ok=gpus >= args.min, detail=f"node {args.node} has {gpus} "
                       f"allocatable GPU(s); at least {args.min} wanted")


@check("node-drained")
def node_drained(kube: Kube, args: NodeDrainedArgs) -> CheckResult:
    pods = kube.list_pods(field_selector=f"spec.nodeName={args.node}")
    left = plan_drain(args.node, pods).evict
    names = ", ".join(f"{ns}/{name}" for ns, name, _ in left[:5])
    return CheckResult(ok=not left, detail=f"{len(left)} pod(s) still on node {args.node}"
                       + (f": {names}" if left else ""))


@check("max-cordoned-in-pool")
def max_cordoned(kube: Kube, args: MaxCordonedArgs) -> CheckResult:
    nodes = kube.list_nodes(label_selector=f"{POOL_LABEL}={args.pool}")
    cordoned = [n["metadata"]["name"] for n in nodes if (n.get("spec") or {}).get(
        "unschedulable")]
    return CheckResult(ok=len(cordoned) <= args.max, detail=f"{len(cordoned)} of "
                       f"{len(nodes)} node(s) of pool {args.pool} cordoned; at most "
                       f"{args.max} allowed")


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


@check("min-free-gpus")
def min_free_gpus(kube: Kube, args: MinFreeGpusArgs) -> CheckResult:
    nodes = {n["metadata"]["name"]: n for n in kube.list_nodes()
             if n["metadata"]["name"] != args.excluding
             and not (n.get("spec") or {}).get("unschedulable") and _ready(n)}
    free = {name: node_allocatable_gpus(node) for name, node in nodes.items()}
    for pod in kube.list_pods():
        node = (pod.get("spec") or {}).get("nodeName")
        if node in free and holds_resources(pod):
            free[node] -= pod_gpus(pod)
    total = sum(max(0, f) for f in free.values())
    where = f" outside node {args.excluding}" if args.excluding else ""
    return CheckResult(ok=total >= args.min, detail=f"{total} GPU(s) free on schedulable "
                       f"nodes{where}; at least {args.min} wanted")
