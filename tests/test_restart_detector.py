"""What a pod update reveals (pure): restarts, and failures no restart will follow (a Job's
pod with restartPolicy Never), each once per container instance; not the kills that a
pod's deletion or eviction causes."""

from __future__ import annotations

from typing import Any

from gpuops.sensors.restart_detector import detect_restarts


def job_pod(*, phase: str = "Failed", exit_code: int = 1, reason: str = "Error",
            container_id: str = "containerd://3f9a1c2b7d4e5f60718293a4b5c6d7e8",
            policy: str = "Never", **meta: Any) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "reason": reason,
                  "startedAt": "2025-06-01T09:40:00Z", "finishedAt": "2025-06-01T10:00:00Z",
                  "containerID": container_id}
    return {"metadata": {"namespace": "ml", "name": "finetune-x7k2q", "uid": "pod-1", **meta,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "finetune", "uid": "job-1",
                                              "controller": True}]},
            "spec": {"restartPolicy": policy, "containers": [{"name": "trainer"}]},
            "status": {"phase": phase, "containerStatuses": [{
                "name": "trainer", "restartCount": 0, "state": {"terminated": terminated},
                "lastState": {}}]}}


def test_a_failed_container_of_a_never_restarting_pod_is_reported_from_its_state():
    (found,) = detect_restarts(job_pod(), {})
    assert (found.trigger, found.container, found.instance) == ("terminated", "trainer",
                                                                 "3f9a1c2b7d4e5f60")
    assert found.log_source == "current"  # no restart followed: its log is still there
    assert found.identity == "pod-1/trainer/0/terminated-3f9a1c2b7d4e5f60"


def test_it_is_reported_once_per_container_instance():
    found = detect_restarts(job_pod(), {})
    reported = {r.key: 1 for r in found}
    assert detect_restarts(job_pod(), reported) == []
    again = detect_restarts(job_pod(container_id="containerd://0a1b2c3d4e5f"), reported)
    assert [r.instance for r in again] == ["0a1b2c3d4e5f"]


def test_without_a_container_id_the_finish_time_tells_instances_apart():
    (found,) = detect_restarts(job_pod(container_id=""), {})
    assert found.instance == "2025-06-01T10:00:00Z"


def test_a_failure_is_seen_while_the_pod_is_still_running_with_restart_policy_never():
    (found,) = detect_restarts(job_pod(phase="Running"), {})
    assert found.trigger == "terminated"


def test_success_and_a_failure_that_will_be_restarted_are_not_reported():
    assert detect_restarts(job_pod(exit_code=0, reason="Completed", phase="Succeeded"), {}) \
        == []
    # OnFailure: the kubelet restarts it; the restart is reported when it shows.
    assert detect_restarts(job_pod(phase="Running", policy="OnFailure"), {}) == []


def test_an_oom_kill_of_a_never_restarting_pod_is_reported():
    (found,) = detect_restarts(job_pod(exit_code=137, reason="OOMKilled"), {})
    assert found.trigger == "terminated"


def test_a_container_killed_because_its_pod_was_deleted_is_not_a_failure():
    """A Job giving up, a scale-down, a delete: the container exits 137/143 after the
    request (deletionTimestamp minus the grace period)."""
    pod = job_pod(exit_code=143, deletionTimestamp="2025-06-01T10:00:20Z",
                  deletionGracePeriodSeconds=30)
    assert detect_restarts(pod, {}) == []
    # One that failed before anyone asked the pod to go is still its own failure.
    earlier = job_pod(deletionTimestamp="2025-06-01T10:05:00Z", deletionGracePeriodSeconds=30)
    assert [r.trigger for r in detect_restarts(earlier, {})] == ["terminated"]


def test_an_evicted_pod_is_one_pod_failure_not_a_container_failure_too():
    pod = job_pod(exit_code=137)
    pod["status"]["reason"] = "Evicted"
    assert [(r.trigger, r.reason) for r in detect_restarts(pod, {})] == [
        ("pod-failed", "Evicted")]


def test_a_sidecar_stopped_at_the_end_of_its_pod_is_not_a_failure():
    pod = job_pod(phase="Failed")
    pod["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
    pod["status"]["initContainerStatuses"] = [{
        "name": "proxy", "restartCount": 0, "state": {"terminated": {
            "exitCode": 143, "reason": "Error", "finishedAt": "2025-06-01T10:00:01Z"}}}]
    assert [r.container for r in detect_restarts(pod, {})] == ["trainer"]
