"""Jobs that give up, as events: `gpuops.job.failed` when a Job gets its `Failed` condition.

A Job's pods that fail are reported one by one, like restarts (restart_detector:
"terminated"). What tells a person that the training run is over is the Job's own end:
`backoffLimit` reached, `activeDeadlineSeconds` passed. Jobs are listed and watched like pods
(`WatchLoop`: resume, relist on 410); each Job's failure is sent once, also across a relist
and a watcher restart (its uid and reason are kept in a state file of their own beside the
watcher's); a deleted Job is forgotten.

The workload of a Job's pod is the Job, not a CronJob above it: each run of a CronJob is a
Job of its own, with its own pods and its own end, and the Job's name is what a person looks
up (`kubectl describe job`).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from gpuops.common.errors import KubeError, KubeForbidden, KubeInvalid, KubeNotFound
from gpuops.common.events import workload_related
from gpuops.sensors.emitter import EventSender, build_event
from gpuops.sensors.restart_detector import ReportedStore
from gpuops.sensors.watch_loop import WatchLoop
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.restarts.evidence import JobFailure

log = logging.getLogger("gpuops.sensors.jobs")

Obj = dict[str, Any]


def _controller(obj: Obj) -> Obj | None:
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or []
                 if r.get("controller")), None)


def owning_workload(kube: Kube, pod: Obj) -> Obj:
    """The workload a person manages for this pod: its Job when a Job runs it, otherwise
    the top of its owner chain (Pod -> ReplicaSet -> Deployment, ...)."""
    ref = _controller(pod)
    if ref is None or ref.get("kind") != "Job" or not str(ref.get("apiVersion", "")).startswith(
            "batch/"):
        return kube.top_owner(pod)
    namespace = (pod.get("metadata") or {}).get("namespace")
    try:
        return kube.get(ref["apiVersion"], "Job", namespace, ref["name"])
    except (KubeNotFound, KubeForbidden, KubeInvalid):  # gone (TTL) or not ours to read
        return {"apiVersion": ref["apiVersion"], "kind": "Job",
                "metadata": {"name": ref["name"], "uid": ref.get("uid"),
                             "namespace": namespace}}


def failed_condition(job: Obj) -> Obj | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Failed" and c.get("status") == "True"), None)


def job_failure(job: Obj, *, cluster: str, namespace: Obj, observed_at: datetime
                ) -> JobFailure | None:
    """The failure of a Job that has its `Failed` condition, else None (pure)."""
    failed = failed_condition(job)
    if failed is None:
        return None
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    owner = _controller(job)
    ns_meta = namespace.get("metadata") or {}
    return JobFailure(
        cluster=cluster, namespace=meta.get("namespace", ""), name=meta["name"],
        uid=meta.get("uid", ""), reason=failed.get("reason") or "", message=failed.get(
            "message") or "", failed_pods=int(status.get("failed") or 0),
        succeeded_pods=int(status.get("succeeded") or 0),
        backoff_limit=spec.get("backoffLimit"),
        active_deadline_seconds=spec.get("activeDeadlineSeconds"),
        started_at=status.get("startTime"), failed_at=failed.get("lastTransitionTime"),
        owner=f"{owner['kind']}/{owner['name']}" if owner else "",
        pod_labels=((spec.get("template") or {}).get("metadata") or {}).get("labels") or {},
        namespace_labels=ns_meta.get("labels") or {},
        namespace_annotations={k: v for k, v in (ns_meta.get("annotations") or {}).items()
                               if k.startswith("gpuops.io/")},
        observed_at=observed_at)


def _key(uid: str) -> str:
    """The state file's key for a Job: `uid/...`, so a deleted Job is forgotten by uid."""
    return f"{uid}/failed"


def jobs_state_file(state_file: Path | None) -> Path | None:
    """Where the reported Job failures are kept: beside the watcher's own state file."""
    return None if state_file is None else state_file.with_name(
        f"{state_file.stem}.jobs{state_file.suffix or '.json'}")


class JobFailureWatch:
    """Watch every namespace's Jobs; send `gpuops.job.failed` once per Job that failed."""

    def __init__(self, kube: Kube, sender: EventSender, *, state_file: Path | None,
                 stop: threading.Event) -> None:
        self.kube = kube
        self.sender = sender
        self.stop = stop
        self.reported = ReportedStore(jobs_state_file(state_file))
        self.sent = 0
        self.loop = WatchLoop("jobs", client.BatchV1Api(kube.api).list_job_for_all_namespaces,
                              on_event=self._on_job, on_relist=self._on_relist, stop=stop)

    def run(self) -> None:
        self.loop.run()

    def _on_relist(self, jobs: list[Obj]) -> None:
        for job in jobs:
            self._on_job("MODIFIED", job)
        live = {(j.get("metadata") or {}).get("uid") for j in jobs}
        self.reported.forget_pods(self.reported.pod_uids() - live)

    def _on_job(self, event_type: str, job: Obj) -> None:
        uid = (job.get("metadata") or {}).get("uid", "")
        if event_type == "DELETED":
            self.reported.forget_pods({uid})
            return
        if failed_condition(job) is None or self.reported.get(_key(uid)):
            return
        failure = job_failure(job, cluster=self.kube.cluster_name,
                              namespace=self._namespace(job["metadata"].get("namespace", "")),
                              observed_at=datetime.now(UTC))
        if failure is None:
            return
        event = build_event(
            obj="job", what="failed", cluster=failure.cluster, kind="Job",
            namespace=failure.namespace, name=failure.name, identity=failure.identity,
            payload=failure.model_dump(mode="json"),
            labels={"gpuops.workload": failure.workload_key},
            related_resources=[workload_related(failure.cluster, "Job", failure.namespace,
                                                failure.name)])
        try:
            self.sender.send([event], stop=self.stop)
        except RuntimeError:  # stopped first: the next watcher's relist sends it
            return
        self.reported.mark_all({_key(uid): 1})
        self.sent += 1
        log.info("job %s/%s failed (%s): reported", failure.namespace, failure.name,
                 failure.reason)

    def _namespace(self, name: str) -> Obj:
        """For routing (the namespace's `gpuops.io/slack-channel`); {} if unreadable."""
        try:
            return self.kube.get_namespace(name)
        except KubeError as e:
            log.info("namespace %s unreadable: %s", name, e)
            return {}
