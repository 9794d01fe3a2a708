"""Printers of the workload controllers, with kube-apiserver's columns: deployments (READY
ready/desired, UP-TO-DATE, AVAILABLE), replicasets (DESIRED CURRENT READY), statefulsets
(READY), daemonsets (DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR) and jobs
(STATUS Complete/Failed/Terminating/Suspended/FailureTarget/Running, COMPLETIONS, DURATION);
all with wide CONTAINERS IMAGES (and SELECTOR)."""

from __future__ import annotations

from .base import (
    AGE,
    NAME,
    Cells,
    Column,
    Obj,
    Printer,
    age,
    containers_and_images,
    epoch,
    format_labels,
    format_selector,
    human_duration,
    integer,
    name,
    section,
    selector_string,
    wide,
)

CONTAINERS = wide("Containers", "Names of each container in the template.")
IMAGES = wide("Images", "Images referenced by each container in the template.")
SELECTOR = wide("Selector", "The label selector of the pods it controls.")


def _template_spec(obj: Obj) -> Obj:
    return section(obj, "spec", "template", "spec")


def _replicas(obj: Obj) -> int:
    """`spec.replicas`, 1 when unset (the API server's default)."""
    return integer(section(obj, "spec").get("replicas"), 1)


DEPLOYMENT_COLUMNS = (
    NAME, Column("Ready", description="Number of the pod with ready state"),
    Column("Up-to-date", description="Total number of non-terminated pods targeted by this "
                                     "deployment that have the desired template spec."),
    Column("Available", description="Total number of available pods targeted by this "
                                    "deployment."),
    AGE, CONTAINERS, IMAGES, SELECTOR,
)


def deployment_cells(d: Obj, now: float) -> Cells:
    status = section(d, "status")
    names, images = containers_and_images(_template_spec(d))
    return [name(d), f"{integer(status.get('readyReplicas'))}/{_replicas(d)}",
            integer(status.get("updatedReplicas")), integer(status.get("availableReplicas")),
            age(d, now), names, images, selector_string(section(d, "spec").get("selector"))]


REPLICASET_COLUMNS = (
    NAME, Column("Desired", "integer", "Number of desired pods."),
    Column("Current", "integer", "The most recently observed number of replicas."),
    Column("Ready", "integer", "The number of pods targeted by this ReplicaSet with a Ready "
                               "Condition."),
    AGE, CONTAINERS, IMAGES, SELECTOR,
)


def replicaset_cells(rs: Obj, now: float) -> Cells:
    status = section(rs, "status")
    names, images = containers_and_images(_template_spec(rs))
    return [name(rs), _replicas(rs), integer(status.get("replicas")),
            integer(status.get("readyReplicas")), age(rs, now), names, images,
            format_selector(section(rs, "spec").get("selector"))]


STATEFULSET_COLUMNS = (NAME, Column("Ready", description="Number of the pod with ready state"),
                       AGE, CONTAINERS, IMAGES)


def statefulset_cells(sts: Obj, now: float) -> Cells:
    names, images = containers_and_images(_template_spec(sts))
    ready = integer(section(sts, "status").get("readyReplicas"))
    return [name(sts), f"{ready}/{_replicas(sts)}", age(sts, now), names, images]


DAEMONSET_COLUMNS = (
    NAME, Column("Desired", "integer", "The number of nodes that should be running the daemon "
                                       "pod."),
    Column("Current", "integer", "The number of nodes running at least one daemon pod that "
                                 "should."),
    Column("Ready", "integer", "The number of nodes running a ready daemon pod."),
    Column("Up-to-date", "integer", "The number of nodes running the updated daemon pod."),
    Column("Available", "integer", "The number of nodes running an available daemon pod."),
    Column("Node Selector", description="The node labels the daemon pods must match."),
    AGE, CONTAINERS, IMAGES, SELECTOR,
)


def daemonset_cells(ds: Obj, now: float) -> Cells:
    status = section(ds, "status")
    names, images = containers_and_images(_template_spec(ds))
    return [name(ds), integer(status.get("desiredNumberScheduled")),
            integer(status.get("currentNumberScheduled")), integer(status.get("numberReady")),
            integer(status.get("updatedNumberScheduled")),
            integer(status.get("numberAvailable")),
            format_labels(_template_spec(ds).get("nodeSelector")), age(ds, now), names,
            images, format_selector(section(ds, "spec").get("selector"))]


JOB_COLUMNS = (
    NAME, Column("Status", description="Status of the job."),
    Column("Completions", description="The number of pods which reached phase Succeeded."),
    Column("Duration", description="Time required to complete the job."),
    AGE, CONTAINERS, IMAGES, SELECTOR,
)


def job_cells(job: Obj, now: float) -> Cells:
    spec, status = section(job, "spec"), section(job, "status")
    succeeded = integer(status.get("succeeded"))
    completions = spec.get("completions")
    if isinstance(completions, int):
        done = f"{succeeded}/{completions}"
    else:
        parallelism = integer(spec.get("parallelism"))
        done = (f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1")
    start = epoch(status["startTime"]) if isinstance(status.get("startTime"), str) else None
    end = (epoch(status["completionTime"]) if isinstance(status.get("completionTime"), str)
           else None)
    duration = "" if start is None else human_duration((end or now) - start)
    names, images = containers_and_images(_template_spec(job))
    return [name(job), job_status(job), done, duration, age(job, now), names, images,
            format_selector(spec.get("selector"))]


def job_status(job: Obj) -> str:
    def holds(kind: str) -> bool:
        for cond in section(job, "status").get("conditions") or []:
            if cond.get("type") == kind:
                return cond.get("status") == "True"
        return False

    if holds("Complete"):
        return "Complete"
    if holds("Failed"):
        return "Failed"
    if section(job, "metadata").get("deletionTimestamp"):
        return "Terminating"
    if holds("Suspended"):
        return "Suspended"
    if holds("FailureTarget"):
        return "FailureTarget"
    return "Running"


PRINTERS: dict[tuple[str, str], Printer] = {
    ("apps", "Deployment"): Printer(DEPLOYMENT_COLUMNS, deployment_cells),
    ("apps", "ReplicaSet"): Printer(REPLICASET_COLUMNS, replicaset_cells),
    ("apps", "StatefulSet"): Printer(STATEFULSET_COLUMNS, statefulset_cells),
    ("apps", "DaemonSet"): Printer(DAEMONSET_COLUMNS, daemonset_cells),
    ("batch", "Job"): Printer(JOB_COLUMNS, job_cells),
}
