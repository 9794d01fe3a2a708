"""Node actions: cordon, uncordon, taint, untaint, drain, through `perform()`.

A drain is what flows/drain_node.py does (the plan `kubectl drain` would make, then the
Eviction API per pod under the node's slot), and its prediction is made the way the API
server would decide: each eviction is sent as a server-side dry run (`dryRun=All`: admission
and disruption budgets decide, nothing is stored), and the budgets' remaining disruptions are
counted down across the node's pods, which separate dry runs cannot see.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpuops.common.annotations import PREFIX
from gpuops.common.errors import KubeNotFound, KubeTooManyRequests
from gpuops.runbooks.bindings import Prediction, predicts, runs
from gpuops.runbooks.catalog import (
    Changed,
    CordonArgs,
    DrainArgs,
    DrainOutput,
    TaintArgs,
    Tainted,
    UncordonArgs,
    UntaintArgs,
)
from gpuops.runbooks.context import StepContext
from gpuops.tasks.actions.drain import plan_drain
from gpuops.tasks.actions.kube import CordonNode, EvictPod, UncordonNode
from gpuops.tasks.actions.perform import SafeAction, hold_targets, perform
from gpuops.tasks.actions.scheduling import TaintNode, UntaintNode
from gpuops.tasks.clients.kube import Kube, call
from gpuops.tasks.rebalance.from_kube import selector_matches

RUNBOOK_RUN = PREFIX + "runbook-run"  # on a tainted node: the runbook run that tainted it


async def _apply(ctx: StepContext, action: SafeAction) -> Changed:
    record = await perform(action, dry_run=False)
    return Changed(changed=record.outcome == "applied", description=record.description)


async def _predict(action: SafeAction) -> Prediction:
    holds = await asyncio.to_thread(action.holds)
    change = () if holds else (action.describe(),)
    return Prediction(Changed(changed=not holds, description=action.describe()), change)


@runs("cordon-node")
async def cordon(ctx: StepContext, args: CordonArgs) -> Changed:
    return await _apply(ctx, CordonNode(ctx.kube, args.node))


@predicts("cordon-node")
async def predict_cordon(ctx: StepContext, args: CordonArgs) -> Prediction:
    return await _predict(CordonNode(ctx.kube, args.node))


@runs("uncordon-node")
async def uncordon(ctx: StepContext, args: UncordonArgs) -> Changed:
    return await _apply(ctx, UncordonNode(ctx.kube, args.node))


@predicts("uncordon-node")
async def predict_uncordon(ctx: StepContext, args: UncordonArgs) -> Prediction:
    return await _predict(UncordonNode(ctx.kube, args.node))


def _taint(ctx: StepContext, args: TaintArgs) -> TaintNode:
    record = {RUNBOOK_RUN: ctx.run_id} if ctx.run_id else {}
    return TaintNode(ctx.kube, args.node, args.key, args.value, args.effect, record)


def _other_run(kube: Kube, args: TaintArgs, run_id: str) -> str:
    """The other runbook run recorded on the node with this taint; "" when none is."""
    node = kube.get_node(args.node)
    owner = ((node.get("metadata") or {}).get("annotations") or {}).get(RUNBOOK_RUN, "")
    tainted = any(t.get("key") == args.key and (t.get("value") or "") == args.value
                  for t in (node.get("spec") or {}).get("taints") or [])
    return owner if tainted and owner and owner != run_id else ""


@runs("taint-node")
async def taint(ctx: StepContext, args: TaintArgs) -> Tainted:
    if not args.exclusive:
        return Tainted(**(await _apply(ctx, _taint(ctx, args))).model_dump())
    async with hold_targets([f"node/{args.node}"]):  # the look and the taint as one
        other = await asyncio.to_thread(_other_run, ctx.kube, args, ctx.run_id)
        if other:
            return Tainted(changed=False, ours=False, description=f"node {args.node} "
                           f"already has {args.key}={args.value}, put by run {other}")
        return Tainted(**(await _apply(ctx, _taint(ctx, args))).model_dump())


@predicts("taint-node")
async def predict_taint(ctx: StepContext, args: TaintArgs) -> Prediction:
    other = await asyncio.to_thread(_other_run, ctx.kube, args, ctx.run_id) \
        if args.exclusive else ""
    if other:
        return Prediction(Tainted(changed=False, ours=False, description=f"node "
                                  f"{args.node} already tainted by run {other}"))
    predicted = await _predict(_taint(ctx, args))
    return Prediction(Tainted(**predicted.output.model_dump()), predicted.changes)


def _untaint(ctx: StepContext, args: UntaintArgs) -> UntaintNode:
    return UntaintNode(ctx.kube, args.node, args.key, args.value, (RUNBOOK_RUN,))


@runs("untaint-node")
async def untaint(ctx: StepContext, args: UntaintArgs) -> Changed:
    return await _apply(ctx, _untaint(ctx, args))


@predicts("untaint-node")
async def predict_untaint(ctx: StepContext, args: UntaintArgs) -> Prediction:
    return await _predict(_untaint(ctx, args))


# --- drain -------------------------------------------------------------------------------------

def _node_pods(kube: Kube, node: str) -> list[dict[str, Any]]:
    return kube.list_pods(field_selector=f"spec.nodeName={node}")


@runs("drain-node")
async def drain(ctx: StepContext, args: DrainArgs) -> DrainOutput:
    pods = await asyncio.to_thread(_node_pods, ctx.kube, args.node)
    plan = plan_drain(args.node, pods)
    evicted, blocked = [], []
    async with hold_targets([f"node/{args.node}"]):
        await perform(CordonNode(ctx.kube, args.node), dry_run=False)
        for namespace, name, uid in plan.evict:
            try:
                await perform(EvictPod(ctx.kube, namespace, name, uid, args.node),
                              dry_run=False, attempts=args.eviction_attempts)
                evicted.append(f"{namespace}/{name}")
            except KubeTooManyRequests:
                blocked.append(f"{namespace}/{name}")
    return DrainOutput(evicted=evicted, blocked=blocked,
                       skipped=[f"{pod} ({why})" for pod, why in plan.skipped])


@predicts("drain-node")
async def predict_drain(ctx: StepContext, args: DrainArgs) -> Prediction:
    return await asyncio.to_thread(_predict_drain, ctx.kube, args.node)


def _predict_drain(kube: Kube, node: str) -> Prediction:
    pods = _node_pods(kube, node)
    plan = plan_drain(node, pods)
    by_ref = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    pdbs = kube.list_pdbs()
    budgets = {(b["metadata"]["namespace"], b["metadata"]["name"]): int(
        (b.get("status") or {}).get("disruptionsAllowed", 0)) for b in pdbs}
    evicted, blocked, warnings = [], [], []
    for namespace, name, _uid in plan.evict:
        pod = by_ref[(namespace, name)]
        labels = (pod["metadata"].get("labels") or {})
        covering = [(b["metadata"]["namespace"], b["metadata"]["name"]) for b in pdbs
                    if b["metadata"]["namespace"] == namespace
                    and selector_matches((b.get("spec") or {}).get("selector"), labels)]
        refused = _server_refuses(kube, namespace, name)
        if refused or any(budgets[key] <= 0 for key in covering):
            blocked.append(f"{namespace}/{name}")
            names = ", ".join(n for _, n in covering)
            why = (f"{refused} (budget {names})" if covering else refused) if refused else \
                f"disruption budget {names} allows no more evictions"
            warnings.append(f"pod {namespace}/{name} would stay: {why}")
            continue
        for key in covering:
            budgets[key] -= 1
        evicted.append(f"{namespace}/{name}")
    cordon = CordonNode(kube, node)
    changes = ([] if cordon.holds() else [cordon.describe()]) + \
        [f"evict pod {ref} from node {node}" for ref in evicted]
    return Prediction(DrainOutput(evicted=evicted, blocked=blocked,
                                  skipped=[f"{pod} ({why})" for pod, why in plan.skipped]),
                      tuple(changes), tuple(warnings))


def _server_refuses(kube: Kube, namespace: str, name: str) -> str:
    """The API server's answer to this eviction as a dry run: "" when it would go ahead."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"dryRun": ["All"]}}
    try:
        call(kube.core.create_namespaced_pod_eviction, name, namespace, body, dry_run="All",
             _preload_content=False)
    except KubeTooManyRequests as e:
        return str(e)
    except KubeNotFound:
        return ""  # gone already: nothing to evict
    return ""
