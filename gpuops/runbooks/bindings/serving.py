"""Serving: a rolling restart of an InferencePool's model-server pods.

Why evict pod by pod rather than `kubectl rollout restart`: the Deployment controller calls
a replacement available once its readiness probe passes, and a vLLM that just loaded its
weights is Ready but cold (empty prefix cache, kernels compiled on first use; warmup.py).
Here gpuops paces it: `max_unavailable` pods go through the Eviction API (disruption
budgets honoured), then the run waits until as many new pods are Ready, list the model the
old ones served on `/v1/models`, and are warm by the rollout's own warm-up check, before the
next ones go. Before each batch, the disruption check: at least `min_ready` pods stay Ready
while it is away. The pool's slot is held throughout, the one a serving rollout holds, so a
restart and a rollout of the same pool never overlap.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from gpuops.common.errors import KubeTooManyRequests, PermanentError
from gpuops.runbooks.bindings import Prediction, predicts, runs
from gpuops.runbooks.catalog import PoolRestart, RestartPoolArgs
from gpuops.runbooks.context import StepContext
from gpuops.tasks.actions.kube import EvictPod
from gpuops.tasks.actions.perform import hold_targets, perform
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rollout.actions import pool_target
from gpuops.tasks.rollout.objects import PoolView
from gpuops.tasks.rollout.read_objects import read_pool_view, read_served_apis
from gpuops.tasks.rollout.warmup import Batch, is_warm, served_models, warm_up_batch


class RestartStopped(PermanentError):
    """The restart could not go on safely (too few Ready, a budget, replacements late)."""


def disruption_refusal(ready: int, batch: int, min_ready: int) -> str:
    """Why restarting `batch` pods now would break the disruption check; "" when it holds."""
    if ready - batch >= min_ready:
        return ""
    return (f"restarting {batch} pod(s) would leave {ready - batch} Ready, below "
            f"min_ready {min_ready} ({ready} Ready now)")


def batches(names: Sequence[str], size: int) -> list[list[str]]:
    return [list(names[i:i + size]) for i in range(0, len(names), size)]


def _view(kube: Kube, pool: str) -> PoolView:
    namespace, name = pool.split("/", 1)
    return read_pool_view(kube, read_served_apis(kube), namespace, name, field="pool")


def _ready(view: PoolView) -> list[str]:
    return [p.name for p in view.pods if p.ready]


@predicts("restart-pool-replicas")
async def predict_restart(ctx: StepContext, args: RestartPoolArgs) -> Prediction:
    view = await asyncio.to_thread(_view, ctx.kube, args.pool)
    pods, ready = [p.name for p in view.pods], _ready(view)
    refusal = disruption_refusal(len(ready), min(args.max_unavailable, len(pods)),
                                 args.min_ready)
    nodes = {p.name: p.node for p in view.pods}
    changes = tuple(f"evict pod {view.pool.namespace}/{n}" + (
        f" from node {nodes[n]}" if nodes[n] else "") + ", then wait until its replacement "
        "is Ready and warm" for n in pods)
    return Prediction(PoolRestart(restarted=pods, replacements=[f"(new pod for {n})"
                                                                for n in pods],
                                  ready=len(ready)),
                      changes, (refusal,) if refusal else ())


@runs("restart-pool-replicas")
async def restart_pool(ctx: StepContext, args: RestartPoolArgs) -> PoolRestart:
    kube, namespace = ctx.kube, args.pool.split("/", 1)[0]
    view = await asyncio.to_thread(_view, kube, args.pool)
    ready = _ready(view)
    if refusal := disruption_refusal(len(ready), min(args.max_unavailable, len(view.pods)),
                                     args.min_ready):
        raise RestartStopped(f"InferencePool {args.pool}: {refusal}")
    port = view.pool.target_ports[0]
    models: list[str] = []
    for serving in ready:  # the model the pool serves now, as its pods say
        answer = await asyncio.to_thread(served_models, kube, namespace, serving, port)
        models = answer or []
        if models:
            break
    known = {p.name for p in view.pods}
    restarted: list[str] = []
    replacements: list[str] = []
    async with hold_targets([pool_target(namespace, view.pool.name)]):
        for batch in batches(sorted(known), args.max_unavailable):
            await _wait_disruption_allows(kube, args, len(batch))
            pods = {p["metadata"]["name"]: p for p in await asyncio.to_thread(
                kube.list_pods, namespace, label_selector=view.pool.label_selector)}
            for name in batch:
                pod = pods.get(name)
                if pod is None:
                    continue  # gone already (its controller replaced it): nothing to restart
                try:
                    await perform(EvictPod(kube, namespace, name, pod["metadata"]["uid"],
                                           (pod.get("spec") or {}).get("nodeName") or ""),
                                  dry_run=False, attempts=3)
                except KubeTooManyRequests as e:
                    raise RestartStopped(f"pod {namespace}/{name} stays: {e}") from None
                restarted.append(name)
            fresh = await _wait_replacements(kube, args, len(ready), known, len(batch),
                                             models[0] if models else "", port)
            known.update(fresh)
            replacements += fresh
    return PoolRestart(restarted=restarted, replacements=replacements, ready=len(ready))


async def _wait_disruption_allows(kube: Kube, args: RestartPoolArgs, batch: int) -> None:
    deadline = time.monotonic() + args.timeout
    while refusal := disruption_refusal(len(_ready(await asyncio.to_thread(
            _view, kube, args.pool))), batch, args.min_ready):
        if time.monotonic() >= deadline:
            raise RestartStopped(f"InferencePool {args.pool}: {refusal}")
        await asyncio.sleep(args.interval)


async def _wait_replacements(kube: Kube, args: RestartPoolArgs, target: int,
                             known: set[str], count: int, model: str, port: int
                             ) -> list[str]:
    """The `count` new pods once the pool has `target` Ready again, the new ones serve
    `model` and (warm-up requests asked for) are warm; `RestartStopped` at the timeout."""
    namespace = args.pool.split("/", 1)[0]
    deadline = time.monotonic() + args.timeout
    while True:
        ready = _ready(await asyncio.to_thread(_view, kube, args.pool))
        fresh = sorted(p for p in ready if p not in known)
        if len(ready) >= target and len(fresh) >= count:
            answers = [await asyncio.to_thread(served_models, kube, namespace, p, port)
                       for p in fresh]
            if all(a is not None and (not model or model in a) for a in answers):
                break
        if time.monotonic() >= deadline:
            raise RestartStopped(f"InferencePool {args.pool}: {len(ready)} of {target} pod(s) "
                                 f"Ready, {len(fresh)} of {count} new one(s) serving, after "
                                 f"{args.timeout} s")
        await asyncio.sleep(args.interval)
    if args.warmup_requests:
        await _warm_up(kube, args, namespace, fresh, port, model, deadline)
    return fresh


async def _warm_up(kube: Kube, args: RestartPoolArgs, namespace: str, pods: list[str],
                   port: int, model: str, deadline: float) -> None:
    previous: dict[str, Batch] = {}
    while True:
        sent = [await asyncio.to_thread(warm_up_batch, kube, namespace, p, port, model,
                                        args.warmup_requests) for p in pods]
        failing = [b for b in sent if b.failed * 2 > b.sent]
        if failing:
            raise RestartStopped("new pod(s) fail their warm-up requests: " + ", ".join(
                f"{b.pod} {b.failed} of {b.sent}" for b in failing))
        if is_warm(previous, sent, args.warm_tolerance):
            return
        if time.monotonic() >= deadline:
            raise RestartStopped(f"new pod(s) {', '.join(pods)} still warming up (TTFT "
                                 f"falling) after {args.timeout} s")
        previous = {b.pod: b for b in sent}
        await asyncio.sleep(args.interval)
