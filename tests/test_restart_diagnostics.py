"""Restart diagnostics end to end: faults injected in simcluster, the real watcher, the real
Prefect server and the flow, the Slack fake over HTTP."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.flows.restart_diagnostics import restart_diagnostics
from gpuops.sensors.cluster_watcher import ClusterWatcher
from gpuops.sensors.emitter import EventSender, build_event
from gpuops.tasks.clients.kube import Kube
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(300)

SECRET_ENV = "s3cr3t-env-value-42"
SECRET_LOG = "AKIAIOSFODNN7EXAMPLE"
GPU = {"nvidia.com/gpu": "1"}


def node(name: str) -> dict:
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {"metadata": {"name": name, "labels": {"gpuops.io/pool": "h100"}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def container(**extra) -> dict:
    return {"name": "main", "image": "vllm/vllm-openai:v0.11.0",
            "env": [{"name": "HF_TOKEN", "value": SECRET_ENV}],
            "resources": {"limits": {**GPU, "memory": "8Gi"}}, **extra}


def pod(name: str, node_name: str = "gpu-1", **extra) -> dict:
    return {"metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": node_name, "containers": [container(**extra)]}}


def save_blocks(sim, slack_fake, cluster: str = "sim", **policy) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = {"cluster_block": f"c-{suffix}", "slack_block": f"s-{suffix}",
             "policy_block": f"p-{suffix}"}

    async def save() -> None:
        await KubernetesCluster(cluster_name=cluster, kubeconfig_path=str(sim.kubeconfig)).save(
            names["cluster_block"])
        await SlackConnection(bot_token="xoxb-t", signing_secret="s",
                              base_url=slack_fake.base_url).save(names["slack_block"])
        await RestartPolicy(default_channel="#alerts", **policy).save(names["policy_block"])
    asyncio.run(save())
    return names


def run_flow(blocks: dict[str, str]) -> dict:
    return asyncio.run(restart_diagnostics(**blocks, quiet_seconds=1.0))


def parents(slack_fake) -> list[dict]:
    return [m for m in slack_fake.messages() if not m.get("thread_ts") or
            m.get("thread_ts") == m["ts"]]


def text_of(message: dict) -> str:
    return json.dumps(message.get("blocks") or []) + (message.get("text") or "")


def all_artifacts_text() -> str:
    async def read() -> str:
        async with get_client() as c:
            arts = await c.read_artifacts(limit=200, artifact_filter=ArtifactFilter(
                type=ArtifactFilterType(any_=["markdown", "table"])))
        return "\n".join(str(a.data) for a in arts)
    return asyncio.run(read())


def unique_cluster() -> str:
    """Each test its own cluster name: one Prefect server serves them all, as in production."""
    return f"sim-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster(prefect_server, sim_factory, tmp_path: Path):
    sim = sim_factory("empty", speed=10)
    sim.name = unique_cluster()
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node("gpu-1"))
    watcher = ClusterWatcher(Kube(sim.api, cluster_name=sim.name),
                             state_file=tmp_path / "reported.json").start()
    yield sim, v1
    watcher.stop()


CASES = {  # pod -> (fault kind, params, extra container fields, expected cause)
    "oomer": ("oom", {"after_seconds": 0.5, "once": True}, {}, "oom-killed-limit"),
    "cuda": ("cuda-oom", {"after_seconds": 0.5, "once": True}, {}, "cuda-oom"),
    "nccl": ("nccl-timeout", {"after_seconds": 0.5, "once": True}, {}, "nccl-error"),
    "xid": ("gpu-xid", {"xid": 79, "after_seconds": 0.5}, {}, "gpu-xid-hardware"),
    "cfg": ("config-error", {"after_seconds": 0.5, "once": True}, {}, "config-error"),
    "crash": ("crashloop", {"after_seconds": 0.5, "exit_code": 3,
                            "error": f"RuntimeError: bad key {SECRET_LOG} password=hunter2"},
              {}, "app-error"),
    "prober": ("liveness", {}, {"livenessProbe": {"httpGet": {"path": "/health", "port": 8000},
                                                  "periodSeconds": 1, "failureThreshold": 2}},
               "liveness-probe"),
    "evictee": ("evict", {}, {}, "evicted"),
    "puller": ("image-pull", {"image": "registry.example/missing:v9"},
               {"image": "registry.example/missing:v9"}, "image-pull"),
}


def test_every_cause_is_classified_and_gets_one_parent_message(cluster, slack_fake):
    sim, v1 = cluster
    blocks = save_blocks(sim, slack_fake, sim.name)
    started = datetime.now(UTC)
    v1.create_node(node("gpu-2"))  # the hardware Xid gets a node of its own
    for name, (_, _, extra, _) in CASES.items():
        if name != "puller":
            v1.create_namespaced_pod("default", pod(name, "gpu-2" if name == "xid" else "gpu-1",
                                                    **extra))
    wait_for(lambda: all(v1.read_namespaced_pod(n, "default").status.phase == "Running"
                         for n in CASES if n != "puller"), timeout=60, message="pods running")
    sim.fault("image-pull", None, image="registry.example/missing:v9")
    v1.create_namespaced_pod("default", pod("puller", image="registry.example/missing:v9"))
    for name, (kind, params, _, _) in CASES.items():
        if kind != "image-pull":
            sim.fault(kind, f"default/{name}", **params)

    def emitted() -> set[str]:
        from tests.test_cluster_watcher import restart_events
        return {e.payload["pod"] for e in restart_events(started)
                if e.payload["cluster"] == sim.name}
    wait_for(lambda: emitted() >= set(CASES), timeout=120, interval=1,
             message="a restart event for every pod")
    counts = run_flow(blocks)
    assert counts.get("posted", 0) >= len(CASES)
    by_pod: dict[str, list[str]] = {}
    for message in parents(slack_fake):
        for name, (*_, cause) in CASES.items():
            if f"pod {name})" in message["text"]:
                by_pod.setdefault(name, []).append(message["ts"])
                assert f"`{cause}`" in text_of(message), (name, text_of(message)[:500])
    assert set(by_pod) == set(CASES)
    # One parent per (workload, cause): a crash loop's later restarts go into its thread.
    assert len(by_pod["crash"]) == 1
    everything = json.dumps(slack_fake.messages()) + all_artifacts_text()
    assert SECRET_ENV not in everything and SECRET_LOG not in everything
    assert "hunter2" not in everything


def test_preemption_and_an_unreachable_node_are_classified(cluster, slack_fake):
    sim, v1 = cluster
    blocks = save_blocks(sim, slack_fake, sim.name)
    scheduling = client.SchedulingV1Api(sim.api)
    for name, value in (("low", 0), ("high", 1000)):
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
    v1.create_node(node("gpu-3"))
    v1.create_node(node("gpu-4"))
    eight = {"limits": {"nvidia.com/gpu": "8", "memory": "8Gi"}}
    victim = pod("preemptee", "gpu-3", resources=eight)
    victim["spec"]["priorityClassName"] = "low"
    v1.create_namespaced_pod("default", victim)
    v1.create_namespaced_pod("default", pod("stranded", "gpu-4"))
    wait_for(lambda: all(v1.read_namespaced_pod(n, "default").status.phase == "Running"
                         for n in ("preemptee", "stranded")), timeout=60, message="running")
    preemptor = pod("preemptor", resources=eight)
    del preemptor["spec"]["nodeName"]
    preemptor["spec"].update(priorityClassName="high",
                             nodeSelector={"kubernetes.io/hostname": "gpu-3"})
    preemptor["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In",
                              "values": ["gpu-3"]}]}]}}}
    del preemptor["spec"]["nodeSelector"]
    v1.create_namespaced_pod("default", preemptor)
    sim.fault("node-notready", "gpu-4")
    sim.advance(320)  # past the default 300 s toleration of the unreachable taint

    expected = {"preemptee": "preempted", "stranded": "node-not-ready"}
    text = ""

    def posted() -> bool:
        nonlocal text
        run_flow(blocks)
        text = "\n".join(text_of(m) for m in parents(slack_fake))
        return all(f"pod {name})" in text for name in expected)
    wait_for(posted, timeout=120, interval=1, message="both posted")
    for message in parents(slack_fake):
        for name, cause in expected.items():
            if f"pod {name})" in message["text"]:
                assert f"`{cause}`" in text_of(message), (name, message["text"])


def test_later_restarts_are_threaded_and_the_parent_counts_them(cluster, slack_fake):
    sim, v1 = cluster
    blocks = save_blocks(sim, slack_fake, sim.name)
    v1.create_namespaced_pod("default", pod("looper"))
    wait_for(lambda: v1.read_namespaced_pod("looper", "default").status.phase == "Running",
             timeout=30, message="looper running")
    sim.fault("crashloop", "default/looper", after_seconds=0.3)

    def restarts() -> int:
        statuses = v1.read_namespaced_pod("looper", "default").status.container_statuses
        return statuses[0].restart_count if statuses else 0
    wait_for(lambda: restarts() >= 1, timeout=60, message="a first restart")
    wait_for(lambda: run_flow(blocks).get("posted"), timeout=30, interval=0.5,
             message="the first restart posted")
    wait_for(lambda: restarts() >= 3, timeout=90, message="two more restarts")
    wait_for(lambda: (run_flow(blocks) or True) and len(slack_fake.messages()) >= 3,
             timeout=60, interval=1, message="threaded replies")
    messages = slack_fake.messages()
    top = parents(slack_fake)
    replies = [m for m in messages if m.get("thread_ts") not in (None, m["ts"])]
    assert len(top) == 1
    assert replies and all(r["thread_ts"] == top[0]["ts"] for r in replies)
    assert top[0].get("updates"), "the parent is updated with the count"
    assert "×" in text_of(top[0])


def test_a_recovered_workload_gets_a_recovered_reply(prefect_server, sim_factory, slack_fake,
                                                     tmp_path: Path):
    sim = sim_factory("empty")  # real time: readiness times are compared with the wall clock
    name = unique_cluster()
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node("gpu-1"))
    watcher = ClusterWatcher(Kube(sim.api, cluster_name=name),
                             state_file=tmp_path / "r.json").start()
    try:
        blocks = save_blocks(sim, slack_fake, name, recovered_after_minutes=0.05)
        v1.create_namespaced_pod("default", pod("healer"))
        wait_for(lambda: v1.read_namespaced_pod("healer", "default").status.phase == "Running",
                 timeout=30, message="healer running")
        sim.fault("crashloop", "default/healer", after_seconds=0.2, once=True)
        wait_for(lambda: run_flow(blocks).get("posted"), timeout=60, interval=1,
                 message="the restart posted")
        wait_for(lambda: (run_flow(blocks) or True) and any(
            "recovered" in text_of(m).lower() for m in slack_fake.messages()
            if m.get("thread_ts") not in (None, m["ts"])), timeout=90, interval=1, message="a recovered reply")
    finally:
        watcher.stop()


def test_a_bad_event_payload_is_rejected_and_the_rest_handled(prefect_server, sim, slack_fake,
                                                              caplog):
    name = unique_cluster()
    blocks = save_blocks(sim, slack_fake, name)
    EventSender().send([build_event(obj="pod", what="restarted", cluster=name, kind="Pod",
                                    namespace="default", name="broken",
                                    identity=f"bad-{uuid.uuid4()}",
                                    payload={"cluster": name, "pod": "broken",
                                             "restart_count": "many"})])
    from datetime import timedelta

    from gpuops.tasks.restarts.events import read_restart_events
    now = datetime.now(UTC)
    wait_for(lambda: asyncio.run(read_restart_events(name, now - timedelta(minutes=5),
                                                     now + timedelta(minutes=1))),
             timeout=30, message="the bad event stored")
    counts = run_flow(blocks)
    assert counts.get("invalid", 0) >= 1
    assert "invalid restart evidence" in caplog.text
    assert "restart_count" in caplog.text or "namespace" in caplog.text


def test_a_burst_of_restarts_is_one_message_per_workload_and_cause(prefect_server, sim,
                                                                   slack_fake):
    """A storm must not become 200 Slack messages: the restarts a run finds together open one
    parent (counting them all), later ones come as one reply listing them, and the parent is
    edited with the new count."""
    from datetime import timedelta

    from gpuops.tasks.restarts.events import read_restart_events
    from tests import restart_fixtures as fx

    name = unique_cluster()
    blocks = save_blocks(sim, slack_fake, name)
    since = datetime.now(UTC) - timedelta(minutes=1)

    def send(counts: range) -> None:
        events = []
        for n in counts:
            ev = fx.evidence(cluster=name, pod=f"trainer-{n % 2}", pod_uid=f"uid-{n % 2}",
                             restart_count=n, observed_at=datetime.now(UTC).isoformat())
            events.append(build_event(obj="pod", what="restarted", cluster=name, kind="Pod",
                                      namespace=ev.namespace, name=ev.pod,
                                      identity=ev.identity,
                                      payload=ev.model_dump(mode="json")))
        EventSender().send(events)
        wait_for(lambda: len(asyncio.run(read_restart_events(
            name, since, datetime.now(UTC) + timedelta(minutes=1)))) >= counts.stop - 1,
            timeout=30, message="the events stored")

    send(range(1, 7))
    assert run_flow(blocks)["posted"] == 6
    (parent,) = parents(slack_fake)
    assert "6×" in text_of(parent) and not slack_fake.messages()[1:]

    send(range(7, 10))
    assert run_flow(blocks)["posted"] == 3
    messages = slack_fake.messages()
    (reply,) = [m for m in messages if m.get("thread_ts") not in (None, m["ts"])]
    assert reply["thread_ts"] == parent["ts"]
    assert reply["text"].startswith("3 restarts, latest Restart #9 of trainer-1/trainer")
    (parent,) = parents(slack_fake)
    assert "9×" in text_of(parent)


def test_a_failed_batch_is_tried_again_and_nothing_is_posted_twice(prefect_server, sim,
                                                                   slack_fake, caplog):
    """Slack refuses one of a batch's messages with a definite error, so its task gives up:
    the run tries the batch again instead of failing, and what was posted is not posted
    again."""
    from datetime import timedelta

    from gpuops.tasks.restarts.events import read_restart_events
    from tests import restart_fixtures as fx

    name = unique_cluster()
    blocks = save_blocks(sim, slack_fake, name)
    since = datetime.now(UTC) - timedelta(minutes=1)
    events = []
    for n in range(3):
        # Event ids come from restart identities: unique pod uids keep other tests' apart.
        ev = fx.evidence(cluster=name, pod=f"server-{n}", pod_uid=f"{name}-{n}", restart_count=1,
                         workload=fx.Workload(kind="Deployment", name=f"server-{n}",
                                              namespace="ml"),
                         observed_at=datetime.now(UTC).isoformat())
        events.append(build_event(obj="pod", what="restarted", cluster=name, kind="Pod",
                                  namespace=ev.namespace, name=ev.pod, identity=ev.identity,
                                  payload=ev.model_dump(mode="json")))
    EventSender().send(events)
    wait_for(lambda: len(asyncio.run(read_restart_events(
        name, since, datetime.now(UTC) + timedelta(minutes=1)))) >= 3,
        timeout=30, message="the events stored")
    slack_fake.post("/_fake/fail", {"method": "chat.postMessage", "count": 1,
                                    "error": "channel_not_found"})
    counts = run_flow(blocks)
    assert counts["posted"] == 3
    assert "failed" in caplog.text and "trying again" in caplog.text
    posted = [m["text"] for m in parents(slack_fake)]
    assert len(posted) == 3 and len(set(posted)) == 3
    assert all(any(f"server-{n}" in t for t in posted) for n in range(3))


def test_the_active_run_takes_over_queued_triggered_runs_but_not_scheduled_ones(
        prefect_server):
    """Triggered runs queued behind the active one are ended "Superseded" with a note, and
    the active run learns until when it must keep reading (their trigger windows plus the
    persister's delay); a window that would end after the active run's deadline is left to
    its own run, and the schedule's runs always are."""
    from prefect.states import Scheduled

    from gpuops.flows.restart_diagnostics import PERSIST_DELAY, supersede_queued_runs

    async def scenario() -> dict[str, object]:
        async with get_client() as c:
            flow_id = await c.create_flow_from_name(f"supersede-{uuid.uuid4().hex[:6]}")
            deployment = await c.create_deployment(flow_id=flow_id, name="on-restart")
            runs = {}
            for name, params in (("me", {"event_id": "e0", "trigger_window_seconds": 10}),
                                 ("queued", {"event_id": "e1", "trigger_window_seconds": 10}),
                                 ("scheduled", {})):
                runs[name] = await c.create_flow_run_from_deployment(
                    deployment, parameters=params, state=Scheduled())
            note = "superseded: handled by the active run"
            too_soon = await supersede_queued_runs(deployment, runs["me"].id,
                                                   datetime.now(UTC), note)
            taken = await supersede_queued_runs(
                deployment, runs["me"].id, datetime.now(UTC) + timedelta(minutes=1), note)
            states = {name: (await c.read_flow_run(r.id)).state for name, r in runs.items()}
            return {"too_soon": too_soon, "taken": taken, "queued_created": runs["queued"].created,
                    "queued_name": states["queued"].name,
                    **{n: f"{s.type.value}:{s.message or ''}" for n, s in states.items()}}
    result = asyncio.run(scenario())
    assert result["too_soon"] == []
    assert result["taken"] == [result["queued_created"] + timedelta(seconds=10) + PERSIST_DELAY]
    # Ended as done by the active run, not as a cancellation a user would read as failure.
    assert result["queued"] == "COMPLETED:superseded: handled by the active run"
    assert result["queued_name"] == "Superseded"
    for kept in ("me", "scheduled"):
        assert result[kept].startswith("SCHEDULED"), result


def test_a_standing_run_stays_up_and_the_schedule_starts_one_at_once(prefect_server, sim,
                                                                      slack_fake):
    """The schedule's runs stand by (`stay_seconds`) so restarts need not wait for a new
    run's process; the schedule is anchored just ahead of serving, not an interval later."""
    import time

    from gpuops.deployments.serve import STANDBY_HANDOVER, STANDBY_INTERVAL, standby_schedule

    blocks = save_blocks(sim, slack_fake, unique_cluster())
    started = time.monotonic()
    asyncio.run(restart_diagnostics(**blocks, quiet_seconds=0.5, stay_seconds=4))
    assert time.monotonic() - started >= 4
    schedule = standby_schedule()
    stay = (STANDBY_INTERVAL - STANDBY_HANDOVER).total_seconds()
    assert schedule.parameters["stay_seconds"] == stay
    assert schedule.parameters["max_run_seconds"] > stay
    assert 0 < (schedule.anchor_date - datetime.now(UTC)).total_seconds() <= 10


def test_a_standing_run_hands_over_when_its_successor_is_due():
    """A standing run's stay counts from when it was due, not from when its process came
    up, so it ends just before the next one is due; a triggered run stays for its window."""
    from types import SimpleNamespace

    from gpuops.flows.restart_diagnostics import PERSIST_DELAY, _stay_until

    due = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    run = SimpleNamespace(expected_start_time=due, created=due - timedelta(minutes=1))
    came_up = due + timedelta(seconds=8)
    assert _stay_until(run, came_up, 897, 0) == due + timedelta(seconds=897)
    late = due + timedelta(hours=1)  # queued behind a long run: no stay left
    assert _stay_until(run, late, 897, 0) == late
    triggered = SimpleNamespace(expected_start_time=came_up, created=came_up)
    assert _stay_until(triggered, came_up, 0, 10) == came_up + timedelta(seconds=10) \
        + PERSIST_DELAY


def test_restart_events_arrive_live_for_this_cluster_only(prefect_server):
    """The standing run follows restart events as the server receives them (its events
    websocket), not only once stored: another cluster's events are not its business."""
    from gpuops.tasks.restarts.events import LiveRestartEvents

    mine, other = unique_cluster(), unique_cluster()

    def restarted(cluster: str, pod: str) -> object:
        return build_event(obj="pod", what="restarted", cluster=cluster, kind="Pod",
                           namespace="default", name=pod, identity=f"{pod}-{uuid.uuid4()}",
                           payload={"cluster": cluster, "pod": pod})

    async def scenario() -> list[str]:
        async with LiveRestartEvents(mine) as live:
            await asyncio.sleep(1)  # subscribed
            await asyncio.to_thread(EventSender().send, [restarted(other, "theirs"),
                                                         restarted(mine, "ours")])
            arrived: list = []
            for _ in range(40):
                await live.wait(0.5)
                arrived += live.take()
                if arrived:
                    break
            await asyncio.sleep(1)  # anything else that was coming
            return [e.payload["pod"] for e in arrived + live.take()]
    assert asyncio.run(scenario()) == ["ours"]


def test_slack_trouble_is_retried_and_definite_answers_are_not():
    from prefect.states import Failed
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web import SlackResponse

    from gpuops.tasks.restarts.posting import _worth_retrying

    def failed(error: str):
        response = SlackResponse(client=None, http_verb="POST", api_url="", req_args={},
                                 data={"ok": False, "error": error}, headers={}, status_code=200)
        return Failed(data=SlackApiError(error, response))

    async def in_a_flow_run() -> list[bool]:  # async tasks call it from a running loop
        return [_worth_retrying(None, None, failed("internal_error")),
                _worth_retrying(None, None, failed("ratelimited")),
                _worth_retrying(None, None, failed("channel_not_found")),
                _worth_retrying(None, None, Failed(data=ConnectionResetError()))]
    assert asyncio.run(in_a_flow_run()) == [True, True, False, True]


def _restart_event(cluster: str, pod: str, **evidence) -> object:
    from tests import restart_fixtures as fx

    ev = fx.evidence(cluster=cluster, pod=pod, pod_uid=f"{cluster}-{pod}", restart_count=1,
                     workload=fx.Workload(kind="Deployment", name=pod, namespace="ml"),
                     observed_at=datetime.now(UTC).isoformat())
    payload = ev.model_dump(mode="json") | evidence
    return build_event(obj="pod", what="restarted", cluster=cluster, kind="Pod",
                       namespace=ev.namespace, name=pod, identity=f"{ev.identity}-{uuid.uuid4()}",
                       payload=payload)


def _events_named(name: str, since: datetime) -> list:
    from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter

    async def read() -> list:
        async with get_client() as c:
            page = await c.read_events(filter=EventFilter(
                event=EventNameFilter(name=[name]), occurred=EventOccurredFilter(since=since)),
                limit=50)
            return list(page.events)
    return asyncio.run(read())


def test_a_poisoned_restart_event_is_skipped_and_recorded_and_later_restarts_are_reported(
        prefect_server, sim, slack_fake, caplog):
    """An event whose payload validates as JSON but carries a time that is not one must not
    stop the restarts after it: it is rejected once (a log line naming the event and the
    field, a `gpuops.event.rejected` event without the value), the run's cursor moves past
    it, and the good restart reaches Slack; the next run does not trip over it again."""
    from gpuops.tasks.restarts.events import read_restart_events

    name = unique_cluster()
    blocks = save_blocks(sim, slack_fake, name)
    since = datetime.now(UTC) - timedelta(minutes=1)
    bad = _restart_event(name, "poisoned", observed_at="not-a-time")
    good = _restart_event(name, "healthy-after")
    EventSender().send([bad])
    EventSender().send([good])
    wait_for(lambda: len(asyncio.run(read_restart_events(
        name, since, datetime.now(UTC) + timedelta(minutes=1)))) >= 2,
        timeout=30, message="both events stored")

    counts = run_flow(blocks)

    assert counts["posted"] == 1 and counts["invalid"] == 1
    (parent,) = parents(slack_fake)
    assert "healthy-after" in parent["text"]
    logged = [r.getMessage() for r in caplog.records if str(bad.id) in r.getMessage()]
    assert len(logged) == 1 and "observed_at" in logged[0] and "not-a-time" not in logged[0]
    rejected = wait_for(lambda: _events_named("gpuops.event.rejected", since), timeout=30,
                        message="the rejection recorded as an event")
    (record,) = [e for e in rejected if e.payload["event_id"] == str(bad.id)]
    assert record.resource.id == bad.resource.id
    assert record.payload["event"] == "gpuops.pod.restarted"
    assert [p["field"] for p in record.payload["problems"]] == ["observed_at"]
    assert "not-a-time" not in json.dumps(record.payload)
    assert run_flow(blocks).get("posted", 0) == 0  # nothing left, and the run does not fail


def test_a_restart_event_with_a_time_without_offset_is_taken_as_utc(prefect_server, sim,
                                                                    slack_fake):
    """Kubernetes writes times in UTC: a time without an offset is read as UTC, so the
    restart is reported rather than failing the run on a naive/aware comparison."""
    from gpuops.tasks.restarts.events import read_restart_events

    name = unique_cluster()
    blocks = save_blocks(sim, slack_fake, name)
    since = datetime.now(UTC) - timedelta(minutes=1)
    naive = datetime.now(UTC).replace(tzinfo=None).isoformat()
    EventSender().send([_restart_event(name, "naive-clock", observed_at=naive)])
    wait_for(lambda: asyncio.run(read_restart_events(
        name, since, datetime.now(UTC) + timedelta(minutes=1))), timeout=30,
        message="the event stored")

    assert run_flow(blocks)["posted"] == 1
    (parent,) = parents(slack_fake)
    assert "naive-clock" in parent["text"]


def test_a_restarts_slack_parent_links_to_its_own_report_and_the_workloads_timeline(
        prefect_server, sim, slack_fake):
    """Not to the run that handled it (a standing run handles hundreds): the link opens the
    restart's own report artifact (the UI's `/artifacts/artifact/<id>`), whose title leads
    with time, workload, container, cause and exit. The message is not held back for the
    report: it goes out with the timeline link and is edited once with the report's."""
    import re

    from prefect.client.schemas.filters import ArtifactFilterId

    from gpuops.tasks.restarts.events import read_restart_events

    name = unique_cluster()
    blocks = save_blocks(sim, slack_fake, name)
    since = datetime.now(UTC) - timedelta(minutes=1)
    EventSender().send([_restart_event(name, "linked")])
    wait_for(lambda: asyncio.run(read_restart_events(
        name, since, datetime.now(UTC) + timedelta(minutes=1))), timeout=30,
        message="the event stored")
    assert run_flow(blocks)["posted"] == 1
    (parent,) = parents(slack_fake)
    body = text_of(parent)
    ui = prefect_server.removesuffix("/api")
    (artifact_id,) = re.findall(re.escape(ui) + r"/artifacts/artifact/([0-9a-f-]{36})\|Restart "
                                r"report", body)
    assert re.search(re.escape(ui) + r"/artifacts/key/restarts-[a-z0-9-]+\|Restart timeline",
                     body)
    assert "/runs/flow-run/" not in body and "/flow-runs/flow-run/" not in body
    (as_posted,) = parent["updates"]
    assert "Restart timeline" in json.dumps(as_posted["blocks"])

    async def read() -> list:
        async with get_client() as c:
            return await c.read_artifacts(artifact_filter=ArtifactFilter(
                id=ArtifactFilterId(any_=[uuid.UUID(artifact_id)])))
    (report,) = asyncio.run(read())
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · Deployment/linked · trainer · "
                    r"app-error · exit 1 \(Error\)", report.description), report.description
    assert str(report.data).startswith("# ")
    assert "linked" in str(report.data)
