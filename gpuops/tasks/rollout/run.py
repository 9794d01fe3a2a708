"""A rollout's course, from the first record on the route to the old version's removal.

Blue-green:
1. record the rollout on the route (phase `preparing`), then create the new version's
   endpoint picker, InferencePool and Deployment (`derive`);
2. wait until every new replica is Ready and warm (`warmup`);
3. for each step (the spec's, plus one where both pools' replicas are about as busy when it
   has none: `gates.with_comparable_step`): approval if asked for, the weights through
   `perform()` with the record in the same patch, then an analysis window judged against the
   old version over the same time (`gates.judge`); WAIT extends the window until
   `step_timeout_s`, which then fails the step. 100 % is taken only once every latency gate
   passed at comparable loads (`gates.unproven`);
4. at 100 %, the old version still warm, one more window: the new version judged against the
   old one's window of the first step, when its replicas carried the rest and were as busy
   as the new ones are now (a version bad only under load shows here first); then the old
   version is kept warm for `keep_old_s`, then scaled to 0 (or deleted); the record ends.

With a baseline (`--baseline fresh-copy`, blue-green only): a fresh copy of the old version, as
large as the new one, is created, made Ready and warmed with it; below 50 % it gets the new
version's weight (the old one the rest) and the new version is judged against it, both pools'
replicas equally busy from the first step; from 50 % on its weight is 0 and the new version is
judged against the old pool. It is removed (route, Deployment, pool, picker) once 100 % is
reached, and on a rollback or an abort; the record names it, so the next run removes what a
crashed one left.

Pre-warm (no spare GPUs and `no_room: prewarm`): blue-green, but once the new Deployment is
made, the pods the scheduler could not place are named to the capacity side (`ask_capacity`:
the flow emits `gpuops.gpu.capacity-needed`, whose handler raises the node pool that would
hold them) and the run waits up to `prewarm_timeout_s` for every new pod to be placed. On
time out the new Deployment is scaled to 0 (no pod is left Pending) and the rollout goes on
in fixed-capacity mode, or stops, as the person chose (`prewarm_fallback`).

Fixed-capacity (no spare GPUs): stages of k replicas: the old Deployment shrinks by k, once its
pods are gone the new one grows by k, and when those are Ready and warm the weights follow the
ready replicas on each side; each stage below 100 % is judged like a step.

Rollback (a failed gate, a timeout, a rejection, replicas that never get Ready): the weights
go back to the old pool at once, the new Deployment (and its picker) scale to 0, the old one
back to its replicas; the record ends saying why, and a message says which gate failed with the
numbers. What a crashed run left is found on the route by the next run: resumed when it rolls
out the same version, rolled back otherwise (`resume_or_roll_back`).

Every wait is on the wall clock: analysis windows are Prometheus time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prefect import get_run_logger

from gpuops.common.annotations import ROLLOUT_ABORT
from gpuops.common.errors import ConfigError, GpuopsError, KubeNotFound, PrometheusError
from gpuops.tasks.actions.perform import perform
from gpuops.tasks.approvals.block_kit import ApprovalRequest
from gpuops.tasks.approvals.request import Approval, not_approved_message
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus
from gpuops.tasks.rollout.actions import (
    CreateObject,
    DeleteObject,
    RecordRollout,
    RemoveBackend,
    ScaleDeployment,
    SetRouteWeights,
    pool_target,
)
from gpuops.tasks.rollout.capacity import capacity_stages, capacity_weight
from gpuops.tasks.rollout.chart import StepMark, chart_png, chart_pools
from gpuops.tasks.rollout.derive import served_model
from gpuops.tasks.rollout.gates import (
    Status,
    Verdict,
    against_history,
    judge,
    unproven,
    with_comparable_step,
)
from gpuops.tasks.rollout.metrics import SeriesSelector, pool_series
from gpuops.tasks.rollout.objects import PoolRef, PoolView, ServedApis
from gpuops.tasks.rollout.preflight import Plan
from gpuops.tasks.rollout.read_metrics import read_chart_curves, read_window
from gpuops.tasks.rollout.read_objects import read_pool_view, read_route
from gpuops.tasks.rollout.report import verdict_text
from gpuops.tasks.rollout.state import (
    Outcome,
    RolloutRecord,
    ended_annotations,
    record_annotations,
)
from gpuops.tasks.rollout.timeline import StepResult, timeline_text
from gpuops.tasks.rollout.traffic import adapt_first_step
from gpuops.tasks.rollout.warmup import Batch, is_warm, served_models, warm_up_batch
from gpuops.tasks.rollout.weights import WeightSplit, judged_against_baseline, step_split
from gpuops.tasks.rollout.workloads import api_of

POLL_S = 1.0  # readiness and pod waits
Ask = Callable[[str, ApprovalRequest], Awaitable[Approval]]
Notify = Callable[[str], Awaitable[None]]
# The capacity side asked for nodes for pods (`namespace/name`) no node can take now, why.
AskCapacity = Callable[[list[str], str], Awaitable[None]]


class RolloutStopped(GpuopsError):
    """The rollout cannot go on (and is rolled back): why, for the record and the person."""

    def __init__(self, reason: str, outcome: str = "failed") -> None:
        super().__init__(reason)
        self.reason = reason
        self.outcome = outcome


class PrewarmTimedOut(GpuopsError):
    """The GPUs a pre-warm asked for did not come in time (why, for the notes)."""


@dataclass
class Result:
    outcome: Outcome
    message: str
    steps: list[StepResult]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Course:
    """One run's rollout: what it uses and what it has done so far."""

    kube: Kube
    prom: Prometheus
    plan: Plan
    run_id: str
    ask: Ask | None = None
    notify: Notify | None = None
    ask_capacity: AskCapacity | None = None
    steps: list[StepResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the run decided on the way
    step_notes: dict[int, str] = field(default_factory=dict)  # weight: why it is that
    record: RolloutRecord | None = None
    # Every pod judged, per pool: the chart reads their series after a rollback removed them.
    pods_seen: dict[str, set[str]] = field(default_factory=dict)

    # --- names -----------------------------------------------------------------------------------

    @property
    def spec(self) -> Any:
        return self.plan.spec

    @property
    def apis(self) -> ServedApis:
        return self.plan.apis

    @property
    def ns(self) -> str:
        return self.plan.new.namespace

    @property
    def lock(self) -> str:
        return pool_target(self.ns, self.plan.old.pool.name)

    @property
    def route(self) -> str:
        return self.plan.route.name

    @property
    def routes(self) -> tuple[str, ...]:
        """Every route naming the old pool: each change goes to all of them (`routes`)."""
        return self.plan.route_names

    def _record(self, **changes: Any) -> RolloutRecord:
        assert self.record is not None
        self.record = self.record.advance(now=_now(), **changes)
        return self.record

    # --- actions ----------------------------------------------------------------------------------

    async def write_record(self, what: str, **changes: Any) -> None:
        record = self._record(**changes)
        for route in self.routes:
            await perform(RecordRollout(self.kube, self.apis, self.ns, route, self.lock,
                                        record_annotations(record), what=what), dry_run=False)

    def split(self, weight: int) -> WeightSplit:
        return step_split(weight, baseline=self.plan.baseline is not None)

    async def set_weight(self, weight: int, **changes: Any) -> None:
        record = self._record(weight=weight, **changes)
        for route in self.routes:  # one after the other, each with the record (`routes`)
            await perform(SetRouteWeights(
                self.kube, self.apis, self.ns, route, self.lock, record_annotations(record),
                old=self.plan.old_ref, new=self.plan.new_ref, split=self.split(weight),
                baseline=self.plan.baseline_ref), dry_run=False)

    async def scale(self, deployment: str, replicas: int) -> None:
        # The model servers (old, new, baseline) are of the old one's kind; pickers are
        # Deployments.
        new, base = self.plan.new, self.plan.baseline
        servers = {new.old_deployment, new.deployment_name} | (
            {base.deployment_name} if base else set())
        kind = new.workload_kind if deployment in servers else "Deployment"
        await perform(ScaleDeployment(self.kube, self.ns, deployment, replicas, self.lock,
                                      kind), dry_run=False)

    # --- the course ---------------------------------------------------------------------------------

    async def run(self) -> Result:
        """Roll out (or resume `plan.record` when it is this version's); a stop rolls back."""
        new = self.plan.new
        existing = self.plan.record
        resuming = existing is not None and existing.version == new.digest and \
            existing.old_pool == self.plan.old.pool.name
        if resuming:
            assert existing is not None
            self.record = existing.advance(now=_now(), run=self.run_id)
        else:
            baseline = self.plan.baseline
            self.record = RolloutRecord(
                self.run_id, self.plan.old.pool.name, new.pool_name, new.old_deployment,
                new.deployment_name, new.epp_name, new.digest, self.plan.mode, "preparing", 0,
                self.plan.old.model_server().replicas, _now(),
                baseline_pool=baseline.pool_name if baseline else None,
                baseline_deployment=baseline.deployment_name if baseline else None,
                baseline_epp=baseline.epp_name if baseline else None,
                workload=new.workload_kind)
        try:
            if self.record.phase == "rolling-back":
                raise RolloutStopped("a rollback an earlier run began", "rolled back")
            if self.record.phase != "promoted":
                if self.plan.mode == "blue-green":
                    try:
                        await self._blue_green()
                    except PrewarmTimedOut as late:
                        await self._after_prewarm(str(late))
                        await self._fixed_capacity()
                else:
                    await self._fixed_capacity()
            await self._promote()
        except RolloutStopped as stop:
            aborted = await self.abort_requested()
            outcome: Outcome = "aborted" if aborted is not None else "rolled-back"
            reason = stop.reason if aborted is None or stop.outcome == "aborted" else \
                f"aborted: {aborted} ({stop.reason})"
            await self.roll_back(reason, outcome)
            return Result(outcome, reason, self.steps)
        return Result("completed", f"{self.plan.old.pool.name} -> {new.pool_name}: the new "
                      f"version serves 100 %", self.steps)

    async def _create(self, new_replicas: int) -> None:
        new = self.plan.new
        deployment = {**new.deployment, "spec": {**new.deployment["spec"],
                                                 "replicas": new_replicas}}
        for body in (new.epp_service, new.epp_deployment, new.pool, deployment):
            if body is not None:
                await perform(CreateObject(self.kube, body, self.lock), dry_run=False)
        if new.epp_deployment is not None:  # a picker scaled to 0 by an earlier rollback
            await self.scale(str(new.epp_name), int(new.epp_deployment["spec"]["replicas"]))

    async def _blue_green(self) -> None:
        assert self.record is not None
        new, steps = self.plan.new, self.plan.steps
        start_at = 0
        if self.record.phase == "shifting":
            start_at = next((i for i, s in enumerate(steps) if s >= self.record.weight),
                            len(steps) - 1)
            if self.record.passed:
                start_at += 1
        baseline = self.plan.baseline
        if self.record.phase in ("preparing", "warming"):
            await self.write_record("preparing the new version", phase="preparing")
            await self._create(new.replicas)
            await self.scale(new.deployment_name, new.replicas)
            if self.plan.prewarm is not None:
                await self._prewarm()
            if baseline is not None:  # started with the new one: both warm up meanwhile
                await self._create_baseline(new.replicas)
            await self.write_record("warming the new version", phase="warming")
            await self.wait_ready_and_warm(new.replicas)
            if baseline is not None:
                await self.wait_ready_and_warm(new.replicas, pool=baseline.pool_name,
                                               model=served_model(new.old_version),
                                               what="the baseline")
        else:
            await self.wait_ready_and_warm(new.replicas, warm_up=False)
            if baseline is not None and step_split(self.record.weight, baseline=True).baseline:
                await self.wait_ready_and_warm(new.replicas, warm_up=False,
                                               pool=baseline.pool_name,
                                               model=served_model(new.old_version),
                                               what="the baseline")
        if start_at == 0 and self.spec.adapt_steps:
            steps = await asyncio.to_thread(self._adapt_steps, steps)
        for index in range(start_at, len(steps)):
            weight = steps[index]
            if weight == 100 and start_at == 0:
                self._check_proven(index + 1)
            await self._approve(index + 1, weight)
            await self.set_weight(weight, phase="shifting", passed=False)
            if self.record.baseline_pool and not self.split(weight).baseline:
                await self._free_baseline(weight)
            if weight == 100:
                if start_at == 0 and self.steps:
                    await self._judge_full(index + 1)
                break
            await self._judge(index + 1, weight)

    async def _prewarm(self) -> None:
        """Until every new pod is placed on a node: the capacity side asked for nodes for
        those the scheduler finds no room for (again when new ones appear); a
        `PrewarmTimedOut` after `prewarm_timeout_s`."""
        prewarm = self.plan.prewarm
        assert prewarm is not None
        new, log = self.plan.new, get_run_logger()
        deadline = _now() + timedelta(seconds=prewarm.timeout_s)
        asked: set[str] = set()
        while True:
            view = await asyncio.to_thread(read_pool_view, self.kube, self.apis, self.ns,
                                           new.pool_name)
            unplaced = [p.name for p in view.pods if p.node is None]
            if len(view.pods) >= new.replicas and not unplaced:
                self.notes.append(f"pre-warm: all {len(view.pods)} new replica(s) placed" + (
                    f" after asking the capacity side for {len(asked)}" if asked else ""))
                log.info(self.notes[-1])
                return
            waiting = [p for p in unplaced if await asyncio.to_thread(self._unschedulable, p)]
            if waiting and not set(waiting) <= asked and self.ask_capacity is not None:
                why = (f"serving rollout {self.plan.old.pool.ref} -> {new.pool_name}: "
                       f"{len(waiting)} new replica(s) x {new.gpus_per_replica} GPU(s) "
                       "find no free GPUs")
                await self.ask_capacity([f"{self.ns}/{p}" for p in waiting], why)
                asked |= set(waiting)
                log.info("pre-warm: asked the capacity side for nodes for %s",
                         ", ".join(waiting))
            if _now() >= deadline:
                raise PrewarmTimedOut(
                    f"pre-warm: {len(unplaced)} of {new.replicas} new replica(s) still not "
                    f"placed after {prewarm.timeout_s:g} s ("
                    + ("the capacity side was asked for nodes" if asked else
                       "the scheduler never called them unschedulable") + ")")
            await self.pause(POLL_S)

    def _unschedulable(self, pod: str) -> bool:
        try:
            raw = self.kube.get_pod(self.ns, pod)
        except KubeNotFound:
            return False
        return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                   for c in (raw.get("status") or {}).get("conditions") or ())

    async def _after_prewarm(self, why: str) -> None:
        """A pre-warm timed out: the new replicas go (none is left Pending), then
        fixed-capacity, or a stop when the person chose `fail`."""
        prewarm = self.plan.prewarm
        assert prewarm is not None
        new = self.plan.new
        await self.scale(new.deployment_name, 0)
        await self.wait_pods(new.pool_name, at_most=0)
        if prewarm.fallback != "fixed-capacity":
            raise RolloutStopped(f"{why}; the new replicas were removed and the rollout "
                                 "stops (prewarm_fallback: fail)", "failed")
        self.notes.append(f"{why}; the new replicas were removed and the rollout goes on in "
                          "fixed-capacity mode")
        get_run_logger().warning(self.notes[-1])
        self.plan = dataclasses.replace(self.plan, mode="fixed-capacity", prewarm=None,
                                        baseline=None)
        await self.write_record("pre-warm timed out: fixed-capacity", mode="fixed-capacity",
                                phase="preparing")

    def _adapt_steps(self, steps: tuple[int, ...]) -> tuple[int, ...]:
        """The steps with a first step the pool's traffic can judge in time
        (`traffic.adapt_first_step`), the old pool's request rate read over the last window;
        unchanged when it cannot be read."""
        spec, timing = self.spec, self.spec.timing
        end = _now()
        series = pool_series(read_pool_view(self.kube, self.apis, self.ns,
                                            self.plan.old.pool.name))
        # one window first; a short window can hold too few scrapes to count requests (a
        # late scrape on a busy Prometheus), so then a longer look-back before giving up
        rate = None
        try:
            for lookback in (timing.window_s, max(4 * timing.window_s, 60.0)):
                old = read_window(self.prom, series, end - timedelta(seconds=lookback), end)
                if old.requests is not None:
                    rate = old.requests / lookback
                    break
        except PrometheusError as e:
            get_run_logger().warning("steps not adapted to traffic: %s", e)
            return steps
        if rate is None:
            get_run_logger().warning("steps not adapted to traffic: the old pool's requests "
                                     "are not in Prometheus yet")
        adapted = adapt_first_step(spec.steps, rate_rps=rate,
                                   min_requests=spec.analysis.min_requests,
                                   window_s=timing.window_s,
                                   step_timeout_s=timing.step_timeout_s,
                                   cap=spec.max_first_step)
        if not adapted.note:
            return steps
        self.notes.append(adapted.note)
        self.step_notes[adapted.steps[0]] = adapted.note
        get_run_logger().info(adapted.note)
        return with_comparable_step(adapted.steps, self.plan.old.model_server().replicas,
                                    self.plan.new.replicas, spec.analysis.load_match)

    async def _free_baseline(self, weight: int) -> None:
        """From 50 % on the baseline carries nothing and nothing is judged against it (the
        old pool's replicas are as busy as the new ones; 100 % is judged against the old
        pool's own first window): its GPUs go back now rather than at 100 %."""
        assert self.record is not None
        pool = self.record.baseline_pool
        await remove_baseline(self.kube, self.apis, self.ns, self.routes, self.record,
                              group=self.plan.old_ref.group)
        await self.write_record(f"baseline {pool} removed at {weight} %", baseline_pool=None,
                                baseline_deployment=None, baseline_epp=None)
        self.notes.append(f"baseline {pool} removed at {weight} % (it carries no traffic and "
                          "nothing is judged against it from here): its GPUs freed")
        get_run_logger().info(self.notes[-1])

    async def _create_baseline(self, replicas: int) -> None:
        baseline = self.plan.baseline
        assert baseline is not None
        for body in baseline.bodies():
            if body is baseline.deployment:
                body = {**body, "spec": {**body["spec"], "replicas": replicas}}
            await perform(CreateObject(self.kube, body, self.lock), dry_run=False)
        if baseline.epp_deployment is not None and baseline.epp_name:
            await self.scale(baseline.epp_name,
                             int(baseline.epp_deployment["spec"]["replicas"]))
        await self.scale(baseline.deployment_name, replicas)

    async def _judge_full(self, index: int) -> None:
        """At 100 %, while the old version is still warm: the new one, now as busy per replica
        as the old one was at the first step (it carried the rest then: 99 % at a 1 % step),
        judged against the old one's window of that step, which had its requests already. No
        earlier blue-green step loads the new replicas that much (at 50 % both sides carry
        half), so a version bad only under load shows here first."""
        first = self.steps[0]
        if first.ended is None:
            return
        await self._judge(index, 100, history=(first.started, first.ended))

    async def _fixed_capacity(self) -> None:
        assert self.record is not None
        new, k = self.plan.new, self.spec.capacity_step
        replicas = self.record.old_replicas
        if self.record.phase not in ("preparing", "warming"):
            raise RolloutStopped("a fixed-capacity rollout an earlier run left half done is "
                                 "rolled back, not resumed", "rolled back")
        await self.write_record("preparing the new version", phase="preparing")
        await self._create(0)
        await self.write_record("moving capacity", phase="shifting")
        for index, (old_n, new_n) in enumerate(capacity_stages(replicas, k), start=1):
            await self.scale(new.old_deployment, old_n)
            await self.wait_pods(self.plan.old.pool.name, at_most=old_n)
            await self.scale(new.deployment_name, new_n)
            ready = await self.wait_ready_and_warm(new_n)
            old_ready = len([p for p in read_pool_view(
                self.kube, self.apis, self.ns, self.plan.old.pool.name).pods if p.ready])
            weight = capacity_weight(old_ready, len(ready))
            if weight == 100:
                self._check_proven(index)
            await self._approve(index, weight)
            await self.set_weight(weight, phase="shifting", passed=False)
            if weight == 100:
                break
            await self._judge(index, weight)

    def _check_proven(self, index: int) -> None:
        """Before 100 %: every load-dependent gate passed at comparable loads per replica
        (a stop otherwise: this run never saw the new version as busy as the old)."""
        missing = unproven(self.spec.analysis, [s.verdict for s in self.steps
                                                if s.verdict is not None])
        if missing:
            raise RolloutStopped(
                f"step {index} to 100 % not taken: {', '.join(missing)} never passed at a "
                "load per replica comparable with the old version's (no judged step had the "
                "two pools' replicas about as busy); add a step where they are", "failed")

    async def _approve(self, index: int, weight: int) -> None:
        approve = self.spec.approve
        if self.ask is None or approve == "none" or (approve == "final" and weight != 100):
            return
        new = self.plan.new
        request = ApprovalRequest(
            title=f"Serving rollout {self.plan.old.pool.ref}: step {index} to {weight} %",
            summary=(f"Send {weight} % of `{self.plan.route}`'s traffic to "
                     f"`{new.pool_name}` ({new.version.describe()}); "
                     f"`{self.plan.old.pool.name}` keeps {100 - weight} %."),
            reason=("Every judged step passed its gates against the old version so far."
                    if self.steps else "No step has been judged yet."),
            plan=timeline_text(self.steps), targets=(self.lock,))
        answer = await self.ask(f"rollout-step-{weight}", request)
        if not answer.approved:
            self.steps.append(StepResult(index, weight, 0, 0, _now(), _now(), None,
                                         "rejected", not_approved_message(answer)))
            raise RolloutStopped(f"step {index} to {weight} % not approved: "
                                 f"{not_approved_message(answer)}", "rejected")

    async def _judge(self, index: int, weight: int,
                     history: tuple[datetime, datetime] | None = None) -> None:
        """The step's window against the old version's over the same time, or over
        `history`: its own past."""
        old_view = await asyncio.to_thread(read_pool_view, self.kube, self.apis, self.ns,
                                           self.plan.old.pool.name)
        new_view = await asyncio.to_thread(read_pool_view, self.kube, self.apis, self.ns,
                                           self.plan.new.pool_name)
        against = self._against(weight, history)
        baseline_replicas = None
        if against != self.plan.old.pool.name:
            baseline_view = await asyncio.to_thread(read_pool_view, self.kube, self.apis,
                                                    self.ns, against)
            baseline_replicas = sum(p.ready for p in baseline_view.pods)
        step = StepResult(index, weight, sum(p.ready for p in old_view.pods),
                          sum(p.ready for p in new_view.pods), _now(),
                          baseline_replicas=baseline_replicas)
        verdict = await self.analyse(step.started, history, against=against)
        ended = _now()
        note = f"against the baseline {against}" if against != self.plan.old.pool.name else \
            "" if history is None else (
            f"against the old version's window {history[0]:%H:%M:%S} .. "
            f"{history[1]:%H:%M:%S} (step {self.steps[0].index})")
        if history is None and weight in self.step_notes:
            note = "; ".join(n for n in (self.step_notes[weight], note) if n)
        if verdict.status is Status.PASS:
            self.steps.append(dataclasses.replace(step, ended=ended, verdict=verdict,
                                                  note=note))
            await self.write_record(f"step {index} ({weight} %) passed", passed=True)
            return
        timed_out = verdict.status is Status.WAIT
        outcome = "timed out" if timed_out else "failed"
        self.steps.append(dataclasses.replace(step, ended=ended, verdict=verdict,
                                              outcome=outcome, note=note))
        why = (f"step {index} ({weight} %) {'timed out' if timed_out else 'failed'} after "
               f"{(ended - step.started).total_seconds():.0f} s")
        raise RolloutStopped(f"{why}\n{verdict_text(verdict)}", outcome)

    def _against(self, weight: int, history: tuple[datetime, datetime] | None) -> str:
        """The pool the step is judged against: the baseline while it carries the new
        version's weight, else the old pool."""
        if history is None and self.plan.baseline is not None and \
                judged_against_baseline(self.split(weight)):
            return self.plan.baseline.pool_name
        return self.plan.old.pool.name

    async def analyse(self, start: datetime,
                      history: tuple[datetime, datetime] | None = None, *,
                      against: str | None = None) -> Verdict:
        """The new version against the old (or `against`, the baseline) over [start, now],
        judged after `window_s` and again every `poll_s` while it WAITs, until
        `step_timeout_s`."""
        timing = self.spec.timing
        await self.pause(timing.window_s)
        while True:
            end = _now()
            verdict = await asyncio.to_thread(self._verdict, start, end, history,
                                              against or self.plan.old.pool.name)
            get_run_logger().info("analysis %s .. %s: %s", start.strftime("%H:%M:%S"),
                                  end.strftime("%H:%M:%S"), verdict.reason)
            if verdict.status is not Status.WAIT or \
                    (end - start).total_seconds() + timing.poll_s > timing.step_timeout_s:
                return verdict
            await self.pause(timing.poll_s)

    def _verdict(self, start: datetime, end: datetime,
                 history: tuple[datetime, datetime] | None = None,
                 against: str | None = None) -> Verdict:
        old = read_pool_view(self.kube, self.apis, self.ns, against or self.plan.old.pool.name)
        new = read_pool_view(self.kube, self.apis, self.ns, self.plan.new.pool_name)
        for view in (old, new):
            self.pods_seen.setdefault(view.pool.name, set()).update(p.name for p in view.pods)
        old_start, old_end = history or (start, end)
        analysis = self.spec.analysis if history is None else against_history(self.spec.analysis)
        return judge(analysis, read_window(self.prom, pool_series(new), start, end),
                     read_window(self.prom, pool_series(old), old_start, old_end))

    def chart(self) -> bytes | None:
        """The TTFT / ITL / error-ratio chart of both versions since the first judged step
        (`chart.chart_png`); None before any."""
        if not self.steps:
            return None
        start = self.steps[0].started - timedelta(seconds=self.spec.timing.window_s)
        end = _now()
        curves = {}
        for version, pool in chart_pools(self.plan.old.pool.name, self.plan.new.pool_name,
                                         self.plan.baseline.pool_name if self.plan.baseline
                                         else None):
            selector = SeriesSelector.of_pods(self.ns, self.pods_seen.get(pool, ()))
            curves[version] = read_chart_curves(self.prom, selector, start, end)
        marks = [StepMark(s.started, s.weight) for s in self.steps if s.verdict is not None]
        return chart_png(curves, marks, f"{self.plan.old.pool.ref} -> "
                         f"{self.plan.new.pool_name}: old (blue), new (orange)"
                         + (", baseline (green)" if "baseline" in curves else ""))

    # --- waits ----------------------------------------------------------------------------------

    async def wait_pods(self, pool: str, *, at_most: int) -> None:
        """Until the pool has at most `at_most` pods (those going away hold their GPUs)."""
        deadline = _now() + timedelta(seconds=self.spec.timing.ready_timeout_s)
        while True:
            view = await asyncio.to_thread(read_pool_view, self.kube, self.apis, self.ns, pool)
            if view.replicas_present <= at_most:  # a group: until its last pod is gone
                return
            if _now() >= deadline:
                raise RolloutStopped(f"InferencePool {pool} still has {view.replicas_present} "
                                     "replica(s) "
                                     f"after {self.spec.timing.ready_timeout_s:g} s (wanted at "
                                     f"most {at_most})", "not ready")
            await self.pause(POLL_S)

    async def wait_ready_and_warm(self, replicas: int, *, warm_up: bool = True,
                                  pool: str | None = None, model: str | None = None,
                                  what: str = "the new version") -> list[str]:
        """The new pool's (or `pool`'s) Ready pods once `replicas` of them are Ready, answer
        `/v1/models` with the served model and (`warm_up`) have warmed up; a
        `RolloutStopped` naming what the pods wait for when that takes longer than
        `ready_timeout_s`."""
        timing = self.spec.timing
        deadline = _now() + timedelta(seconds=timing.ready_timeout_s)
        model = model if model is not None else served_model(self.plan.new.version) or ""
        port = self.plan.old.pool.target_ports[0]
        name = pool or self.plan.new.pool_name
        while True:
            view = await asyncio.to_thread(read_pool_view, self.kube, self.apis, self.ns, name)
            ready = [p.name for p in view.pods if p.ready]
            if len(ready) >= replicas:
                answers = [await asyncio.to_thread(served_models, self.kube, self.ns, p, port)
                           for p in ready]
                if all(a is not None and (not model or model in a) for a in answers):
                    break
            if _now() >= deadline:
                raise RolloutStopped(await asyncio.to_thread(self._not_ready, view, replicas,
                                                             what), "not ready")
            await self.pause(POLL_S)
        if warm_up and timing.warmup_requests > 0:
            await self._warm_up(ready, port, model, deadline, what)
        return ready

    async def _warm_up(self, pods: list[str], port: int, model: str, deadline: datetime,
                       what: str = "the new version") -> None:
        timing = self.spec.timing
        previous: dict[str, Batch] = {}
        while True:
            batches = [await asyncio.to_thread(warm_up_batch, self.kube, self.ns, p, port,
                                               model, timing.warmup_requests) for p in pods]
            failing = [b for b in batches if b.failed * 2 > b.sent]
            if failing:
                raise RolloutStopped(
                    f"{what} fails its warm-up requests: " + ", ".join(
                        f"{b.pod} {b.failed} of {b.sent}" for b in failing), "not ready")
            if is_warm(previous, batches, timing.warm_tolerance):
                get_run_logger().info("warm: %s", ", ".join(
                    f"{b.pod} TTFT {b.ttft_mean:.3f} s" if b.ttft_mean is not None else b.pod
                    for b in batches))
                return
            if _now() >= deadline:
                raise RolloutStopped(f"{what} was still warming up (TTFT falling) "
                                     f"after {timing.ready_timeout_s:g} s", "not ready")
            previous = {b.pod: b for b in batches}
            await self.pause(timing.warmup_interval_s)

    def _not_ready(self, view: PoolView, replicas: int, what: str = "the new version") -> str:
        ready = sum(p.ready for p in view.pods)
        reasons = []
        for pod in view.pods:
            if pod.ready:
                continue
            try:
                raw = self.kube.get_pod(self.ns, pod.name)
            except KubeNotFound:
                continue
            reasons.append(f"{pod.name}: {_waiting_reason(raw)}")
        return (f"image: {what}'s pods did not become Ready and warm within "
                f"{self.spec.timing.ready_timeout_s:g} s ({ready} of {replicas} Ready"
                + (f"; {'; '.join(reasons)}" if reasons else "") + ")")

    # --- the end ---------------------------------------------------------------------------------

    async def _promote(self) -> None:
        """The old version kept warm `keep_old_s`, then scaled to 0 or deleted."""
        assert self.record is not None
        record = self.record
        # The baseline has carried nothing since 50 %: its GPUs go back now, not after
        # keep_old_s.
        await remove_baseline(self.kube, self.apis, self.ns, self.routes, record,
                              group=self.plan.old_ref.group)
        if record.phase != "promoted":
            until = _now() + timedelta(seconds=self.spec.timing.keep_old_s)
            await self.write_record("promoted; the old version kept warm until "
                                    f"{until:%H:%M:%S}", phase="promoted", keep_old_until=until)
            record = self.record
        if record.keep_old_until is not None:
            # The old version is still warm: an abort now sends the traffic back to it.
            await self.pause((record.keep_old_until - _now()).total_seconds())
        await retire_old(self.kube, self.apis, self.ns, self.routes, record,
                         delete=self.spec.on_success == "delete")

    async def roll_back(self, reason: str, outcome: Outcome = "rolled-back") -> None:
        assert self.record is not None
        await roll_back(self.kube, self.apis, self.ns, self.routes, self.record, reason,
                        group=self.plan.old_ref.group, outcome=outcome)
        if self.notify is not None:
            what = "aborted and rolled back" if outcome == "aborted" else "rolled back"
            await self.notify(f"Serving rollout {self.plan.old.pool.ref} -> "
                              f"{self.plan.new.pool_name} {what}: {reason}")

    # --- abort --------------------------------------------------------------------------------

    async def abort_requested(self) -> str | None:
        """Who asked to abort, and why (`gpuops rollout abort`), or None."""
        for name in self.routes:
            route = await asyncio.to_thread(read_route, self.kube, self.apis, self.ns, name)
            if ROLLOUT_ABORT in route.annotations:
                return route.annotations[ROLLOUT_ABORT]
        return None

    async def pause(self, seconds: float) -> None:
        """Sleep `seconds`, looking for an abort request every POLL_S (a stop if there is)."""
        end = time.monotonic() + max(0.0, seconds)
        while True:
            why = await self.abort_requested()
            if why is not None:
                raise RolloutStopped(f"aborted: {why}", "aborted")
            left = end - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(POLL_S, left))


def _waiting_reason(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message') or ''}".rstrip(": ")
    for c in status.get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason')}: {c.get('message') or ''}".rstrip(": ")
    return str(status.get("phase") or "unknown")


# --- rolling back and finishing, also for what another run left ------------------------------------

def _names(route: str | Sequence[str]) -> tuple[str, ...]:
    return (route,) if isinstance(route, str) else tuple(route)


async def roll_back(kube: Kube, apis: ServedApis, namespace: str, route: str | Sequence[str],
                    record: RolloutRecord, reason: str, *, group: str | None = None,
                    outcome: Outcome = "rolled-back") -> None:
    """Weights back to the old pool at once on every route (`route`: one or several), the new
    version scaled to 0, the old back to its replicas, the record ended with `reason`."""
    log = get_run_logger()
    log.warning("rolling back %s -> %s: %s", record.old_pool, record.new_pool,
                reason.splitlines()[0])
    lock = pool_target(namespace, record.old_pool)
    group = group or apis.inference_pool.group
    old, new = PoolRef(group, namespace, record.old_pool), PoolRef(group, namespace,
                                                                  record.new_pool)
    back = record.advance(now=_now(), phase="rolling-back", weight=0)
    baseline = PoolRef(group, namespace, record.baseline_pool) if record.baseline_pool else None
    for name in _names(route):
        await perform(SetRouteWeights(kube, apis, namespace, name, lock,
                                      record_annotations(back), old=old, new=new,
                                      split=WeightSplit(100, 0), baseline=baseline),
                      dry_run=False)
    await perform(ScaleDeployment(kube, namespace, record.new_deployment, 0, lock,
                                  record.workload), dry_run=False)
    if record.epp:
        await perform(ScaleDeployment(kube, namespace, record.epp, 0, lock), dry_run=False)
    await remove_baseline(kube, apis, namespace, route, back, group=group)
    await perform(ScaleDeployment(kube, namespace, record.old_deployment, record.old_replicas,
                                  lock, record.workload), dry_run=False)
    ended = ended_annotations(back, outcome, _now(), reason.splitlines()[0])
    for name in _names(route):
        await perform(RecordRollout(kube, apis, namespace, name, lock, ended,
                                    what=f"rollout {outcome}"), dry_run=False)


async def retire_old(kube: Kube, apis: ServedApis, namespace: str, route: str | Sequence[str],
                     record: RolloutRecord, *, delete: bool) -> None:
    """After a promotion: the old version scaled to 0, or deleted (off the route first), and
    the record ended."""
    lock = pool_target(namespace, record.old_pool)
    await remove_baseline(kube, apis, namespace, route, record)
    await perform(ScaleDeployment(kube, namespace, record.old_deployment, 0, lock,
                                  record.workload), dry_run=False)
    ended = ended_annotations(record, "completed", _now())
    if not delete:
        for name in _names(route):
            await perform(RecordRollout(kube, apis, namespace, name, lock, ended,
                                        what="rollout completed"), dry_run=False)
        return
    api = apis.inference_pool
    old = PoolRef(api.group, namespace, record.old_pool)
    for name in _names(route):
        await perform(RemoveBackend(kube, apis, namespace, name, lock, ended, pool=old),
                      dry_run=False)
    server = api_of(record.workload)
    for api_version, kind, name in ((server.api_version, server.kind, record.old_deployment),
                                    (api.api_version, "InferencePool", record.old_pool)):
        await perform(DeleteObject(kube, api_version, kind, namespace, name, lock),
                      dry_run=False)


async def remove_baseline(kube: Kube, apis: ServedApis, namespace: str,
                          route: str | Sequence[str], record: RolloutRecord, *,
                          group: str | None = None) -> None:
    """The baseline the record names (none: nothing to do) off the route (it carries 0 %
    by now), scaled to 0 and deleted with its pool and picker. Each part holds when it is
    gone already, so a run removing what a crashed one half removed goes through."""
    if not record.baseline_pool:
        return
    lock = pool_target(namespace, record.old_pool)
    api = apis.inference_pool
    pool = PoolRef(group or api.group, namespace, record.baseline_pool)
    for name in _names(route):
        await perform(RemoveBackend(kube, apis, namespace, name, lock, {}, pool=pool),
                      dry_run=False)
    objects: list[tuple[str, str, str]] = []
    if record.baseline_deployment:
        await perform(ScaleDeployment(kube, namespace, record.baseline_deployment, 0, lock,
                                      record.workload), dry_run=False)
        server = api_of(record.workload)
        objects.append((server.api_version, server.kind, record.baseline_deployment))
    objects.append((api.api_version, "InferencePool", record.baseline_pool))
    if record.baseline_epp:
        objects += [("apps/v1", "Deployment", record.baseline_epp),
                    ("v1", "Service", record.baseline_epp)]
    for api_version, kind, name in objects:
        await perform(DeleteObject(kube, api_version, kind, namespace, name, lock),
                      dry_run=False)


def check_resumable(plan: Plan) -> None:
    if plan.record is not None and plan.record.new_pool == plan.old.pool.name:
        raise ConfigError("pool", f"InferencePool {plan.old.pool.ref} is the new version of "
                          f"a rollout from {plan.record.old_pool} still recorded on HTTPRoute "
                          f"{plan.route}; finish or abort that one first")
