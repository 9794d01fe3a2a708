"""Workload controllers as a client sees them: Deployments, ReplicaSets, StatefulSets, Jobs,
garbage collection and PodDisruptionBudget status, all through the official client.

The cluster here has no nodes, so no scheduler or kubelet touches the pods: the tests play
the kubelet's part through the pod `status` subresource (Running and Ready, Succeeded,
Failed) with the cluster's virtual time. That keeps every step of a rollout in the test's
hands; `test_sim_workloads_e2e.py` runs the same controllers on real simulated nodes.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


# --- helpers -----------------------------------------------------------------------------------

@pytest.fixture
def ns(sim) -> str:
    name = f"wl-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(sim.api).create_namespace({"metadata": {"name": name}})
    return name


class FakeKubelet:
    """The kubelet's writes, through the API, for pods that no node runs."""

    def __init__(self, sim, namespace: str) -> None:
        self.sim = sim
        self.ns = namespace
        self.v1 = client.CoreV1Api(sim.api)

    def now(self) -> str:
        stamp = datetime.fromisoformat(self.sim.admin("clock")["now"])
        return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")

    def run(self, name: str, *, ready: bool = True) -> None:
        now = self.now()
        self.v1.patch_namespaced_pod_status(name, self.ns, {"status": {
            "phase": "Running", "startTime": now,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "lastTransitionTime": now}]}})

    def finish(self, name: str, phase: str) -> None:
        self.v1.patch_namespaced_pod_status(name, self.ns, {"status": {
            "phase": phase, "conditions": [{"type": "Ready", "status": "False",
                                            "lastTransitionTime": self.now()}]}})

    def pending(self, selector: str) -> list[client.V1Pod]:
        return [p for p in self.live(selector) if p.status.phase == "Pending"]

    def live(self, selector: str) -> list[client.V1Pod]:
        pods = self.v1.list_namespaced_pod(self.ns, label_selector=selector).items
        return [p for p in pods if p.metadata.deletion_timestamp is None]

    def run_pending(self, selector: str) -> int:
        pods = self.pending(selector)
        for pod in pods:
            self.run(pod.metadata.name)
        return len(pods)


class PodCensus:
    """Watches pods and keeps the most live (not terminating) and fewest Ready seen at once."""

    def __init__(self, sim, namespace: str, selector: str) -> None:
        self.live: dict[str, bool] = {}
        self.max_live = 0
        self.min_ready: int | None = None
        self._watch = watch.Watch()
        self._ready = threading.Event()
        v1 = client.CoreV1Api(sim.api)
        listed = v1.list_namespaced_pod(namespace, label_selector=selector)
        for pod in listed.items:
            self._see("ADDED", pod)
        rv = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(v1, namespace, selector, rv),
                                        daemon=True)
        self._thread.start()

    def _run(self, v1, namespace: str, selector: str, rv: str) -> None:
        try:
            for event in self._watch.stream(v1.list_namespaced_pod, namespace,
                                            label_selector=selector, resource_version=rv,
                                            timeout_seconds=100):
                self._see(event["type"], event["object"])
        except ProtocolError:
            return  # the cluster stopped at the end of the test

    def _see(self, event_type: str, pod: client.V1Pod) -> None:
        name = pod.metadata.name
        if event_type == "DELETED" or pod.metadata.deletion_timestamp:
            self.live.pop(name, None)
        else:
            self.live[name] = any(c.type == "Ready" and c.status == "True"
                                  for c in pod.status.conditions or ())
        self.max_live = max(self.max_live, len(self.live))
        ready = sum(self.live.values())
        if self._ready.is_set():
            self.min_ready = ready if self.min_ready is None else min(self.min_ready, ready)

    def count_ready_from_now(self) -> None:
        self._ready.set()

    def stop(self) -> None:
        self._watch.stop()


def deployment(name: str, image: str = "nginx:1.27", replicas: int = 3, **spec) -> dict:
    return {"metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "main", "image": image}]}},
                     **spec}}


def job(name: str, **spec) -> dict:
    return {"metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox:1.36", "command": ["true"]}]}}, **spec}}


def condition(obj, ctype: str):
    return next((c for c in obj.status.conditions or () if c.type == ctype), None)


def replicasets_of(apps, ns: str, name: str) -> list[client.V1ReplicaSet]:
    return [rs for rs in apps.list_namespaced_replica_set(ns, label_selector=f"app={name}").items]


def rolled_out(apps, ns: str, name: str) -> bool:
    """What `kubectl rollout status` waits for."""
    d = apps.read_namespaced_deployment(name, ns)
    want = d.spec.replicas
    return (d.status.observed_generation == d.metadata.generation
            and d.status.updated_replicas == want and d.status.replicas == want
            and d.status.available_replicas == want)


def events_for(sim, ns: str, name: str) -> list[tuple[str, str]]:
    items = client.CoreV1Api(sim.api).list_namespaced_event(
        ns, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in items]


# --- Deployments and ReplicaSets ---------------------------------------------------------------

def test_a_deployment_creates_one_replicaset_and_its_pods_owned_by_controller_refs(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    d = apps.create_namespaced_deployment(ns, deployment("web"))

    rs = wait_for(lambda: replicasets_of(apps, ns, "web"), message="a ReplicaSet")[0]
    template_hash = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{template_hash}"
    assert rs.spec.selector.match_labels == {"app": "web", "pod-template-hash": template_hash}
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    owner = rs.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller, owner.block_owner_deletion) == (
        "Deployment", "web", d.metadata.uid, True, True)

    pods = wait_for(lambda: len(kubelet.live("app=web")) == 3 and kubelet.live("app=web"),
                    message="3 pods")
    for pod in pods:
        assert pod.metadata.name.startswith(f"web-{template_hash}-")
        assert pod.metadata.labels == {"app": "web", "pod-template-hash": template_hash}
        ref = pod.metadata.owner_references[0]
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("ReplicaSet", rs.metadata.name,
                                                                 rs.metadata.uid, True)
        assert pod.spec.restart_policy == "Always"  # created through admission

    progressing = condition(apps.read_namespaced_deployment("web", ns), "Progressing")
    assert progressing.status == "True"
    assert progressing.reason in ("NewReplicaSetCreated", "ReplicaSetUpdated")
    kubelet.run_pending("app=web")

    def complete():
        d = apps.read_namespaced_deployment("web", ns)
        return (d.status.available_replicas == 3 and condition(d, "Progressing").reason
                == "NewReplicaSetAvailable") and d
    d = wait_for(complete, message="the rollout to complete")
    assert (d.status.replicas, d.status.updated_replicas, d.status.ready_replicas) == (3, 3, 3)
    assert d.status.observed_generation == d.metadata.generation
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    available = condition(d, "Available")
    assert (available.status, available.reason) == ("True", "MinimumReplicasAvailable")
    assert condition(d, "Progressing").message == (
        f'ReplicaSet "{rs.metadata.name}" has successfully progressed.')
    rs = apps.read_namespaced_replica_set(rs.metadata.name, ns)
    assert (rs.status.replicas, rs.status.ready_replicas, rs.status.available_replicas,
            rs.status.fully_labeled_replicas) == (3, 3, 3, 3)
    assert ("ScalingReplicaSet", f"Scaled up replica set {rs.metadata.name} from 0 to 3") in (
        events_for(sim, ns, "web"))


def test_a_rolling_update_with_max_surge_1_never_runs_more_than_replicas_plus_one(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment(
        "api", replicas=3, strategy={"type": "RollingUpdate", "rollingUpdate": {
            "maxSurge": 1, "maxUnavailable": 0}}))
    wait_for(lambda: kubelet.run_pending("app=api") == 0 and len(
        [p for p in kubelet.live("app=api") if p.status.phase == "Running"]) == 3,
        message="3 running pods")
    wait_for(lambda: apps.read_namespaced_deployment("api", ns).status.available_replicas == 3)
    old_hash = kubelet.live("app=api")[0].metadata.labels["pod-template-hash"]

    census = PodCensus(sim, ns, "app=api")
    census.count_ready_from_now()
    apps.patch_namespaced_deployment("api", ns, {"spec": {"template": {"spec": {
        "containers": [{"name": "main", "image": "nginx:1.28"}]}}}})

    def on_new_template() -> bool:
        kubelet.run_pending("app=api")
        d = apps.read_namespaced_deployment("api", ns)
        hashes = {p.metadata.labels["pod-template-hash"] for p in kubelet.live("app=api")}
        return (rolled_out(apps, ns, d.metadata.name) and old_hash not in hashes and len(hashes) == 1)
    wait_for(on_new_template, timeout=30, message="every pod on the new template")
    census.stop()

    assert census.max_live <= 4, f"saw {census.max_live} live pods with maxSurge=1"
    assert census.max_live == 4
    assert census.min_ready >= 3, "maxUnavailable=0 let Ready pods drop below 3"
    rss = {rs.metadata.labels["pod-template-hash"]: rs for rs in replicasets_of(apps, ns, "api")}
    assert rss[old_hash].spec.replicas == 0
    new_rs = next(rs for h, rs in rss.items() if h != old_hash)
    assert new_rs.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    d = apps.read_namespaced_deployment("api", ns)
    assert d.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    assert condition(d, "Progressing").reason == "NewReplicaSetAvailable"


def test_scaling_through_the_scale_subresource_deletes_not_ready_pods_first(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment("scaled", replicas=2))
    wait_for(lambda: len(kubelet.live("app=scaled")) == 2)
    kubelet.run_pending("app=scaled")
    ready = {p.metadata.name for p in kubelet.live("app=scaled")}

    scale = apps.patch_namespaced_deployment_scale("scaled", ns, {"spec": {"replicas": 5}})
    assert scale.spec.replicas == 5
    wait_for(lambda: len(kubelet.live("app=scaled")) == 5, message="5 pods")
    assert apps.read_namespaced_deployment_scale("scaled", ns).spec.replicas == 5

    apps.patch_namespaced_deployment_scale("scaled", ns, {"spec": {"replicas": 2}})
    wait_for(lambda: len(kubelet.live("app=scaled")) == 2, message="2 pods")
    assert {p.metadata.name for p in kubelet.live("app=scaled")} == ready
    rs = replicasets_of(apps, ns, "scaled")
    assert len(rs) == 1 and rs[0].spec.replicas == 2
    assert rs[0].metadata.annotations["deployment.kubernetes.io/desired-replicas"] == "2"


def test_recreate_removes_every_old_pod_before_creating_new_ones(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment("batch", replicas=2,
                                                     strategy={"type": "Recreate"}))
    wait_for(lambda: kubelet.run_pending("app=batch") == 0 and len(
        kubelet.live("app=batch")) == 2)
    census = PodCensus(sim, ns, "app=batch")
    apps.patch_namespaced_deployment("batch", ns, {"spec": {"template": {"metadata": {
        "annotations": {"rev": "2"}}}}})
    wait_for(lambda: len(replicasets_of(apps, ns, "batch")) == 2
             and len(kubelet.live("app=batch")) == 2
             and all(p.metadata.annotations.get("rev") == "2"
                     for p in kubelet.live("app=batch")), message="the new pods")
    census.stop()
    assert census.max_live == 2


def test_a_template_change_while_paused_waits_for_resume(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment("held", replicas=1))
    wait_for(lambda: len(kubelet.live("app=held")) == 1)
    apps.patch_namespaced_deployment("held", ns, {"spec": {"paused": True}})
    apps.patch_namespaced_deployment("held", ns, {"spec": {"template": {"metadata": {
        "annotations": {"rev": "2"}}}}})
    d = wait_for(lambda: (d := apps.read_namespaced_deployment("held", ns)) and condition(
        d, "Progressing") and condition(d, "Progressing").reason == "DeploymentPaused" and d)
    assert condition(d, "Progressing").status == "Unknown"
    assert len(replicasets_of(apps, ns, "held")) == 1
    apps.patch_namespaced_deployment("held", ns, {"spec": {"paused": False}})
    wait_for(lambda: len(replicasets_of(apps, ns, "held")) == 2, message="the new ReplicaSet")


def test_no_progress_for_progress_deadline_seconds_is_progress_deadline_exceeded(sim, ns):
    apps = client.AppsV1Api(sim.api)
    apps.create_namespaced_deployment(ns, deployment("stuck", replicas=1,
                                                     progressDeadlineSeconds=60))
    wait_for(lambda: (d := apps.read_namespaced_deployment("stuck", ns)).status.replicas == 1
             and condition(d, "Progressing").reason == "ReplicaSetUpdated",
             message="the pod created and the rollout waiting for it")
    sim.advance(90)

    def timed_out():
        cond = condition(apps.read_namespaced_deployment("stuck", ns), "Progressing")
        return cond is not None and cond.reason == "ProgressDeadlineExceeded" and cond
    cond = wait_for(timed_out, message="ProgressDeadlineExceeded")
    assert cond.status == "False"
    assert cond.message.endswith("has timed out progressing.")
    available = condition(apps.read_namespaced_deployment("stuck", ns), "Available")
    assert (available.status, available.reason) == ("False", "MinimumReplicasUnavailable")


def test_min_ready_seconds_delays_availability_on_the_virtual_clock(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment("slow", replicas=1, minReadySeconds=300))
    wait_for(lambda: kubelet.run_pending("app=slow") == 1)
    d = wait_for(lambda: (d := apps.read_namespaced_deployment("slow", ns)).status.ready_replicas
                 == 1 and d)
    assert not d.status.available_replicas
    sim.advance(301)
    wait_for(lambda: apps.read_namespaced_deployment("slow", ns).status.available_replicas == 1,
             message="availability after minReadySeconds")


def test_old_replicasets_beyond_revision_history_limit_are_deleted(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment("hist", replicas=1,
                                                     revisionHistoryLimit=1))
    for rev in range(2, 5):
        wait_for(lambda: kubelet.run_pending("app=hist") == 0 and rolled_out(apps, ns, "hist"),
                 message=f"revision {rev - 1} rolled out")
        apps.patch_namespaced_deployment("hist", ns, {"spec": {"template": {"metadata": {
            "annotations": {"rev": str(rev)}}}}})
    wait_for(lambda: kubelet.run_pending("app=hist") == 0 and sorted(
        int(rs.metadata.annotations["deployment.kubernetes.io/revision"])
        for rs in replicasets_of(apps, ns, "hist")) == [3, 4],
        message="only the current and one old revision")


def test_a_replicaset_adopts_matching_orphans_and_deletes_the_surplus(sim, ns):
    apps, v1 = client.AppsV1Api(sim.api), client.CoreV1Api(sim.api)
    for i in range(3):
        v1.create_namespaced_pod(ns, {"metadata": {"name": f"stray-{i}", "labels": {
            "app": "cache"}}, "spec": {"containers": [{"name": "main", "image": "redis:7"}]}})
    rs = apps.create_namespaced_replica_set(ns, {
        "metadata": {"name": "cache"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "cache"}},
                 "template": {"metadata": {"labels": {"app": "cache"}},
                              "spec": {"containers": [{"name": "main", "image": "redis:7"}]}}}})
    pods = wait_for(lambda: len(p := v1.list_namespaced_pod(ns).items) == 2 and p,
                    message="the surplus orphan deleted")
    for pod in pods:
        assert pod.metadata.name.startswith("stray-")
        assert pod.metadata.owner_references[0].uid == rs.metadata.uid
    wait_for(lambda: apps.read_namespaced_replica_set("cache", ns).status.replicas == 2)


# --- garbage collection ------------------------------------------------------------------------

def test_deleting_a_deployment_garbage_collects_its_replicasets_and_pods(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment("gone", replicas=2))
    wait_for(lambda: len(kubelet.live("app=gone")) == 2)
    apps.delete_namespaced_deployment("gone", ns)
    wait_for(lambda: not replicasets_of(apps, ns, "gone")
             and not client.CoreV1Api(sim.api).list_namespaced_pod(ns).items,
             message="ReplicaSet and pods collected")


def test_foreground_deletion_keeps_the_owner_until_its_dependents_are_gone(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment("fg", replicas=2))
    wait_for(lambda: len(kubelet.live("app=fg")) == 2)
    rv = apps.list_namespaced_deployment(ns).metadata.resource_version
    apps.delete_namespaced_deployment("fg", ns, propagation_policy="Foreground")
    seen, pods_when_deleted = [], None
    stream = watch.Watch()
    for event in stream.stream(apps.list_namespaced_deployment, ns, resource_version=rv,
                               timeout_seconds=10):
        d = event["object"]
        seen.append((event["type"], bool(d.metadata.deletion_timestamp),
                     "foregroundDeletion" in (d.metadata.finalizers or ())))
        if event["type"] == "DELETED":
            pods_when_deleted = client.CoreV1Api(sim.api).list_namespaced_pod(ns).items
            stream.stop()
    assert ("MODIFIED", True, True) in seen, seen
    assert seen[-1][0] == "DELETED"
    assert pods_when_deleted == [] and not replicasets_of(apps, ns, "fg")


def test_deleting_a_job_orphans_its_pods_by_default_and_background_removes_them(sim, ns):
    batch, v1 = client.BatchV1Api(sim.api), client.CoreV1Api(sim.api)
    batch.create_namespaced_job(ns, job("keep", parallelism=2, completions=2))
    batch.create_namespaced_job(ns, job("drop", parallelism=2, completions=2))
    wait_for(lambda: len(v1.list_namespaced_pod(ns).items) == 4)

    batch.delete_namespaced_job("keep", ns)  # batch/v1 default: Orphan
    batch.delete_namespaced_job("drop", ns, propagation_policy="Background")
    wait_for(lambda: {p.metadata.labels["job-name"] for p in v1.list_namespaced_pod(
        ns).items} == {"keep"} and not batch.list_namespaced_job(ns).items,
        message="orphaned pods kept, background ones deleted")
    for pod in v1.list_namespaced_pod(ns).items:
        assert not pod.metadata.owner_references


# --- StatefulSets ------------------------------------------------------------------------------

def test_a_statefulset_creates_ordinals_in_order_and_scales_down_from_the_top(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_stateful_set(ns, {
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "main", "image": "postgres:16"}]}}}})

    def names() -> list[str]:
        return sorted(p.metadata.name for p in kubelet.live("app=db"))

    for i in range(3):
        expected = [f"db-{j}" for j in range(i + 1)]
        wait_for(lambda expected=expected: names() == expected,
                 message=f"db-0..db-{i} and no more")
        pod = client.CoreV1Api(sim.api).read_namespaced_pod(f"db-{i}", ns)
        assert pod.metadata.labels["statefulset.kubernetes.io/pod-name"] == f"db-{i}"
        assert pod.metadata.labels["apps.kubernetes.io/pod-index"] == str(i)
        assert pod.spec.hostname == f"db-{i}" and pod.spec.subdomain == "db"
        kubelet.run(f"db-{i}")
    sts = wait_for(lambda: (s := apps.read_namespaced_stateful_set("db", ns)).status.ready_replicas
                   == 3 and s)
    assert sts.status.current_revision == sts.status.update_revision
    assert sts.status.update_revision.startswith("db-")
    assert {p.metadata.labels["controller-revision-hash"] for p in kubelet.live("app=db")} == {
        sts.status.update_revision}

    apps.patch_namespaced_stateful_set_scale("db", ns, {"spec": {"replicas": 1}})
    wait_for(lambda: names() == ["db-0"], message="db-2 then db-1 removed")


def test_a_statefulset_rolling_update_replaces_pods_from_the_highest_ordinal(sim, ns):
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_stateful_set(ns, {
        "metadata": {"name": "kv"},
        "spec": {"replicas": 2, "serviceName": "kv", "selector": {"matchLabels": {"app": "kv"}},
                 "template": {"metadata": {"labels": {"app": "kv"}},
                              "spec": {"containers": [{"name": "main", "image": "etcd:3.5"}]}}}})
    wait_for(lambda: kubelet.run_pending("app=kv") == 0
             and apps.read_namespaced_stateful_set("kv", ns).status.ready_replicas == 2)
    apps.patch_namespaced_stateful_set("kv", ns, {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "etcd:3.6"}]}}}})
    first = wait_for(lambda: [p.metadata.name for p in kubelet.live("app=kv")
                              if p.spec.containers[0].image == "etcd:3.6"], message="one updated")
    assert first == ["kv-1"]
    wait_for(lambda: kubelet.run_pending("app=kv") == 0 and all(
        p.spec.containers[0].image == "etcd:3.6" for p in kubelet.live("app=kv"))
        and len(kubelet.live("app=kv")) == 2, message="both updated")
    sts = wait_for(lambda: kubelet.run_pending("app=kv") == 0 and (
        s := apps.read_namespaced_stateful_set("kv", ns)).status.updated_replicas == 2
        and s.status.current_revision == s.status.update_revision and s)
    assert sts.status.current_replicas == 2


# --- Jobs --------------------------------------------------------------------------------------

def test_a_job_runs_parallelism_pods_until_completions_succeed_and_completes(sim, ns):
    batch, kubelet = client.BatchV1Api(sim.api), FakeKubelet(sim, ns)
    created = batch.create_namespaced_job(ns, job("train", parallelism=2, completions=3))
    wait_for(lambda: len(kubelet.live("job-name=train")) == 2, message="2 pods")
    pod = kubelet.live("job-name=train")[0]
    assert pod.metadata.labels["batch.kubernetes.io/controller-uid"] == created.metadata.uid
    assert pod.metadata.labels["controller-uid"] == created.metadata.uid
    assert pod.metadata.labels["batch.kubernetes.io/job-name"] == "train"
    assert pod.metadata.owner_references[0].kind == "Job"
    assert pod.metadata.name.startswith("train-")

    finished: set[str] = set()

    def finish_running():
        for p in kubelet.live("job-name=train"):
            if p.status.phase == "Pending" and p.metadata.name not in finished:
                assert len([q for q in kubelet.live("job-name=train")
                            if q.status.phase == "Pending"]) <= 2
                kubelet.finish(p.metadata.name, "Succeeded")
                finished.add(p.metadata.name)
        return batch.read_namespaced_job("train", ns).status.succeeded == 3

    wait_for(finish_running, message="3 successes")
    j = wait_for(lambda: (j := batch.read_namespaced_job("train", ns)) and condition(
        j, "Complete") and j, message="the Complete condition")
    assert len(finished) == 3
    assert (condition(j, "Complete").status, condition(j, "Complete").reason) == (
        "True", "CompletionsReached")
    assert condition(j, "SuccessCriteriaMet").status == "True"
    assert j.status.completion_time is not None and j.status.start_time is not None
    assert not j.status.active and not j.status.failed
    assert j.spec.selector.match_labels == {
        "batch.kubernetes.io/controller-uid": created.metadata.uid}
    assert ("Completed", "Job completed") in events_for(sim, ns, "train")


def test_failing_pods_past_backoff_limit_fail_the_job_after_back_off_delays(sim, ns):
    batch, kubelet = client.BatchV1Api(sim.api), FakeKubelet(sim, ns)
    batch.create_namespaced_job(ns, job("flaky", backoffLimit=1))
    first = wait_for(lambda: kubelet.live("job-name=flaky"), message="the first pod")[0]
    kubelet.finish(first.metadata.name, "Failed")
    wait_for(lambda: batch.read_namespaced_job("flaky", ns).status.failed == 1)
    # The replacement waits out the 10 s back-off of virtual time.
    with pytest.raises(AssertionError):
        wait_for(lambda: [p for p in kubelet.live("job-name=flaky") if p.status.phase
                          == "Pending"], timeout=1)
    sim.advance(11)
    second = wait_for(lambda: [p for p in kubelet.live("job-name=flaky")
                               if p.status.phase == "Pending"], message="the replacement")[0]
    kubelet.finish(second.metadata.name, "Failed")
    j = wait_for(lambda: (j := batch.read_namespaced_job("flaky", ns)) and condition(
        j, "Failed") and j, message="the Failed condition")
    failed = condition(j, "Failed")
    assert (failed.status, failed.reason, failed.message) == (
        "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert condition(j, "FailureTarget").reason == "BackoffLimitExceeded"
    assert j.status.failed == 2 and not j.status.active and j.status.completion_time is None
    assert ("BackoffLimitExceeded", "Job has reached the specified backoff limit") in (
        events_for(sim, ns, "flaky"))


def test_active_deadline_seconds_fails_the_job_and_removes_its_pods(sim, ns):
    batch, kubelet = client.BatchV1Api(sim.api), FakeKubelet(sim, ns)
    batch.create_namespaced_job(ns, job("slow", activeDeadlineSeconds=120))
    wait_for(lambda: kubelet.live("job-name=slow"))
    sim.advance(121)
    j = wait_for(lambda: (j := batch.read_namespaced_job("slow", ns)) and condition(
        j, "Failed") and j, message="DeadlineExceeded")
    assert condition(j, "Failed").reason == "DeadlineExceeded"
    assert not kubelet.live("job-name=slow")


def test_an_indexed_job_runs_one_pod_per_completion_index(sim, ns):
    batch, kubelet = client.BatchV1Api(sim.api), FakeKubelet(sim, ns)
    batch.create_namespaced_job(ns, job("shards", completions=3, parallelism=3,
                                        completionMode="Indexed"))
    pods = wait_for(lambda: len(p := kubelet.live("job-name=shards")) == 3 and p)
    key = "batch.kubernetes.io/job-completion-index"
    by_index = {p.metadata.annotations[key]: p for p in pods}
    assert sorted(by_index) == ["0", "1", "2"]
    for index, pod in by_index.items():
        assert pod.metadata.labels[key] == index
        assert pod.metadata.name.startswith(f"shards-{index}-")
        assert pod.spec.hostname == f"shards-{index}"
        assert any(e.name == "JOB_COMPLETION_INDEX" for e in pod.spec.containers[0].env)
    kubelet.finish(by_index["0"].metadata.name, "Succeeded")
    kubelet.finish(by_index["2"].metadata.name, "Succeeded")
    wait_for(lambda: batch.read_namespaced_job("shards", ns).status.completed_indexes == "0,2")
    kubelet.finish(by_index["1"].metadata.name, "Succeeded")
    j = wait_for(lambda: (j := batch.read_namespaced_job("shards", ns)) and condition(
        j, "Complete") and j)
    assert j.status.completed_indexes == "0-2" and j.status.succeeded == 3


# --- PodDisruptionBudgets ----------------------------------------------------------------------

def _four_pods_three_ready(sim, ns, name: str) -> None:
    apps, kubelet = client.AppsV1Api(sim.api), FakeKubelet(sim, ns)
    apps.create_namespaced_deployment(ns, deployment(name, replicas=4))
    pods = wait_for(lambda: len(p := kubelet.live(f"app={name}")) == 4 and p)
    for pod in pods[:3]:
        kubelet.run(pod.metadata.name)


def _pdb_status(policy, ns: str, name: str, expected_healthy: int):
    return wait_for(lambda: (p := policy.read_namespaced_pod_disruption_budget(name, ns)).status
                    and p.status.current_healthy == expected_healthy and p.status,
                    message=f"PDB {name} status")


def test_pdb_status_for_an_integer_min_available(sim, ns):
    policy = client.PolicyV1Api(sim.api)
    _four_pods_three_ready(sim, ns, "inf")
    pdb = policy.create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "inf-pdb"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "inf"}}}})
    status = _pdb_status(policy, ns, "inf-pdb", 3)
    assert (status.expected_pods, status.current_healthy, status.desired_healthy,
            status.disruptions_allowed) == (4, 3, 2, 1)
    assert status.observed_generation == pdb.metadata.generation
    cond = next(c for c in status.conditions if c.type == "DisruptionAllowed")
    assert (cond.status, cond.reason) == ("True", "SufficientPods")


@pytest.mark.parametrize("spec,desired,allowed,reason", [
    ({"maxUnavailable": "30%"}, 2, 1, "SufficientPods"),  # 30% of 4 rounds up to 2
    ({"minAvailable": "60%"}, 3, 0, "InsufficientPods"),  # 60% of 4 rounds up to 3
    ({"maxUnavailable": 1}, 3, 0, "InsufficientPods"),
])
def test_pdb_status_for_percent_and_max_unavailable_counts_the_deployment_scale(
        sim, ns, spec, desired, allowed, reason):
    policy = client.PolicyV1Api(sim.api)
    _four_pods_three_ready(sim, ns, "svc")
    policy.create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "svc-pdb"},
        "spec": {**spec, "selector": {"matchLabels": {"app": "svc"}}}})
    status = _pdb_status(policy, ns, "svc-pdb", 3)
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == (
        4, desired, allowed)
    cond = next(c for c in status.conditions if c.type == "DisruptionAllowed")
    assert cond.reason == reason and cond.status == ("True" if allowed else "False")


def test_pdb_status_follows_pods_becoming_ready(sim, ns):
    policy, kubelet = client.PolicyV1Api(sim.api), FakeKubelet(sim, ns)
    _four_pods_three_ready(sim, ns, "grow")
    policy.create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "grow-pdb"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "grow"}}}})
    assert _pdb_status(policy, ns, "grow-pdb", 3).disruptions_allowed == 0
    kubelet.run_pending("app=grow")
    assert _pdb_status(policy, ns, "grow-pdb", 4).disruptions_allowed == 1


# --- the pure arithmetic behind them (plain functions, no cluster) -----------------------------

def _pod(name: str, *, ready: bool, labels: dict | None = None, ns: str = "default",
         deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": ns, "labels": labels or {"app": "a"}, "uid": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def _pdb(**spec) -> dict:
    return {"metadata": {"name": "b", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, **spec}}


@pytest.mark.parametrize("spec,scale,expected", [
    ({"minAvailable": 2}, None, (4, 2, 2, 0)),  # int: expected = covered pods
    ({"minAvailable": "50%"}, 4, (4, 2, 2, 0)),
    ({"minAvailable": "30%"}, 4, (4, 2, 2, 0)),  # 1.2 rounds up to 2
    ({"maxUnavailable": "30%"}, 4, (4, 2, 2, 0)),  # unavailable 1.2 -> 2, desired 2
    ({"maxUnavailable": 1}, 3, (3, 2, 2, 0)),
    ({"maxUnavailable": 0}, None, (4, 2, 4, 0)),  # no scale given: the covered pods
])
def test_pdb_budget_counts_ready_covered_pods_against_the_rounded_budget(spec, scale, expected):
    from gpuops.simcluster.core.pdb import pdb_budget

    pods = [_pod("a1", ready=True), _pod("a2", ready=True), _pod("a3", ready=False),
            _pod("a4", ready=True, deleting=True), _pod("b1", ready=True, labels={"app": "b"}),
            _pod("a5", ready=True, ns="other")]
    budget = pdb_budget(_pdb(**spec), pods, expected_scale=scale)
    assert (budget["expectedPods"], budget["currentHealthy"], budget["desiredHealthy"],
            budget["disruptionsAllowed"]) == expected


def test_pdb_budget_allows_what_exceeds_the_desired_and_holds_recent_evictions():
    from gpuops.simcluster.core.pdb import pdb_budget

    pods = [_pod(f"a{i}", ready=True) for i in range(4)]
    assert pdb_budget(_pdb(minAvailable=2), pods)["disruptionsAllowed"] == 2
    evicted = {**_pdb(minAvailable=2), "status": {"disruptedPods": {
        "a0": "2026-01-01T00:00:00Z"}}}
    assert pdb_budget(evicted, pods)["currentHealthy"] == 3
    later = 1767225600.0 + 121  # 2026-01-01 plus the 2-minute deletion timeout
    assert pdb_budget(evicted, pods, now=later)["currentHealthy"] == 4
    assert pdb_budget({"metadata": {"name": "b", "namespace": "default"}, "spec": {
        "minAvailable": 1}}, pods)["expectedPods"] == 0  # no selector selects nothing


@pytest.mark.parametrize("surge,unavailable,replicas,expected", [
    ("25%", "25%", 10, (3, 2)),  # surge rounds up, unavailability down
    (0, 0, 3, (0, 1)),  # both zero: one may be unavailable, so the rollout can move
    (1, 0, 3, (1, 0)),
    ("50%", "50%", 1, (1, 0)),
])
def test_rolling_update_fenceposts_round_as_kube_does(surge, unavailable, replicas, expected):
    from gpuops.simcluster.controllers.rollout import resolve_fenceposts

    d = {"spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate", "rollingUpdate": {
        "maxSurge": surge, "maxUnavailable": unavailable}}}}
    assert resolve_fenceposts(d) == expected


def test_the_pod_template_hash_is_deterministic_and_safe_encoded():
    from gpuops.simcluster.controllers.rollout import pod_template_hash

    template = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [
        {"name": "m", "image": "x:1"}]}}
    first = pod_template_hash(template)
    assert first == pod_template_hash({"spec": template["spec"], "metadata": template[
        "metadata"]})
    assert first != pod_template_hash(template, 1)
    assert set(first) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_completed_indexes_use_the_range_notation():
    from gpuops.simcluster.controllers.job import format_indexes, parse_indexes

    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
