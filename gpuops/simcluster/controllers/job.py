"""The Job controller (and the TTL-after-finished controller): run pods until enough succeed.

As kube's `pkg/controller/job` (1.31+ behaviour): keep min(parallelism, completions -
succeeded) pods active, Indexed jobs one pod per missing index (`batch.kubernetes.io/job-
completion-index` annotation and label, JOB_COMPLETION_INDEX, hostname `<job>-<i>`); count
each finished pod once (a pod deleted before it finished counts as failed); recreate failed
pods after the back-off (10 s doubling, at most 10 min); more failures than backoffLimit (or,
for restartPolicy OnFailure, as many container restarts) -> FailureTarget then Failed
`BackoffLimitExceeded`; activeDeadlineSeconds -> `DeadlineExceeded`; enough successes ->
SuccessCriteriaMet then Complete `CompletionsReached` with completionTime. Terminal conditions
wait until no pod is still terminating. `suspend` deletes active pods. Pods carry `job-name`,
`controller-uid` and their `batch.kubernetes.io/` forms; the Job gets its generated selector.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock, parse_rfc3339, rfc3339
from ..core.ownership import OwnerIndex
from ..core.podstate import (
    controller_ref,
    is_ready,
    is_terminal,
    is_terminating,
    phase,
    total_restarts,
)
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.store import Store
from ..core.workqueue import ControllerLoop
from .podcontrol import PodControl, pod_from_template
from .podranking import rank_for_deletion

Obj = dict[str, Any]
COMPONENT = "job-controller"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 600.0
MAX_PODS_PER_SYNC = 500

BACKOFF_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")


@dataclass
class JobTracking:
    """What the real controller keeps in pod finalizers and its back-off store."""

    counted: set[str] = field(default_factory=set)  # pod uids reflected in status counts
    vanished: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    failures_since_success: int = 0
    last_failure: float | None = None


def job_selector_labels(job: Obj) -> dict[str, str]:
    meta = job["metadata"]
    return {"batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"], "job-name": meta["name"]}


def format_indexes(indexes: set[int]) -> str:
    """`1,3-5,7`: the completedIndexes notation."""
    out: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def parse_indexes(text: str | None) -> set[int]:
    result: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        result.update(range(int(lo), int(hi or lo) + 1))
    return result


def pod_index(pod: Obj) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def get_condition(status: Obj, ctype: str) -> Obj | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == ctype), None)


def condition_true(status: Obj, ctype: str) -> bool:
    cond = get_condition(status, ctype)
    return cond is not None and cond.get("status") == "True"


def is_finished(job: Obj) -> bool:
    status = job.get("status") or {}
    return condition_true(status, "Complete") or condition_true(status, "Failed")


class JobController(ControllerLoop[tuple[str, str]]):
    name = COMPONENT

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder,
                 owners: OwnerIndex) -> None:
        super().__init__(store, clock)
        self.index = owners
        self.job_type = self.store.type("jobs", "batch")
        self.pod_type = self.store.type("pods")
        self.pod_control = PodControl(store, recorder, COMPONENT)
        self._tracking: dict[str, JobTracking] = {}
        for job in self.store.list(self.job_type):
            self._on_job(self.job_type, "ADDED", job, None)
        self.store.add_listener(self._on_job, self.job_type)
        self.store.add_listener(self._on_pod, self.pod_type)

    def _on_job(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        if event == "DELETED":
            self._tracking.pop(obj["metadata"]["uid"], None)
        else:
            self.enqueue((obj["metadata"]["namespace"], obj["metadata"]["name"]))

    def _on_pod(self, _rt: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        ref = controller_ref(obj) or controller_ref(old)
        if ref is None or ref.kind != "Job":
            return
        if event == "DELETED":
            tracking = self._tracking.get(ref.uid)
            if tracking is not None and obj["metadata"]["uid"] not in tracking.counted:
                tracking.vanished[obj["metadata"]["uid"]] = (phase(obj), pod_index(obj))
        self.enqueue((obj["metadata"]["namespace"], ref.name))

    # --- sync ----------------------------------------------------------------------------------

    def sync(self, key: tuple[str, str]) -> None:
        namespace, name = key
        job = self.store.find(self.job_type, namespace, name)
        if job is None:
            return
        if is_finished(job):
            self._expire_after_ttl(job)
            return
        if not job["spec"].get("selector") and not job["spec"].get("manualSelector"):
            job = self._set_generated_selector(job)
        JobSync(self, job).run()

    def _set_generated_selector(self, job: Obj) -> Obj:
        """What kube-apiserver does at create: the uid selector and the labels it matches."""
        labels = job_selector_labels(job)

        def generate(o: Obj) -> None:
            o["spec"]["selector"] = {"matchLabels": {
                "batch.kubernetes.io/controller-uid": o["metadata"]["uid"]}}
            tmeta = o["spec"].setdefault("template", {}).setdefault("metadata", {})
            tmeta.setdefault("labels", {}).update(labels)
        return self.store.mutate(self.job_type, job["metadata"]["namespace"],
                                 job["metadata"]["name"], generate)

    def _expire_after_ttl(self, job: Obj) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None or is_terminating(job):
            return
        status = job.get("status") or {}
        finished = status.get("completionTime") or (
            get_condition(status, "Failed") or {}).get("lastTransitionTime")
        if not finished:
            return
        at = parse_rfc3339(finished) + ttl
        if at > self.clock.time():
            self.enqueue_at(at, (job["metadata"]["namespace"], job["metadata"]["name"]))
            return
        # The TTL controller deletes with Background propagation: the pods go with it.
        self.store.delete(self.job_type, job["metadata"]["namespace"], job["metadata"]["name"],
                          uid=job["metadata"]["uid"])

    def tracking(self, job: Obj) -> JobTracking:
        return self._tracking.setdefault(job["metadata"]["uid"], JobTracking())


class JobSync:
    """One sync of one Job: count, decide, act, write status."""

    def __init__(self, ctrl: JobController, job: Obj) -> None:
        self.ctrl = ctrl
        self.job = job
        self.spec = job["spec"]
        self.status: Obj = copy.deepcopy(job.get("status") or {})
        self.track = ctrl.tracking(job)
        self.now = ctrl.clock.time()
        self.indexed = self.spec.get("completionMode") == "Indexed"
        self.key = (job["metadata"]["namespace"], job["metadata"]["name"])

    def run(self) -> None:
        pods = self.ctrl.index.controlled(self.job["metadata"]["uid"], self.ctrl.pod_type)
        self._count_finished(pods)
        live = [p for p in pods if p["metadata"]["uid"] not in self.track.counted]
        active = [p for p in live if not is_terminal(p) and not is_terminating(p)]
        terminating = [p for p in pods if is_terminating(p) and not is_terminal(p)]
        suspended = bool(self.spec.get("suspend"))
        if not suspended and not self.status.get("startTime"):
            self.status["startTime"] = rfc3339(self.now)
        self._decide(active)
        failure, success = get_condition(self.status, "FailureTarget"), get_condition(
            self.status, "SuccessCriteriaMet")
        if failure is not None or success is not None:
            # Finishing: nothing keeps running. Pods deleted now are counted (as failed, when
            # the Job failed) on a later sync, before the terminal condition is written.
            for pod in active:
                if failure is None:
                    self.track.counted.add(pod["metadata"]["uid"])
                self.ctrl.pod_control.delete(self.job, pod)
            if not active and not terminating:
                self._finish(failure, success)
            active = []
        elif suspended:
            self._suspend(active)
            active = []
        else:
            self._resume_if_suspended()
            active = self._manage(active)
        self._write_status(active, terminating)

    # --- counting ------------------------------------------------------------------------------

    def _count_finished(self, pods: list[Obj]) -> None:
        succeeded_indexes = parse_indexes(self.status.get("completedIndexes"))
        new_failures = new_successes = 0
        finished: list[tuple[str, str, int | None]] = []
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if uid in self.track.counted:
                continue
            if phase(pod) == "Succeeded":
                finished.append((uid, "Succeeded", pod_index(pod)))
            elif phase(pod) == "Failed" or is_terminating(pod):
                finished.append((uid, "Failed", pod_index(pod)))
        for uid, (last_phase, idx) in self.track.vanished.items():
            if uid not in self.track.counted:
                finished.append((uid, "Succeeded" if last_phase == "Succeeded" else "Failed",
                                 idx))
        self.track.vanished.clear()
        for uid, outcome, idx in finished:
            self.track.counted.add(uid)
            if outcome == "Succeeded":
                new_successes += 1
                if self.indexed and idx is not None:
                    succeeded_indexes.add(idx)
                else:
                    self.status["succeeded"] = self.status.get("succeeded", 0) + 1
            else:
                new_failures += 1
                self.status["failed"] = self.status.get("failed", 0) + 1
        if self.indexed:
            completions = self.spec.get("completions") or 0
            succeeded_indexes = {i for i in succeeded_indexes if 0 <= i < completions}
            self.status["succeeded"] = len(succeeded_indexes)
            self.status["completedIndexes"] = format_indexes(succeeded_indexes)
        if new_successes:
            self.track.failures_since_success = 0
        if new_failures:
            self.track.failures_since_success += new_failures
            self.track.last_failure = self.now

    # --- deciding ------------------------------------------------------------------------------

    def _decide(self, active: list[Obj]) -> None:
        if get_condition(self.status, "FailureTarget") or get_condition(
                self.status, "SuccessCriteriaMet"):
            return
        failed = self.status.get("failed", 0)
        backoff_limit = self.spec.get("backoffLimit", 6)
        restarts = 0
        if (self.spec.get("template") or {}).get("spec", {}).get("restartPolicy") == "OnFailure":
            restarts = sum(total_restarts(p) for p in active)
        past_on_failure = restarts > 0 if backoff_limit == 0 else restarts >= backoff_limit
        if failed > backoff_limit or (restarts and past_on_failure):
            self._target("FailureTarget", *BACKOFF_EXCEEDED)
            return
        deadline = self.spec.get("activeDeadlineSeconds")
        if deadline is not None and self.status.get("startTime") and not self.spec.get(
                "suspend"):
            ends = parse_rfc3339(self.status["startTime"]) + deadline
            if ends <= self.now:
                self._target("FailureTarget", *DEADLINE_EXCEEDED)
                return
            self.ctrl.enqueue_at(ends, self.key)
        succeeded = self.status.get("succeeded", 0)
        completions = self.spec.get("completions")
        if completions is None:
            done = succeeded > 0 and not active
        elif self.indexed:
            done = succeeded >= completions
        else:
            done = succeeded >= completions and not active
        if done:
            self._target("SuccessCriteriaMet", *COMPLETIONS_REACHED)

    def _target(self, ctype: str, reason: str, message: str) -> None:
        self._set_condition(ctype, "True", reason, message)
        if ctype == "FailureTarget":
            self.ctrl.pod_control.event(self.job, reason, message, type="Warning")

    def _finish(self, failure: Obj | None, success: Obj | None) -> None:
        if failure is not None:
            self._set_condition("Failed", "True", failure["reason"], failure["message"])
        elif success is not None:
            self._set_condition("Complete", "True", success["reason"], success["message"])
            self.status["completionTime"] = rfc3339(self.now)
            self.ctrl.pod_control.event(self.job, "Completed", "Job completed")
        ttl = self.spec.get("ttlSecondsAfterFinished")
        if ttl is not None:
            self.ctrl.enqueue_at(self.now + ttl, self.key)

    def _set_condition(self, ctype: str, status: str, reason: str, message: str) -> None:
        stamp = rfc3339(self.now)
        conditions = self.status.setdefault("conditions", [])
        for cond in conditions:
            if cond.get("type") == ctype:
                if cond.get("status") != status:
                    cond["lastTransitionTime"] = stamp
                cond.update(status=status, reason=reason, message=message, lastProbeTime=stamp)
                return
        conditions.append({"type": ctype, "status": status, "lastProbeTime": stamp,
                           "lastTransitionTime": stamp, "reason": reason, "message": message})

    # --- acting --------------------------------------------------------------------------------

    def _suspend(self, active: list[Obj]) -> None:
        for pod in active:
            self.track.counted.add(pod["metadata"]["uid"])  # not a failure: the user paused it
            self.ctrl.pod_control.delete(self.job, pod)
        cond = get_condition(self.status, "Suspended")
        if cond is None or cond.get("status") != "True":
            self._set_condition("Suspended", "True", "JobSuspended", "Job suspended")
            self.ctrl.pod_control.event(self.job, "Suspended", "Job suspended")
        self.status.pop("startTime", None)

    def _resume_if_suspended(self) -> None:
        if condition_true(self.status, "Suspended"):
            self._set_condition("Suspended", "False", "JobResumed", "Job resumed")
            self.ctrl.pod_control.event(self.job, "Resumed", "Job resumed")

    def _manage(self, active: list[Obj]) -> list[Obj]:
        parallelism = self.spec.get("parallelism", 1)
        completions = self.spec.get("completions")
        succeeded = self.status.get("succeeded", 0)
        if completions is None:
            want = len(active) if succeeded > 0 else parallelism
        else:
            want = max(0, min(completions - succeeded, parallelism))
        if len(active) > want:
            surplus = rank_for_deletion(active)[: min(len(active) - want, MAX_PODS_PER_SYNC)]
            for pod in surplus:
                self.track.counted.add(pod["metadata"]["uid"])
                self.ctrl.pod_control.delete(self.job, pod)
            gone = {p["metadata"]["uid"] for p in surplus}
            return [p for p in active if p["metadata"]["uid"] not in gone]
        if len(active) < want:
            wait_until = self._backoff_until()
            if wait_until is not None and wait_until > self.now:
                self.ctrl.enqueue_at(wait_until, self.key)
                return active
            for index in self._indexes_to_create(active, want - len(active)):
                try:
                    active.append(self._create(index))
                except errors.ApiError:
                    break  # FailedCreate recorded; the next sync tries again
        return active

    def _backoff_until(self) -> float | None:
        failures = self.track.failures_since_success
        if not failures or self.track.last_failure is None:
            return None
        delay = min(BACKOFF_BASE_S * 2 ** (failures - 1), BACKOFF_MAX_S)
        return self.track.last_failure + delay

    def _indexes_to_create(self, active: list[Obj], count: int) -> list[int | None]:
        count = min(count, MAX_PODS_PER_SYNC)
        if not self.indexed:
            return [None] * count
        taken = parse_indexes(self.status.get("completedIndexes"))
        taken |= {i for p in active if (i := pod_index(p)) is not None}
        missing = [i for i in range(self.spec.get("completions") or 0) if i not in taken]
        return list(missing[:count])

    def _create(self, index: int | None) -> Obj:
        name = self.job["metadata"]["name"]
        template = self.spec.get("template") or {}
        generate = f"{name}-{index}-" if index is not None else f"{name}-"
        pod = pod_from_template(template, self.job, generate_name=generate)
        pod["metadata"]["labels"].update(job_selector_labels(self.job))
        if index is not None:
            pod["metadata"].setdefault("annotations", {})[INDEX_KEY] = str(index)
            pod["metadata"]["labels"][INDEX_KEY] = str(index)
            pod["spec"]["hostname"] = f"{name}-{index}"
            env = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}}
            for group in ("initContainers", "containers"):
                for container in pod["spec"].get(group) or []:
                    container.setdefault("env", []).append(dict(env))
        return self.ctrl.pod_control.create(self.job, pod)

    # --- status --------------------------------------------------------------------------------

    def _write_status(self, active: list[Obj], terminating: list[Obj]) -> None:
        status = self.status
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if is_ready(p))
        status["terminating"] = len(terminating)
        status.setdefault("uncountedTerminatedPods", {})
        for field_name in ("active", "succeeded", "failed"):
            if not status.get(field_name):
                status.pop(field_name, None)
        if condition_true(status, "Complete") or condition_true(status, "Failed"):
            status["uncountedTerminatedPods"] = {}
        if status != (self.job.get("status") or {}):
            final = copy.deepcopy(status)
            self.ctrl.store.mutate(self.ctrl.job_type, self.key[0], self.key[1],
                                   lambda o: o.__setitem__("status", final),
                                   subresource="status")
