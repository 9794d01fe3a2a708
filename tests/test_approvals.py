"""Approvals and safe actions end to end: a real Prefect server, the Slack fake over HTTP,
the real Bolt receiver with signed requests, and simcluster through the official client."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.deployments.services import free_port
from gpuops.flows.drain_node import drain_node
from gpuops.sensors.slack_receiver import build_receiver, serve_http
from gpuops.tasks.approvals.request import Approval, not_approved_message
from tests import helpers
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)

SIGNING_SECRET = "test-signing-secret"
ALICE, BOB, MALLORY = "UALICE", "UBOB", "UMALLORY"


@dataclass
class Receiver:
    url: str
    clicks: list[tuple[int, str]] = field(default_factory=list)

    def click(self, message: dict, action_id: str, user: str, *, timestamp: int | None = None,
              secret: str = SIGNING_SECRET, raw: bytes | None = None,
              signature: str | None = None) -> tuple[int, bytes, str]:
        """POST a signed block_actions interaction, as Slack does; returns (status, body, sig)."""
        value = next(e["value"] for b in message["blocks"] if b["type"] == "actions"
                     for e in b["elements"] if e["action_id"] == action_id)
        payload = {"type": "block_actions", "user": {"id": user, "team_id": "T0GPUOPS"},
                   "team": {"id": "T0GPUOPS", "domain": "gpuops"}, "api_app_id": "A0GPUOPS",
                   "container": {"type": "message", "message_ts": message["ts"],
                                 "channel_id": message["channel"]},
                   "trigger_id": f"{uuid.uuid4().int}", "channel": {"id": message["channel"]},
                   "message": {"ts": message["ts"], "text": message.get("text", ""),
                               "blocks": message["blocks"]},
                   "actions": [{"action_id": action_id, "block_id": "gpuops_approval",
                                "type": "button", "value": value,
                                "action_ts": f"{time.time():.6f}"}]}
        body = raw or ("payload=" + urllib.parse.quote(json.dumps(payload))).encode()
        ts = str(timestamp if timestamp is not None else int(time.time()))
        sig = signature or "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body,
                                            hashlib.sha256).hexdigest()
        req = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read(), sig
        except urllib.error.HTTPError as e:
            return e.code, e.read(), sig


@dataclass
class Env:
    sim: Any
    slack: Any
    receiver: Receiver
    v1: client.CoreV1Api
    blocks: dict[str, str]


def _save_blocks(sim, slack_fake, suffix: str, **policy: Any) -> dict[str, str]:
    names = {"cluster_block": f"cluster-{suffix}", "slack_block": f"slack-{suffix}",
             "policy_block": f"policy-{suffix}"}
    policy = {"approvers": [ALICE], "approver_group": "SOPS", "channel": "#ops",
              "timeout_s": 120, "poll_interval_s": 1, "expiry_grace_s": 60, **policy}

    async def save() -> None:
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(sim.kubeconfig)
                                ).save(names["cluster_block"], overwrite=True)
        await SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                              base_url=slack_fake.base_url, default_channel="#ops"
                              ).save(names["slack_block"], overwrite=True)
        await ApprovalPolicy(**policy).save(names["policy_block"], overwrite=True)

    asyncio.run(save())
    return names


@pytest.fixture
def env(prefect_server, sim, slack_fake, request) -> Env:
    """The approval policy's options come from indirect parametrization (a dict)."""
    return make_env(sim, slack_fake, **getattr(request, "param", {}))


def make_env(sim, slack_fake, **policy_options: Any) -> Env:
    """A node with two pods, the Slack fake, the real receiver, and saved Blocks."""
    slack_fake.post("/_fake/usergroups", {"usergroup": "SOPS", "users": [BOB]})
    conn = SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                           base_url=slack_fake.base_url)
    port = free_port()
    runner = slack_fake.loop.run(serve_http(build_receiver(conn), "127.0.0.1", port))
    slack_fake.loop.on_stop(runner.cleanup)
    v1 = client.CoreV1Api(sim.api)
    v1.create_node({"metadata": {"name": "gpu-1", "labels": {"gpuops.io/pool": "h100"}},
                    "status": {"capacity": {"cpu": "96", "memory": "1Ti", "pods": "110",
                                            "nvidia.com/gpu": "8"},
                               "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110",
                                               "nvidia.com/gpu": "8"},
                               "conditions": [{"type": "Ready", "status": "True"}]}})
    for i in range(2):
        v1.create_namespaced_pod("default", {
            "metadata": {"name": f"worker-{i}"},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "busybox:1"}]}})
    blocks = _save_blocks(sim, slack_fake, uuid.uuid4().hex[:8], **policy_options)
    return Env(sim, slack_fake, Receiver(f"http://127.0.0.1:{port}/slack/events"), v1, blocks)


class FlowThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(drain_node(**params, return_state=True))


def approval_message(env: Env, count: int = 1) -> dict:
    def find() -> list[dict]:
        return [m for m in env.slack.messages()
                if any(b.get("type") == "header" and "Approval needed" in b["text"]["text"]
                       for b in m.get("blocks") or [])]
    return wait_for(lambda: len(find()) >= count and find()[count - 1], timeout=60,
                    message="the approval request in Slack")


def latest(env: Env, message: dict) -> dict:
    return next(m for m in env.slack.messages() if m["ts"] == message["ts"])


def wait_paused(run_id: str) -> str:
    """Wait until the run is paused or suspended; return the state's name."""
    async def paused() -> str | None:
        async with get_client() as c:
            run = await c.read_flow_run(uuid.UUID(run_id))
            return run.state.name if run.state and run.state.is_paused() else None
    return wait_for(lambda: asyncio.run(paused()), timeout=60, message="the run to pause")


def run_id_of(message: dict) -> str:
    value = next(e["value"] for b in message["blocks"] if b["type"] == "actions"
                 for e in b["elements"])
    return json.loads(value)["flow_run_id"]


def approve_when_paused(env: Env, message: dict) -> None:
    wait_paused(run_id_of(message))
    assert env.receiver.click(message, "gpuops_approve", ALICE)[0] == 200


def cordoned(env: Env) -> bool:
    spec = env.v1.read_node("gpu-1").spec
    return bool(spec and spec.unschedulable)


def evicted(env: Env) -> bool:
    return all(p.metadata.deletion_timestamp for p in env.v1.list_namespaced_pod("default").items)


def test_approve_in_slack_applies_the_change_and_records_who(env):
    run = FlowThread(node="gpu-1", reason="Xid 79 on GPU 3", **env.blocks)
    message = approval_message(env)
    assert "Drain node gpu-1" in json.dumps(message["blocks"])
    wait_paused(run_id_of(message))
    status, _, _ = env.receiver.click(message, "gpuops_approve", ALICE)
    assert status == 200
    state = run.result()
    assert state.is_completed() and state.name == "Completed"
    assert cordoned(env) and evicted(env)
    final = latest(env, message)
    assert f"Approved* by <@{ALICE}>" in json.dumps(final["blocks"])
    assert not any(b["type"] == "actions" for b in final["blocks"])


def test_reject_in_slack_applies_nothing(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    wait_paused(run_id_of(message))
    assert env.receiver.click(message, "gpuops_reject", ALICE)[0] == 200
    state = run.result()
    assert state.is_completed() and state.name == "NotApproved"
    assert not cordoned(env) and not evicted(env)
    assert "Rejected" in json.dumps(latest(env, message)["blocks"])


@pytest.mark.parametrize("env", [{"timeout_s": 3}], indirect=True)
def test_a_timeout_is_a_no_and_the_run_ends_cleanly(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    state = run.result()
    assert state.is_completed() and state.name == "NotApproved"
    assert "timeout" in state.message
    assert not cordoned(env)
    assert "no answer within" in json.dumps(latest(env, message)["blocks"])


def test_forged_stale_and_replayed_requests_are_rejected(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    assert env.receiver.click(message, "gpuops_approve", ALICE, secret="wrong")[0] == 401
    stale = int(time.time()) - 600
    assert env.receiver.click(message, "gpuops_approve", ALICE, timestamp=stale)[0] == 401
    wait_paused(run_id)  # nothing above resumed it
    status, _, _ = env.receiver.click(message, "gpuops_reject", ALICE)
    assert status == 200
    assert run.result().name == "NotApproved"
    # The very same signed request, sent again: a replay.
    body = ("payload=" + urllib.parse.quote(json.dumps({"type": "block_actions"}))).encode()
    ts = int(time.time())
    first = env.receiver.click(message, "gpuops_approve", ALICE, timestamp=ts, raw=body)
    replay = env.receiver.click(message, "gpuops_approve", ALICE, timestamp=ts, raw=body)
    assert first[0] != 401 and replay[0] == 401
    assert not cordoned(env)


def test_only_allow_listed_users_and_group_members_count(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    assert env.receiver.click(message, "gpuops_approve", MALLORY)[0] == 200
    wait_for(lambda: any(m.get("ephemeral_to") == MALLORY and "not on the approvers" in m["text"]
                         for m in env.slack.messages()), message="a refusal to Mallory")
    wait_paused(run_id)
    assert env.receiver.click(message, "gpuops_approve", BOB)[0] == 200  # via user group SOPS
    assert run.result().name == "Completed"
    assert cordoned(env)


def test_a_second_click_changes_nothing(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    wait_paused(run_id_of(message))
    env.receiver.click(message, "gpuops_reject", ALICE)
    assert run.result().name == "NotApproved"
    env.receiver.click(message, "gpuops_approve", ALICE)
    wait_for(lambda: any(m.get("ephemeral_to") == ALICE and "no longer waiting" in m["text"]
                         for m in env.slack.messages()), message="the second-click reply")
    assert not cordoned(env)
    assert "Rejected" in json.dumps(latest(env, message)["blocks"])


def test_approval_from_the_prefect_ui_resumes_the_run(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "bob@ui"})
    assert run.result().name == "Completed"
    assert cordoned(env)
    assert "bob@ui" in json.dumps(latest(env, message)["blocks"])


def test_a_rejection_in_the_prefect_ui_needs_a_name_and_the_run_says_who_and_why(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    run_id = run_id_of(message)
    wait_paused(run_id)
    for nameless in ({"approved": False}, {"approved": False, "approver": "  "}):
        with pytest.raises(RuntimeError, match="approver"):
            resume_flow_run(uuid.UUID(run_id), run_input=nameless)
    assert wait_paused(run_id) == "Paused"  # refused by the server: still waiting
    resume_flow_run(uuid.UUID(run_id), run_input={
        "approved": False, "approver": "bob@ui", "comment": "not during the launch"})
    state = run.result()
    assert state.name == "NotApproved"
    assert state.message == "Rejected by bob@ui: not during the launch; nothing was applied."
    assert "Rejected* by bob@ui" in json.dumps(latest(env, message)["blocks"])


def test_a_not_approved_message_names_who_and_why_or_says_the_ui_gave_no_name():
    def says(**answer: Any) -> str:
        return not_approved_message(Approval.model_construct(**{"comment": "", **answer}))
    assert says(approver="UALICE", comment="via Slack") == (
        "Rejected by UALICE: via Slack; nothing was applied.")
    assert says(approver="") == "Rejected in the Prefect UI (no name given); nothing was applied."
    assert says(approver="bob") == "Rejected by bob; nothing was applied."
    assert "timeout" in says(approver="timeout", comment="no answer within 60 s")


@pytest.mark.parametrize("env", [{"timeout_s": 120, "suspend_after_s": 10}], indirect=True)
def test_a_long_wait_without_a_deployment_pauses_instead_of_suspending(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    assert wait_paused(run_id_of(message)) == "Paused"  # Prefect suspends deployment runs only
    assert env.receiver.click(message, "gpuops_approve", ALICE)[0] == 200
    assert run.result().name == "Completed"
    assert cordoned(env)


def test_dry_run_changes_nothing(env):
    def settled() -> bool:  # the kubelet is done starting them: no update of its own is due
        return all(any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                   for p in env.v1.list_namespaced_pod("default").items)
    wait_for(settled, timeout=60, message="both pods Ready")
    before = [(p.metadata.name, p.metadata.resource_version)
              for p in env.v1.list_namespaced_pod("default").items]
    node_rv = env.v1.read_node("gpu-1").metadata.resource_version
    state = FlowThread(node="gpu-1", dry_run=True, **env.blocks).result()
    assert state.is_completed() and "would drain" in state.message
    after = [(p.metadata.name, p.metadata.resource_version)
             for p in env.v1.list_namespaced_pod("default").items]
    assert after == before
    assert env.v1.read_node("gpu-1").metadata.resource_version == node_rv
    assert env.slack.messages() == []  # a dry run asks no one


def test_two_flows_for_one_node_run_one_after_the_other(env):
    first = FlowThread(node="gpu-1", **env.blocks)
    second = FlowThread(node="gpu-1", **env.blocks)
    m1 = approval_message(env, 1)
    m2 = approval_message(env, 2)
    for m in (m1, m2):
        wait_paused(run_id_of(m))
    env.receiver.click(m1, "gpuops_approve", ALICE)
    env.receiver.click(m2, "gpuops_approve", ALICE)
    states = [first.result(), second.result()]
    assert all(s.name == "Completed" for s in states)

    async def actions() -> list[tuple[str, str, str]]:
        from prefect.events.filters import EventFilter, EventNameFilter
        async with get_client() as c:
            page = await c.read_events(filter=EventFilter(
                event=EventNameFilter(prefix=["gpuops.action."])), limit=50)
        ours = {f"prefect.flow-run.{s.state_details.flow_run_id}" for s in states}
        rows = []
        for e in sorted(page.events, key=lambda e: e.occurred):
            run = next((r.id for r in e.related if r.role == "flow-run"), "")
            if run in ours:
                rows.append((e.event, run, e.payload["outcome"]))
        return rows

    rows = wait_for(lambda: (r := asyncio.run(actions())) and len(r) >= 6 and r, timeout=30,
                    message="six action events")
    runs_in_order = [run for _, run, _ in rows]
    # One run's actions all come before the other's: the node slot serialised them.
    switches = sum(1 for a, b in itertools.pairwise(runs_in_order) if a != b)
    assert switches == 1
    outcomes = [outcome for _, _, outcome in rows]
    assert outcomes.count("applied") == 3 and outcomes.count("already-done") == 3


def test_a_retried_drain_acts_once(env):
    first = FlowThread(node="gpu-1", **env.blocks)
    approve_when_paused(env, approval_message(env, 1))
    assert first.result().name == "Completed"
    rvs = {p.metadata.name: p.metadata.resource_version
           for p in env.v1.list_namespaced_pod("default").items}
    node_rv = env.v1.read_node("gpu-1").metadata.resource_version
    again = FlowThread(node="gpu-1", **env.blocks)
    approve_when_paused(env, approval_message(env, 2))
    assert again.result().name == "Completed"
    assert env.v1.read_node("gpu-1").metadata.resource_version == node_rv
    for p in env.v1.list_namespaced_pod("default").items:
        assert rvs.get(p.metadata.name) == p.metadata.resource_version


def actions_artifact(run_id: str) -> list[dict]:
    """The rows of the run's actions artifact (a table artifact), or [] without one."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> list:
        async with get_client() as c:
            return await c.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[uuid.UUID(run_id)])))
    tables = [a for a in asyncio.run(read()) if a.type == "table"
              and "safe-action layer" in (a.description or "")]
    if not tables:
        return []
    data = tables[0].data
    return json.loads(data) if isinstance(data, str) else data


def test_an_action_that_fails_is_in_the_runs_actions_artifact(env):
    run = FlowThread(node="gpu-1", **env.blocks)
    message = approval_message(env)
    wait_paused(run_id_of(message))
    env.v1.delete_node("gpu-1")  # gone before the approved cordon reaches it
    assert env.receiver.click(message, "gpuops_approve", ALICE)[0] == 200
    assert run.result().is_failed()
    rows = actions_artifact(run_id_of(message))
    assert [(r["kind"], r["target"], r["outcome"]) for r in rows] == [
        ("cordon", "node/gpu-1", "failed")]
    assert rows[0]["detail"].startswith("KubeNotFound")
