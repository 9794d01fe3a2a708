"""The simulated kube-scheduler: binds Pending pods, preempts, reports FailedScheduling.

What to decide is `filters.py`, `cycle.py` and `preemption.py`'s. This module is
the plumbing around them:
- a store listener keeps their view of the cluster current, so a change costs one pod or one
  node and nothing rescans all pods (a kubelet heartbeat on a node costs a tuple compare);
- the scheduling queue (`queue.py`) fed with queueing hints: a pod that fits nowhere waits
  until something changes that could help it (a node added or changed, or a bound pod
  deleted or finished, such that the pod now passes the filters on that node), then retries
  after its back-off; with no such change it is retried every 5 minutes;
- the writes kube-scheduler and the apiserver make: binding (spec.nodeName with the
  PodScheduled=True condition and the pod's GPUs, `status.nominatedNodeName` cleared, in one
  write), `PodScheduled=False/Unschedulable` with the message, `status.nominatedNodeName`
  after a preemption, `Scheduled` / `FailedScheduling` / `Preempted` events, and victims
  marked `DisruptionTarget` (PreemptionByScheduler) then gracefully deleted.
- a nomination another component writes through pods/status (KEP-5278) is taken into the
  view at once: it is tried first for its pod and holds room there against pods of equal or
  lower priority, as a preemption's does.

Scoring: LeastAllocated by default (spreads pods, so GPUs fragment as in real clusters);
`SchedulerConfig(scoring="MostAllocated")` (a scenario's `sim.scheduler_scoring`) packs instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from gpuops.common.annotations import GPU_INDEX

from ..core import errors
from ..core.clock import VirtualClock, rfc3339
from ..core.gpus import choose_gpus, format_gpu_index
from ..core.pdb import budget_from_store
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.store import Store
from .cycle import Bind, ClusterView, Preempt, schedule_one
from .filters import (
    PodInfo,
    PodKey,
    filter_node,
    node_static_fields,
    nominated_usage,
    truncate_event_message,
)
from .preemption import Budget
from .queue import IN_FLIGHT, UNSCHEDULABLE, QueuedPod, SchedulingQueue

log = logging.getLogger("gpuops.simcluster.scheduler")

SCHEDULER_NAME = "default-scheduler"
SCORING_STRATEGIES = ("LeastAllocated", "MostAllocated")
BATCH_BUDGET_REAL_S = 0.05  # then let the API server answer requests
IDLE_WAIT_REAL_S = 0.25  # notice clock jumps (`/admin/clock`) at least this often
HINT_CHECK_BUDGET = 50_000  # (unschedulable pods x changed nodes) checked one by one

def set_pod_condition(status: dict[str, Any], condition: dict[str, Any], now: str) -> None:
    """Like the apiserver's UpdatePodCondition: replace the condition of that type, keeping
    lastTransitionTime when the status did not change."""
    conditions = status.setdefault("conditions", [])
    new = {"type": condition["type"], "status": condition["status"], "lastProbeTime": None,
           "lastTransitionTime": now}
    for key in ("reason", "message"):
        if condition.get(key):
            new[key] = condition[key]
    for i, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            if existing.get("status") == condition["status"]:
                new["lastTransitionTime"] = existing.get("lastTransitionTime", now)
            conditions[i] = new
            return
    conditions.append(new)


@dataclass(frozen=True)
class SchedulerConfig:
    scoring: str = "LeastAllocated"  # or MostAllocated

    def __post_init__(self) -> None:
        if self.scoring not in SCORING_STRATEGIES:
            raise ValueError(f"unknown scheduler scoring {self.scoring!r}: set "
                             f"`sim.scheduler_scoring` to one of {SCORING_STRATEGIES}")


class Scheduler:
    name = "scheduler"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 config: SchedulerConfig) -> None:
        self.store = store
        self.clock = clock
        self.recorder = recorder
        self.strategy = config.scoring
        self.pods_type = self.store.type("pods")
        self.nodes_type = self.store.type("nodes")
        self.pdbs_type = self.store.type("poddisruptionbudgets", "policy")
        self.view = ClusterView()
        self._bound: dict[PodKey, str] = {}  # bound, not finished pod -> its node
        self.queue = SchedulingQueue(self.clock.time(), self._wake)
        self._node_fields: dict[str, tuple[Any, ...]] = {}
        self._changed_nodes: set[str] = set()  # since unschedulable pods were last looked at
        self._waiter: asyncio.Future[None] | None = None  # the idle loop's, while it sleeps
        for node in self.store.list(self.nodes_type):
            self._on_node(self.nodes_type, "ADDED", node, None)
        for pod in self.store.list(self.pods_type):
            self._on_pod(self.pods_type, "ADDED", pod, None)
        self.store.add_listener(self._on_pod, self.pods_type)
        self.store.add_listener(self._on_node, self.nodes_type)

    # --- keeping the view current (called synchronously on every store change) ------------------

    def _on_node(self, _rt: ResourceType, event: str, node: dict[str, Any],
                 _old: dict[str, Any] | None) -> None:
        name = node["metadata"]["name"]
        if event == "DELETED":
            self.view.remove_node(name)
            self._node_fields.pop(name, None)
            return
        fields = node_static_fields(node)
        if self._node_fields.get(name) == fields:
            return  # a heartbeat: nothing scheduling reads has changed
        self._node_fields[name] = fields
        self.view.set_node(node)
        self._something_changed(name)

    def _on_pod(self, _rt: ResourceType, event: str, pod: dict[str, Any],
                old: dict[str, Any] | None) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        status = pod.get("status") or {}
        key = (meta.get("namespace", ""), meta["name"])
        node = spec.get("nodeName")
        gone = event == "DELETED" or status.get("phase") in ("Succeeded", "Failed")
        bound_to = self._bound.get(key)
        if bound_to is not None:
            if gone or node != bound_to:
                self.view.unbind(bound_to, key)
                del self._bound[key]
                self._something_changed(bound_to)  # room freed
            else:
                info = self.view.nodes[bound_to].pods.get(key)
                old_status = (old or {}).get("status") or {}
                if info is not None and (meta.get("deletionTimestamp") or status.get(
                        "startTime") != old_status.get("startTime")):
                    info.update_state(pod)
                return
        if gone:
            self._dequeue(key)
            return
        if node:
            entry = self._dequeue(key)
            info = entry.info if entry is not None else PodInfo.from_pod(pod)
            info.update_state(pod)
            self._bound[key] = node
            self.view.bind(node, info)
            return
        if (meta.get("deletionTimestamp") or spec.get("schedulingGates")
                or spec.get("schedulerName", SCHEDULER_NAME) != SCHEDULER_NAME):
            self._dequeue(key)
            return
        entry = self.queue.get(key)
        if entry is None or entry.info.uid != meta.get("uid", ""):
            if entry is not None:
                self._dequeue(key)
            entry = QueuedPod(PodInfo.from_pod(pod), self.clock.time())
            self.queue.add(entry)
            self.view.nominate(entry.info, entry.info.nominated_node)
            self.queue.activate(entry)
        elif old is not None and spec != (old.get("spec") or {}):
            entry.info = PodInfo.from_pod(pod)  # e.g. tolerations added: decide again
            self.view.nominate(entry.info, entry.info.nominated_node)
            self.queue.activate(entry)
        else:
            nominated = entry.info.nominated_node
            entry.info.update_state(pod)
            if entry.info.nominated_node != nominated:
                self.view.nominate(entry.info, entry.info.nominated_node)

    def _dequeue(self, key: PodKey) -> QueuedPod | None:
        entry = self.queue.remove(key)
        if entry is not None and entry.info.nominated_node:
            # the room it held there is free for others
            self.view.nominate(entry.info, "")
            self._something_changed(entry.info.nominated_node)
        return entry

    def _something_changed(self, node: str) -> None:
        self._changed_nodes.add(node)
        if self.queue.has_unschedulable():
            self._wake()

    # --- what to try next --------------------------------------------------------------------

    def _release(self, now: float) -> None:
        if self._changed_nodes:
            self._requeue_helped(now)
        self.queue.release_due(now)

    def _requeue_helped(self, now: float) -> None:
        """Requeue the unschedulable pods that now pass the filters on a changed node, as
        kube-scheduler's queueing hints do; a pod no change helps keeps waiting (each retry
        would cost a pass over every node). Past a budget of checks, requeue them all."""
        changed = [self.view.nodes[n] for n in self._changed_nodes
                   if n in self.view.nodes and self.view.nodes[n].present]
        self._changed_nodes.clear()
        waiting = self.queue.unschedulable()
        if not changed or not waiting:
            return
        everything = len(changed) * len(waiting) > HINT_CHECK_BUDGET
        nominated = self.view.nominated
        for entry in waiting:
            if everything or any(filter_node(entry.info, node, nominated.get(node.name)) is None
                                 for node in changed):
                self.queue.requeue(entry, now)

    def _idle_wait_s(self, now: float) -> float:
        wait = IDLE_WAIT_REAL_S
        backoff_at = self.queue.next_backoff_at()
        if backoff_at is not None:
            wait = min(wait, (backoff_at - now) / self.clock.speed)
        return max(wait, 0.005)

    async def run(self) -> None:
        now = self.clock.time()
        for entry in self.queue.entries():  # restarted after a crash mid-attempt
            if entry.state == IN_FLIGHT:
                entry.state = UNSCHEDULABLE
                self.queue.requeue(entry, now)
        while True:
            now = self.clock.time()
            self._release(now)
            if self.queue.has_active():
                self._schedule_batch()
                await asyncio.sleep(0)  # let the API server answer between batches
                continue
            await self._sleep_until_woken(self._idle_wait_s(now))

    async def _sleep_until_woken(self, timeout: float) -> None:
        """Sleep until `_wake()` or the timeout. Not `asyncio.wait_for(event.wait())`: on
        Python 3.11 that swallows a cancellation arriving as the event fires, and the
        cluster could then never stop."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None:
            _resolve(self._waiter)

    def _schedule_batch(self) -> None:
        deadline = time.monotonic() + BATCH_BUDGET_REAL_S
        while time.monotonic() < deadline:
            entry = self.queue.pop()
            if entry is None:
                return
            self._attempt(entry)

    # --- one attempt and its writes --------------------------------------------------------

    def _attempt(self, entry: QueuedPod) -> None:
        now = self.clock.time()
        entry.state = IN_FLIGHT
        entry.attempts += 1
        entry.last_attempt = now
        info = entry.info
        outcome = schedule_one(self.view, info, strategy=self.strategy, budgets=self._budgets)
        try:
            if isinstance(outcome, Bind):
                self._bind(info, outcome.node)
                return
            if isinstance(outcome, Preempt):
                self._preempt(info, outcome)
                self._report_failure(info, outcome.message, outcome.node)
            else:
                self._report_failure(info, outcome.message, outcome.nominated_node)
        except errors.ApiError as e:
            if e.code == 404:
                self._dequeue(info.key)  # deleted meanwhile
                return
            log.warning("scheduling %s/%s: %s %s; will retry", info.namespace, info.name,
                        e.code, e.message)
        if entry.state == IN_FLIGHT:
            self.queue.mark_unschedulable(entry)

    def _current(self, info: PodInfo) -> dict[str, Any] | None:
        pod = self.store.find(self.pods_type, info.namespace, info.name)
        if pod is None or pod["metadata"].get("uid") != info.uid:
            return None
        return pod

    def _bind(self, info: PodInfo, node: str) -> None:
        pod = self._current(info)
        if pod is None or (pod.get("spec") or {}).get("nodeName"):
            self._dequeue(info.key)
            return
        now = rfc3339(self.clock.now())
        gpus = self._choose_gpus(info, node)

        def assign(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = node
            # kube-apiserver clears the nomination on binding (KEP-5278), wherever it pointed
            (p.get("status") or {}).pop("nominatedNodeName", None)
            if gpus:  # a Binding's annotations land on the pod, as kube-apiserver does
                p["metadata"].setdefault("annotations", {})[GPU_INDEX] = format_gpu_index(gpus)
            set_pod_condition(p.setdefault("status", {}),
                              {"type": "PodScheduled", "status": "True"}, now)

        bound = self.store.mutate(self.pods_type, info.namespace, info.name, assign,
                                  subresource="binding")
        self.recorder.record(bound, "Scheduled",
                             f"Successfully assigned {info.namespace}/{info.name} to {node}",
                             component=SCHEDULER_NAME)

    def _choose_gpus(self, info: PodInfo, node: str) -> tuple[int, ...]:
        """The GPUs of `node` the pod gets: as the filter found them, after the room of the
        pods nominated there with a priority at least as high."""
        target = self.view.nodes.get(node)
        if target is None or not info.gpu:
            return ()
        _, _, used = nominated_usage(info, target, self.view.nominated.get(node))
        return choose_gpus(used, info.gpu) or ()

    def _report_failure(self, info: PodInfo, message: str, nominated: str | None) -> None:
        """PodScheduled=False/Unschedulable, the nomination, and a FailedScheduling event."""
        pod = self._current(info)
        if pod is None:
            self._dequeue(info.key)
            return
        now = rfc3339(self.clock.now())

        def mark(p: dict[str, Any]) -> None:
            status = p.setdefault("status", {})
            set_pod_condition(status, {"type": "PodScheduled", "status": "False",
                                       "reason": "Unschedulable", "message": message}, now)
            if nominated:
                status["nominatedNodeName"] = nominated
            elif nominated == "":
                status.pop("nominatedNodeName", None)

        pod = self.store.mutate(self.pods_type, info.namespace, info.name, mark,
                                subresource="status")
        self.recorder.record(pod, "FailedScheduling", truncate_event_message(message),
                             type="Warning", component=SCHEDULER_NAME)

    def _preempt(self, preemptor: PodInfo, outcome: Preempt) -> None:
        now = rfc3339(self.clock.now())
        condition = {"type": "DisruptionTarget", "status": "True",
                     "reason": "PreemptionByScheduler",
                     "message": f"{SCHEDULER_NAME}: preempting to accommodate a higher "
                                "priority pod"}
        for victim in outcome.victims:
            if self._current(victim) is None:
                continue
            self.store.mutate(self.pods_type, victim.namespace, victim.name,
                              lambda p: set_pod_condition(p.setdefault("status", {}),
                                                          condition, now),
                              subresource="status")
            deleted = self.store.delete(self.pods_type, victim.namespace, victim.name)
            self.recorder.record(deleted, "Preempted",
                                 f"Preempted by pod {preemptor.uid} on node {outcome.node}",
                                 component=SCHEDULER_NAME)
            log.info("preempted %s/%s on %s for %s/%s", victim.namespace, victim.name,
                     outcome.node, preemptor.namespace, preemptor.name)
        for other in outcome.demoted:  # lower-priority pods nominated there: look elsewhere
            if self._current(other) is not None:
                self.store.mutate(self.pods_type, other.namespace, other.name,
                                  lambda p: (p.get("status") or {}).pop("nominatedNodeName",
                                                                        None),
                                  subresource="status")
            entry = self.queue.get(other.key)
            if entry is not None:
                self.queue.activate(entry)

    # --- PodDisruptionBudgets, read only when preemption is tried ------------------------------

    def _budgets(self) -> list[Budget]:
        budgets = []
        for pdb in self.store.list(self.pdbs_type):
            allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
            if allowed is None:
                allowed = self._disruptions_allowed(pdb)
            budgets.append(Budget.from_pdb(pdb, allowed))
        return budgets

    def _disruptions_allowed(self, pdb: dict[str, Any]) -> int:
        """What the disruption controller will publish, for a budget it has not synced yet
        (a malformed one gets 0, as its status would say)."""
        pods = self.store.list(self.pods_type, pdb["metadata"].get("namespace"))
        try:
            budget = budget_from_store(self.store, pdb, pods, self.clock.time())
        except ValueError:
            return 0
        return int(budget["disruptionsAllowed"])


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
