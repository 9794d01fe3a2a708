"""Training Job failures end to end: a Job whose pods (restartPolicy Never) fail with a CUDA
OOM and an NCCL timeout, retried until backoffLimit; simcluster's kubelet faults and Job
controller, the real watcher, the Prefect server, the flow, the Slack fake over HTTP."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from gpuops.tasks.restarts.events import read_restart_events
from tests.helpers import wait_for
from tests.test_restart_diagnostics import (  # noqa: F401 - `cluster` is a fixture
    cluster,
    parents,
    run_flow,
    save_blocks,
    text_of,
)

pytestmark = pytest.mark.timeout(300)


def training_job(name: str, backoff_limit: int) -> dict:
    return {"metadata": {"name": name, "labels": {"gpuops.io/team": "research"}},
            "spec": {"backoffLimit": backoff_limit, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "command": ["torchrun", "--nproc-per-node=1", "finetune.py"],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}}}]}}}}


def test_a_failing_training_job_gets_one_thread_per_cause_and_its_end_in_them(
        cluster, slack_fake):  # noqa: F811 - the fixture
    sim, v1 = cluster
    batch = client.BatchV1Api(sim.api)
    blocks = save_blocks(sim, slack_fake, sim.name)
    started = datetime.now(UTC) - timedelta(minutes=1)
    v1.create_namespace({"metadata": {"name": "training"}})
    batch.create_namespaced_job("training", training_job("finetune", backoff_limit=2))
    wait_for(lambda: batch.read_namespaced_job("finetune", "training").spec.selector,
             timeout=30, message="the Job's selector")

    def failed_pods() -> int:
        return batch.read_namespaced_job("finetune", "training").status.failed or 0
    # The Job's first two pods run out of GPU memory, its third times out in NCCL.
    sim.fault("cuda-oom", "job/training/finetune", after_seconds=0.5)
    wait_for(lambda: failed_pods() >= 2, timeout=90, message="two pods failed")
    sim.admin("faults", {"kind": "recover", "target": "job/training/finetune",
                         "params": {"kind": "cuda-oom"}})
    sim.fault("nccl-timeout", "job/training/finetune", after_seconds=0.5)

    def job_failed() -> bool:
        conditions = batch.read_namespaced_job("finetune", "training").status.conditions
        return any(c.type == "Failed" and c.status == "True" for c in conditions or [])
    wait_for(job_failed, timeout=90, message="the Job failed after backoffLimit")
    assert failed_pods() == 3

    def events() -> list:
        return [e for e in asyncio.run(read_restart_events(
            sim.name, started, datetime.now(UTC) + timedelta(minutes=1)))
            if e.payload.get("namespace") == "training"]
    wait_for(lambda: len(events()) >= 4, timeout=60,
             message="three pod failures and the Job's failure delivered")
    found = events()
    pods = [e.payload for e in found if e.event == "gpuops.pod.restarted"]
    assert sorted(p["trigger"] for p in pods) == ["terminated"] * 3
    assert {p["workload"]["kind"] + "/" + p["workload"]["name"] for p in pods} == \
        {"Job/finetune"}, "the Job, not each pod, is the workload"
    assert all(p["state"]["terminated"]["exit_code"] in (1, 134) for p in pods)
    (job,) = [e for e in found if e.event == "gpuops.job.failed"]
    assert job.payload["reason"] == "BackoffLimitExceeded"

    counts = run_flow(blocks)
    assert counts.get("posted") == 3 and counts.get("job-failed") == 1

    top = [m for m in parents(slack_fake) if "Job/finetune" in m["text"]]
    by_cause = {cause: [m for m in top if f"`{cause}`" in text_of(m)]
                for cause in ("cuda-oom", "nccl-error")}
    assert [len(v) for v in by_cause.values()] == [1, 1], [m["text"] for m in top]
    assert len(top) == 2, "one parent per (Job, cause), none per pod"
    (oom,), (nccl,) = by_cause.values()
    assert "CUDA out of memory" in text_of(oom) and "the instance that ended" in text_of(oom)
    assert "2×" in text_of(oom)  # both pods that ran out of GPU memory
    assert "Watchdog caught collective operation timeout" in text_of(nccl)
    assert "134" in text_of(nccl)
    job_replies = [m for m in slack_fake.messages() if m.get("thread_ts") not in
                   (None, m["ts"]) and "Job failed" in (m.get("text") or "")]
    assert sorted(r["thread_ts"] for r in job_replies) == sorted([oom["ts"], nccl["ts"]])
    assert all("backoffLimit (2) reached after 3 failed pods" in r["text"]
               for r in job_replies)
    assert not any("Job failed" in (m.get("text") or "") for m in parents(slack_fake))
    assert "Restart #" not in json.dumps(slack_fake.messages())

    # Read again (a later run, a replayed event): nothing is posted twice.
    before = len(slack_fake.messages())
    assert run_flow(blocks).get("posted", 0) == 0
    assert len(slack_fake.messages()) == before


def test_a_job_past_its_deadline_with_no_failed_pod_gets_a_parent_of_its_own(
        cluster, slack_fake):  # noqa: F811 - the fixture
    """`activeDeadlineSeconds` stops a pod that was running fine: no pod failure opened a
    thread, so the Job's failure is a parent message itself (not lost waiting for one)."""
    sim, v1 = cluster
    batch = client.BatchV1Api(sim.api)
    blocks = save_blocks(sim, slack_fake, sim.name)
    job = training_job("eval-run", backoff_limit=2)
    job["spec"]["activeDeadlineSeconds"] = 30
    v1.create_namespace({"metadata": {"name": "evals"}})
    batch.create_namespaced_job("evals", job)

    def failed_reason() -> str:
        conditions = batch.read_namespaced_job("eval-run", "evals").status.conditions or []
        return next((c.reason for c in conditions if c.type == "Failed"), "")
    wait_for(lambda: failed_reason() == "DeadlineExceeded", timeout=90,
             message="the Job past its deadline")
    wait_for(lambda: run_flow(blocks).get("job-failed"), timeout=60, interval=1,
             message="the Job's failure reported")
    (parent,) = [m for m in parents(slack_fake) if "Job/eval-run" in m["text"]]
    assert parent["text"].startswith("Job failed: activeDeadlineSeconds (30 s) passed")
    assert text_of(parent).count("Job failed") >= 1
    assert not [m for m in slack_fake.messages() if m.get("thread_ts") not in
                (None, m["ts"])], "the pod the deadline stopped is not a failure of its own"


def test_the_jobs_end_comes_after_its_last_pods_failure_in_the_thread(prefect_server, sim,
                                                                      slack_fake):
    """The watcher sees the Job fail before it has captured the last pod's failure: the
    run holds the Job's failure back until the thread has the pods the Job counts, so the
    thread reads pod, pod, pod, "Job failed"."""
    import threading
    import uuid

    from gpuops.flows.restart_diagnostics import restart_diagnostics
    from gpuops.sensors.emitter import EventSender, build_event
    from gpuops.tasks.restarts.evidence import JobFailure
    from tests import restart_fixtures as fx
    from tests.test_restart_diagnostics import unique_cluster

    name = unique_cluster()
    blocks = save_blocks(sim, slack_fake, name)
    now = datetime.now(UTC)

    def pod_failed(n: int):
        ev = fx.job_pod_failed(fx.log_with(fx.CUDA_OOM_LINE), 1, instance=f"c{n}").model_copy(
            update={"cluster": name, "pod": f"finetune-{n}", "pod_uid": f"{name}-{n}",
                    "observed_at": now + timedelta(seconds=n)})
        return build_event(obj="pod", what="restarted", cluster=name, kind="Pod",
                           namespace=ev.namespace, name=ev.pod, identity=ev.identity,
                           payload=ev.model_dump(mode="json"))
    failure = JobFailure(cluster=name, namespace="ml", name="finetune-llama",
                         uid=f"job-{uuid.uuid4().hex[:6]}", reason="BackoffLimitExceeded",
                         failed_pods=3, backoff_limit=2, started_at=now - timedelta(minutes=1),
                         observed_at=now + timedelta(seconds=2))
    job_failed = build_event(obj="job", what="failed", cluster=name, kind="Job",
                             namespace="ml", name=failure.name, identity=failure.identity,
                             payload=failure.model_dump(mode="json"))
    EventSender().send([pod_failed(0), pod_failed(1), job_failed])
    wait_for(lambda: len(asyncio.run(read_restart_events(
        name, now - timedelta(minutes=1), datetime.now(UTC) + timedelta(minutes=1)))) >= 3,
        timeout=30, message="the first events stored")
    run = threading.Thread(target=lambda: asyncio.run(restart_diagnostics(
        **blocks, quiet_seconds=3.0)))
    run.start()
    try:
        wait_for(lambda: parents(slack_fake), timeout=60, message="the thread's parent")
        EventSender().send([pod_failed(2)])  # the last pod, captured after the Job's end
    finally:
        run.join(120)
    (parent,) = parents(slack_fake)
    thread = [m for m in slack_fake.messages() if m.get("thread_ts") == parent["ts"]
              and m["ts"] != parent["ts"]]
    assert [("Job failed" in m["text"]) for m in thread] == [False, True], \
        [m["text"] for m in thread]
    assert "finetune-2" in thread[0]["text"]
