"""Remove one chosen node from its Auto Scaling group: the only scale-in gpuops performs.

Why not a lower desired capacity: with a bare decrease AWS picks the instance to terminate by
the group's termination policy (zone balance, oldest launch template, next billing hour),
not by what runs on it, and can kill a busy GPU node. cluster-autoscaler removes a node the
way this module does, and so does gpuops (capacity pre-warm's scale-in and consolidation):

1. record the removal on the node (`gpuops.io/scale-in-run` = the run's id, whether gpuops
   makes the cordon, an expiry) — before changing anything, so a crash is visible;
2. cordon it (nothing new lands there);
3. drain it through the Eviction API (PodDisruptionBudgets honoured; DaemonSet and mirror
   pods stay, as `kubectl drain` leaves them) and wait until the evicted pods are gone —
   and, when the caller moves pods that must keep running (consolidation), until each has
   a replacement bound to another node;
4. terminate that node's instance (its providerID) and lower the group's desired capacity in
   the same call (`TerminateInstanceInAutoScalingGroup`, `ShouldDecrementDesiredCapacity`),
   on the group behind an EKS managed node group too — never below the pool's minimum.

A drain a budget blocks, or one that does not finish (or whose pods find no other node) in
time, is undone (gpuops' own cordon taken back, the record removed): the node stays and
serves. A run that crashed mid-way leaves the record: `settle_leftovers` in the next run
undoes it, after which the run chooses afresh (and removes the node then if it is still the
one to remove).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prefect.runtime import flow_run as runtime_flow_run

from gpuops.common.annotations import (
    SCALE_IN_CORDONED,
    SCALE_IN_EXPIRES,
    SCALE_IN_MARKS,
    SCALE_IN_RUN,
)
from gpuops.common.errors import KubeNotFound, KubeTooManyRequests, LimitViolation
from gpuops.common.events import k8s_resource
from gpuops.common.podfacts import is_daemonset_pod, is_mirror_pod
from gpuops.tasks.actions.drain import plan_drain, unreplaced
from gpuops.tasks.actions.kube import CordonNode, EvictPod, UncordonNode
from gpuops.tasks.actions.nodepools import pool_resource, pool_target
from gpuops.tasks.actions.perform import SafeAction, hold_targets, perform
from gpuops.tasks.actions.removable import empty_nodes, instance_id
from gpuops.tasks.clients.aws import Aws
from gpuops.tasks.clients.kube import Kube

Obj = dict[str, Any]


def _fmt(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class MarkForRemoval(SafeAction):
    """The node carries this run's removal record (see the module docstring)."""

    kube: Kube
    node: str
    run_id: str
    cordoned_by_gpuops: bool
    expires: str
    kind = "scale-in-mark"

    @property
    def target(self) -> str:
        return f"node/{self.node}"

    def describe(self) -> str:
        return f"record on node {self.node} that run {self.run_id} removes it"

    def holds(self) -> bool:
        annotations = self.kube.get_node(self.node)["metadata"].get("annotations") or {}
        return annotations.get(SCALE_IN_RUN) == self.run_id

    def apply(self) -> None:
        self.kube.merge_patch_node(self.node, {"metadata": {"annotations": {
            SCALE_IN_RUN: self.run_id,
            SCALE_IN_CORDONED: "true" if self.cordoned_by_gpuops else "false",
            SCALE_IN_EXPIRES: self.expires}}})

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Node", None, self.node)


@dataclass
class ClearRemovalMark(SafeAction):
    """The node carries no removal record (of `run_id`: another run's is not ours to clear)."""

    kube: Kube
    node: str
    run_id: str
    kind = "scale-in-unmark"

    @property
    def target(self) -> str:
        return f"node/{self.node}"

    def describe(self) -> str:
        return f"remove run {self.run_id}'s removal record from node {self.node}"

    def holds(self) -> bool:
        try:
            annotations = self.kube.get_node(self.node)["metadata"].get("annotations") or {}
        except KubeNotFound:
            return True
        return annotations.get(SCALE_IN_RUN) != self.run_id

    def apply(self) -> None:
        self.kube.merge_patch_node(self.node, {"metadata": {
            "annotations": dict.fromkeys(SCALE_IN_MARKS)}})

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "Node", None, self.node)


def check_floor(aws: Aws, group: str, floor: int, node: str) -> None:
    """Raises LimitViolation when removing one instance takes `group` below `floor` (the
    pool's minimum) or below the group's own MinSize."""
    scaling = aws.describe_asg(group)
    lowest = max(floor, scaling.min_size)
    if scaling.desired_size - 1 < lowest:
        raise LimitViolation(f"removing node {node} would take {group} from "
                             f"{scaling.desired_size} to {scaling.desired_size - 1}, below "
                             f"the pool's minimum {lowest}", field="min_size")


@dataclass
class TerminateNodeInstance(SafeAction):
    """The node's instance has left its Auto Scaling group, the group one smaller."""

    aws: Aws
    node: str
    instance: str
    pool: str
    floor: int  # the pool's minimum size
    cluster_name: str = ""
    kind = "terminate-instance"

    @property
    def target(self) -> str:
        return pool_target(self.pool)

    def describe(self) -> str:
        return (f"terminate instance {self.instance} (node {self.node}) and decrement pool "
                f"{self.pool}'s desired capacity")

    def holds(self) -> bool:
        return self.aws.instance_group(self.instance) is None

    def apply(self) -> None:
        group = self.aws.instance_group(self.instance)
        if group is None:
            return
        check_floor(self.aws, group, self.floor, self.node)
        self.aws.terminate_with_decrement(self.instance)

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.cluster_name, "Node", None, self.node)

    def details(self) -> dict[str, Any]:
        return {"instance": self.instance, "pool": self.pool}


@dataclass
class Removal:
    """What removing one node came to."""

    node: str
    instance: str
    outcome: str  # removed | would-remove | blocked | not-drained | not-replaced | below-minimum
    detail: str = ""
    evicted: list[str] = field(default_factory=list)

    @property
    def removed(self) -> bool:
        return self.outcome in ("removed", "would-remove")

    def describe(self) -> str:
        verbs = {"removed": "removed", "would-remove": "would remove",
                 "blocked": "kept (drain blocked)", "not-drained": "kept (drain unfinished)",
                 "not-replaced": "kept (moved pods found no other node)",
                 "below-minimum": "kept (pool at its minimum)"}
        text = f"node {self.node} ({self.instance}): {verbs.get(self.outcome, self.outcome)}"
        return f"{text}: {self.detail}" if self.detail else text


def _current_run_id() -> str:
    return str(runtime_flow_run.id or "no-flow-run")


async def claim_node(kube: Kube, node: str, *, run_id: str, dry_run: bool,
                     drain_timeout_s: float = 300) -> bool:
    """Steps 1 and 2: record this run's removal on `node`, then cordon it. Returns whether
    the cordon is gpuops' own (taken back if the removal is undone). Calling it again in the
    same run changes nothing: a run that removes several nodes claims them all first, so
    pods drained from one never land on the next."""
    current = await asyncio.to_thread(kube.get_node, node)
    annotations = current["metadata"].get("annotations") or {}
    cordoned = bool((current.get("spec") or {}).get("unschedulable"))
    ours = annotations.get(SCALE_IN_RUN) == run_id
    by_us = annotations.get(SCALE_IN_CORDONED) == "true" if ours else not cordoned
    expires = _fmt(datetime.now(UTC) + timedelta(seconds=drain_timeout_s + 600))
    await perform(MarkForRemoval(kube, node, run_id, by_us, expires), dry_run=dry_run)
    await perform(CordonNode(kube, node), dry_run=dry_run)
    return by_us


async def remove_node(kube: Kube, aws: Aws, node: str, *, pool: str, floor: int,
                      dry_run: bool, run_id: str | None = None, drain_timeout_s: float = 300,
                      eviction_attempts: int = 3, await_replacements: bool = False,
                      replace_timeout_s: float = 300) -> Removal:
    """Cordon, drain and terminate `node` with decrement (see the module docstring), holding
    the node's and the pool's slots for the whole sequence. With `await_replacements` the
    instance is terminated only once every evicted pod's controller has a replacement bound
    to another node (consolidation moves pods that must keep running); otherwise the removal
    is undone and the node serves again. Dry-run changes nothing and says what would be
    done."""
    run_id = run_id or _current_run_id()
    current = await asyncio.to_thread(kube.get_node, node)
    instance = instance_id(current)
    claimed = (current["metadata"].get("annotations") or {}).get(SCALE_IN_RUN) == run_id
    group = await asyncio.to_thread(aws.instance_group, instance)
    if group is None:
        return Removal(node, instance, "removed", "its instance already left its group")
    try:
        await asyncio.to_thread(check_floor, aws, group, floor, node)
    except LimitViolation as e:
        if claimed and not dry_run:  # claimed ahead by this run: give it back
            await undo_removal(kube, node, run_id, cordoned_by_gpuops=(
                current["metadata"].get("annotations") or {}).get(SCALE_IN_CORDONED) == "true")
        return Removal(node, instance, "below-minimum", str(e))
    async with AsyncExitStack() as stack:
        if not dry_run:
            await stack.enter_async_context(hold_targets([f"node/{node}",
                                                          pool_target(pool)]))
        by_us = await claim_node(kube, node, run_id=run_id, dry_run=dry_run,
                                 drain_timeout_s=drain_timeout_s)
        before = await asyncio.to_thread(kube.list_pods) if await_replacements else []
        pods = await asyncio.to_thread(kube.list_pods, field_selector=f"spec.nodeName={node}")
        plan = plan_drain(node, pods)
        evicted, blocked = [], []
        for namespace, name, uid in plan.evict:
            try:
                await perform(EvictPod(kube, namespace, name, uid, node), dry_run=dry_run,
                              attempts=eviction_attempts)
                evicted.append(f"{namespace}/{name}")
            except KubeTooManyRequests as e:
                blocked.append(f"{namespace}/{name}: {e}")
        if dry_run:
            await perform(TerminateNodeInstance(aws, node, instance, pool, floor,
                                                kube.cluster_name), dry_run=True)
            return Removal(node, instance, "would-remove", "", evicted)
        if blocked:
            await undo_removal(kube, node, run_id, cordoned_by_gpuops=by_us)
            return Removal(node, instance, "blocked", "; ".join(blocked), evicted)
        left = await _wait_drained(kube, node, drain_timeout_s)
        if left:
            await undo_removal(kube, node, run_id, cordoned_by_gpuops=by_us)
            return Removal(node, instance, "not-drained",
                           f"still running after {drain_timeout_s:.0f}s: " + ", ".join(left),
                           evicted)
        if await_replacements:
            gone = [p for p in pods if f"{p['metadata']['namespace']}/"
                    f"{p['metadata']['name']}" in evicted]
            missing = await _wait_replaced(kube, node, gone, before, replace_timeout_s)
            if missing:
                await undo_removal(kube, node, run_id, cordoned_by_gpuops=by_us)
                return Removal(node, instance, "not-replaced",
                               f"after {replace_timeout_s:.0f}s still no "
                               + "; ".join(missing), evicted)
        try:
            await perform(TerminateNodeInstance(aws, node, instance, pool, floor,
                                                kube.cluster_name), dry_run=False,
                          verify_timeout_s=120)
        except LimitViolation as e:  # the group shrank meanwhile
            await undo_removal(kube, node, run_id, cordoned_by_gpuops=by_us)
            return Removal(node, instance, "below-minimum", str(e), evicted)
    return Removal(node, instance, "removed", "", evicted)


async def _wait_replaced(kube: Kube, node: str, evicted: list[Obj], before: list[Obj],
                         timeout_s: float) -> list[str]:
    """Wait until each evicted pod has a replacement bound elsewhere; returns what is
    still missing (`drain.unreplaced`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = unreplaced(evicted, before, await asyncio.to_thread(kube.list_pods), node)
        if not missing or time.monotonic() >= deadline:
            return missing
        await asyncio.sleep(1.0)


async def _wait_drained(kube: Kube, node: str, timeout_s: float) -> list[str]:
    """Wait until no pod a drain evicts is left on the node; returns those still there."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = await asyncio.to_thread(kube.list_pods, field_selector=f"spec.nodeName={node}")
        left = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
                if not is_daemonset_pod(p) and not is_mirror_pod(p)
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(1.0)


async def undo_removal(kube: Kube, node: str, run_id: str, *, cordoned_by_gpuops: bool,
                       dry_run: bool = False) -> None:
    """Take back gpuops' own cordon (a person's stays) and the removal record."""
    if cordoned_by_gpuops:
        await perform(UncordonNode(kube, node), dry_run=dry_run)
    await perform(ClearRemovalMark(kube, node, run_id), dry_run=dry_run)


@dataclass(frozen=True)
class Leftover:
    node: str
    run_id: str
    cordoned_by_gpuops: bool
    expires: str

    def expired(self, now: datetime) -> bool:
        try:
            return datetime.fromisoformat(self.expires) <= now
        except ValueError:
            return True  # unreadable: presume abandoned


def find_leftovers(nodes: Sequence[Obj], run_id: str) -> list[Leftover]:
    """Removal records of other runs on `nodes` (pure)."""
    found = []
    for node in nodes:
        annotations = node["metadata"].get("annotations") or {}
        other = annotations.get(SCALE_IN_RUN)
        if other and other != run_id:
            found.append(Leftover(node["metadata"]["name"], other,
                                  annotations.get(SCALE_IN_CORDONED) == "true",
                                  annotations.get(SCALE_IN_EXPIRES, "")))
    return found


async def settle_leftovers(kube: Kube, aws: Aws, nodes: Sequence[Obj], *,
                           run_active: Callable[[str], Awaitable[bool]], dry_run: bool,
                           run_id: str | None = None) -> list[str]:
    """Undo what ended (or expired) runs left mid-removal: a node whose instance is gone is
    on its way out and is left alone; any other gets gpuops' cordon back and loses the record,
    so this run can choose it again (and finish the removal) or leave it serving. Returns one
    line per node settled."""
    run_id = run_id or _current_run_id()
    settled = []
    now = datetime.now(UTC)
    for left in find_leftovers(nodes, run_id):
        if await run_active(left.run_id) and not left.expired(now):
            continue
        node = next(n for n in nodes if n["metadata"]["name"] == left.node)
        try:
            instance = instance_id(node)
        except ValueError:
            instance = ""
        if instance and await asyncio.to_thread(aws.instance_group, instance) is None:
            settled.append(f"node {left.node}: run {left.run_id} had terminated its instance")
            continue
        await undo_removal(kube, left.node, left.run_id,
                           cordoned_by_gpuops=left.cordoned_by_gpuops, dry_run=dry_run)
        settled.append(f"node {left.node}: undid run {left.run_id}'s unfinished removal"
                       + (" (uncordoned)" if left.cordoned_by_gpuops else ""))
    return settled


@dataclass
class ScaleInPool(SafeAction):
    """An Auto Scaling group's desired capacity down to `desired`, by removing chosen empty
    nodes one by one (`remove_node`), never by a bare decrease.

    `holds` is the usual read-only postcondition; the change itself is a sequence of actions,
    carried out by `run` (each step through `perform`), so `apply` refuses to do it alone.
    Fewer empty nodes than needed: it removes those there are and says so; none: nothing."""

    kube: Kube
    aws: Aws
    pool: str
    group: str
    selector: str  # label selector of the pool's nodes
    desired: int
    floor: int  # the pool's minimum size
    drain_timeout_s: float = 300
    kind = "scale-in"

    @property
    def target(self) -> str:
        return pool_target(self.pool)

    def describe(self) -> str:
        return (f"scale pool {self.pool} ({self.group}) in to {self.desired} by removing "
                "empty nodes (cordon, drain, terminate with decrement)")

    def holds(self) -> bool:
        return self.aws.describe_asg(self.group).desired_size <= self.desired

    def apply(self) -> None:
        raise NotImplementedError("ScaleInPool is a sequence of actions: await its run()")

    def resource(self) -> dict[str, str]:
        return pool_resource(self.kube.cluster_name, self.pool)

    def details(self) -> dict[str, Any]:
        return {"group": self.group, "desired": self.desired}

    def choose(self) -> tuple[int, list[str]]:
        """(nodes to remove, the empty nodes chosen for it, at most that many)."""
        count = self.aws.describe_asg(self.group).desired_size - self.desired
        if count <= 0:
            return 0, []
        nodes = self.kube.list_nodes(label_selector=self.selector)
        return count, empty_nodes(nodes, self.kube.list_pods(), count)

    async def run(self, *, dry_run: bool) -> list[str]:
        """Remove the chosen nodes; one line per node (or why none was removed)."""
        count, chosen = await asyncio.to_thread(self.choose)
        if count <= 0:
            return []
        lines = []
        for node in chosen:
            removal = await remove_node(self.kube, self.aws, node, pool=self.pool,
                                        floor=self.floor, dry_run=dry_run,
                                        drain_timeout_s=self.drain_timeout_s)
            lines.append(removal.describe())
        if len(chosen) < count:
            lines.append(f"pool {self.pool}: {count - len(chosen)} fewer node(s) wanted but "
                         f"no {'other ' if chosen else ''}empty node to remove: removed "
                         "nothing more (a bare decrease could terminate a busy node)")
        return lines
