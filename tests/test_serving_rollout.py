"""The serving-rollout flow end to end: simcluster over HTTP (a fast clock, vLLM replicas behind
InferencePools with their endpoint pickers, an HTTPRoute, the `bad-version` fault by image
glob), a real Prometheus scraping it, a real Prefect server and the Slack fake.

Windows are short and the simulated clock runs 20x, so a window of a few seconds holds
minutes of traffic; nothing here asserts on time."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from typing import Any

import pytest
from kubernetes import client

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.blocks.rollout import RolloutPolicy
from gpuops.common.annotations import ROLLOUT, ROLLOUT_LAST
from gpuops.deployments.services import free_port, host_port
from gpuops.flows.serving_rollout import serving_rollout
from gpuops.sensors.slack_receiver import build_receiver, serve_http
from tests import helpers
from tests.helpers import wait_for
from tests.test_approvals import SIGNING_SECRET, Receiver, run_id_of, wait_paused

pytestmark = pytest.mark.timeout(240)

NS = "inference"
MODEL = "llama-3-8b"
GROUP = "inference.networking.k8s.io"
ROUTE_GROUP = "gateway.networking.k8s.io"
OLD_IMAGE = "vllm/vllm-openai:v0.11.0"
SPEED = 20.0


class Stack:
    """A GPU node and the llama stack as the default scenario has it: a vLLM Deployment, its
    InferencePool with an endpoint picker (Service + Deployment), an HTTPRoute; made through
    the official client as a user would."""

    def __init__(self, sim, gpus: int = 8) -> None:
        self.sim = sim
        self.core = client.CoreV1Api(sim.api)
        self.apps = client.AppsV1Api(sim.api)
        self.custom = client.CustomObjectsApi(sim.api)
        self.core.create_namespace({"metadata": {"name": NS}})
        capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        self.core.create_node({
            "metadata": {"name": "gpu-node-0",
                         "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady"}]}})

    def deploy(self, replicas: int = 2) -> None:
        labels = {"app": MODEL, "app.kubernetes.io/name": "vllm"}
        self.apps.create_namespaced_deployment(NS, {
            "metadata": {"name": MODEL, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": MODEL}},
                     "template": {
                         "metadata": {"labels": labels, "annotations": {
                             "sim.gpuops.io/pull-seconds": "10",
                             "sim.gpuops.io/load-seconds": "20",
                             "sim.gpuops.io/capacity-rps": "30",
                             "sim.gpuops.io/warmup-seconds": "40"}},
                         "spec": {
                             "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                             "containers": [{
                                 "name": "vllm", "image": OLD_IMAGE,
                                 "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct",
                                          "--served-model-name", MODEL, "--port", "8000"],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                 "readinessProbe": {"httpGet": {"path": "/health",
                                                                "port": 8000}}}]}}}})
        self.custom.create_namespaced_custom_object(GROUP, "v1", NS, "inferencepools", {
            "apiVersion": f"{GROUP}/v1", "kind": "InferencePool",
            "metadata": {"name": MODEL, "annotations": {"sim.gpuops.io/model": MODEL}},
            "spec": {"selector": {"matchLabels": {"app": MODEL}},
                     "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": f"{MODEL}-epp", "port": {"number": 9002}}}})
        epp = {"app": f"{MODEL}-epp"}
        self.apps.create_namespaced_deployment(NS, {
            "metadata": {"name": f"{MODEL}-epp", "labels": epp},
            "spec": {"replicas": 1, "selector": {"matchLabels": epp},
                     "template": {"metadata": {"labels": epp}, "spec": {"containers": [{
                         "name": "epp",
                         "image": "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0",
                         "args": ["--pool-name", MODEL, "--pool-namespace", NS,
                                  "--grpc-port", "9002"]}]}}}})
        self.core.create_namespaced_service(NS, {
            "metadata": {"name": f"{MODEL}-epp"},
            "spec": {"selector": epp, "ports": [{"name": "grpc", "port": 9002,
                                                 "targetPort": 9002}]}})
        self.custom.create_namespaced_custom_object(ROUTE_GROUP, "v1", NS, "httproutes", {
            "apiVersion": f"{ROUTE_GROUP}/v1", "kind": "HTTPRoute",
            "metadata": {"name": MODEL, "annotations": {"sim.gpuops.io/model": MODEL}},
            "spec": {"parentRefs": [{"name": "inference-gateway"}], "rules": [{
                "backendRefs": [{"group": GROUP, "kind": "InferencePool", "name": MODEL,
                                 "weight": 100}]}]}})
        wait_for(lambda: self.ready_pods(MODEL) == replicas, timeout=60, interval=0.2,
                 message=f"{replicas} old replicas Ready")

    def ready_pods(self, app: str) -> int:
        pods = self.core.list_namespaced_pod(NS, label_selector=f"app={app}").items
        return sum(1 for p in pods if any(c.type == "Ready" and c.status == "True"
                                          for c in p.status.conditions or ()))

    def route(self) -> dict:
        return self.custom.get_namespaced_custom_object(ROUTE_GROUP, "v1", NS, "httproutes",
                                                        MODEL)

    def weights(self) -> dict[str, int]:
        [rule] = self.route()["spec"]["rules"]
        return {b["name"]: b.get("weight", 1) for b in rule["backendRefs"]}

    def deployments(self) -> dict[str, int]:
        return {d.metadata.name: d.spec.replicas
                for d in self.apps.list_namespaced_deployment(NS).items}

    def pools(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.custom.list_namespaced_custom_object(
            GROUP, "v1", NS, "inferencepools")["items"])

    def snapshot(self) -> dict[str, Any]:
        route = self.route()
        return {"route": (route["spec"], route["metadata"].get("annotations")),
                "deployments": self.deployments(), "pools": self.pools(),
                "services": sorted(s.metadata.name for s in
                                   self.core.list_namespaced_service(NS).items)}


def save_blocks(stack: Stack, prometheus: str, slack_fake, **policy: Any) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = {"cluster_block": f"cluster-{suffix}", "slack_block": f"slack-{suffix}",
             "policy_block": f"approvals-{suffix}", "rollout_block": f"rollout-{suffix}"}
    values = {"window_s": 4, "step_timeout_s": 20, "poll_s": 1, "min_requests": 40,
              "ready_timeout_s": 60, "warmup_requests": 5, "warmup_interval_s": 1,
              "keep_old_s": 1, "approve": "none", "prometheus_url": prometheus,
              "notify_channel": "#rollouts", **policy}

    async def save() -> None:
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(stack.sim.kubeconfig)
                                ).save(names["cluster_block"], overwrite=True)
        await SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                              base_url=slack_fake.base_url, default_channel="#ops"
                              ).save(names["slack_block"], overwrite=True)
        await ApprovalPolicy(approvers=["UALICE"], channel="#ops", timeout_s=120,
                             poll_interval_s=1, expiry_grace_s=60
                             ).save(names["policy_block"], overwrite=True)
        await RolloutPolicy(**values).save(names["rollout_block"], overwrite=True)

    asyncio.run(save())
    return names


@pytest.fixture
def stack(sim_factory) -> Stack:
    demand = {"demand": {MODEL: {"baseRps": 40, "peakRps": 40}}}
    return Stack(sim_factory("empty", speed=SPEED, extra=demand))


@pytest.fixture
def served(stack, prometheus_scraping, slack_fake, prefect_server):
    """The stack serving, scraped by Prometheus, and the Blocks a rollout uses (the policy's
    values from the test's `policy` marker)."""
    def make(**policy: Any) -> dict[str, str]:
        stack.deploy()
        prometheus = prometheus_scraping(host_port(stack.sim.url))
        return save_blocks(stack, prometheus, slack_fake, **policy)
    return make


def rollout(blocks: dict[str, str], **params: Any) -> Any:
    return asyncio.run(serving_rollout(pool=f"{NS}/{MODEL}", **blocks, **params,
                                       return_state=True))


def artifacts(state: Any) -> dict[str, Any]:
    """The run's artifacts by key: a table's rows, a markdown's text."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> list[Any]:
        async with get_client() as c:
            return await c.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))

    found = {}
    for a in asyncio.run(read()):
        if a.key:
            found[a.key] = json.loads(a.data) if a.type == "table" and isinstance(
                a.data, str) else a.data
    return found


def timeline(state: Any) -> list[tuple[int, str]]:
    """(new %, outcome) of each step, from the run's timeline artifact."""
    rows = artifacts(state)["serving-rollout-timeline"]
    return [(int(r["new %"]), r["outcome"]) for r in rows]


def new_pool_of(stack: Stack) -> str:
    [new] = [p for p in stack.pools() if p != MODEL]
    return new


def test_a_good_version_rolls_out_to_100_percent_and_the_old_is_scaled_to_zero(
        stack, served):
    blocks = served()
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    summary = state.result()
    assert timeline(state) == [(1, "passed"), (5, "passed"), (25, "passed"), (50, "passed")]
    found = artifacts(state)
    rows = found["serving-rollout-timeline"]
    assert all("ttft_p90" in r["gates"] and "limit" in r["gates"] and r["verdict"] == "pass"
               for r in rows)
    assert all(int(r["requests new/old"].split("/")[0]) >= 40 for r in rows)
    summary_md = found["serving-rollout-summary"]
    assert ": completed" in summary_md and "gates at step 4 (50 %)" in summary_md
    assert "mode       blue-green" in found["serving-rollout-plan"]
    new = new_pool_of(stack)
    assert new.startswith(f"{MODEL}-") and summary["new_pool"] == new
    assert stack.weights() == {MODEL: 0, new: 100}
    annotations = stack.route()["metadata"]["annotations"]
    assert ROLLOUT not in annotations and annotations[ROLLOUT_LAST].startswith("completed")
    deployments = stack.deployments()
    assert deployments[MODEL] == 0  # kept, scaled to 0 after keep_old_s
    [new_deployment] = [d for d in deployments if d.startswith(MODEL + "-") and "epp" not in d]
    assert deployments[new_deployment] == 2
    assert stack.ready_pods(new) == 2  # the new pods carry the new pool's app label
    pod = stack.core.list_namespaced_pod(NS, label_selector=f"app={new}").items[0]
    assert pod.spec.containers[0].image == "vllm/vllm-openai:v0.12.0"
    assert "--served-model-name" in pod.spec.containers[0].args  # clients see the same model
    # The new pool has its own endpoint picker, pointed at it.
    epp = stack.apps.read_namespaced_deployment(f"{new}-epp", NS)
    assert epp.spec.template.spec.containers[0].args[:2] == ["--pool-name", new]
    pool = stack.custom.get_namespaced_custom_object(GROUP, "v1", NS, "inferencepools", new)
    assert pool["spec"]["endpointPickerRef"]["name"] == f"{new}-epp"
    stack.core.read_namespaced_service(f"{new}-epp", NS)


def test_a_bad_version_is_rolled_back_at_the_first_step_with_enough_requests(
        stack, served, slack_fake):
    blocks = served(min_requests=100)
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=2,
                    error_rate=0.08)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "failed")]  # the 1 % window waited, then failed
    assert "error_ratio" in state.message
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    annotations = stack.route()["metadata"]["annotations"]
    assert ROLLOUT not in annotations and annotations[ROLLOUT_LAST].startswith("rolled-back")
    deployments = stack.deployments()
    assert deployments[MODEL] == 2 and stack.ready_pods(MODEL) == 2  # the old kept serving
    assert all(replicas == 0 for name, replicas in deployments.items()
               if name not in (MODEL, f"{MODEL}-epp"))  # the new version and its picker
    # A message says which gate failed, with the numbers.
    [message] = [m for m in slack_fake.messages() if m.get("channel") in ("#rollouts",)
                 or "rolled back" in m.get("text", "")]
    text = json.dumps(message["blocks"])
    assert "rolled back" in message["text"] and "error_ratio" in text and "FAIL" in text


def prometheus_missing_new_pools(tmp_path) -> Any:
    """A real Prometheus whose scrape config drops the series of every pool but the old one
    (as a PodMonitor that selects the old pods' labels only would)."""
    import subprocess
    import urllib.request

    import yaml

    from gpuops.deployments.services import free_port

    def start(target: str) -> tuple[str, subprocess.Popen]:
        root = tmp_path / "prometheus-missing"
        root.mkdir()
        (root / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [{"job_name": "sim", "static_configs": [{"targets": [target]}],
                                "metric_relabel_configs": [{
                                    "source_labels": ["inference_pool"], "action": "drop",
                                    "regex": f"{MODEL}-[0-9a-f]{{6}}"}]}]}))
        port = free_port()
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={root / 'prometheus.yml'}",
             f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200,
                 timeout=20, message="Prometheus ready")
        return url, proc

    return start


def test_missing_metrics_fail_closed_and_nothing_is_left_half_done(
        stack, slack_fake, prefect_server, tmp_path):
    stack.deploy()
    url, proc = prometheus_missing_new_pools(tmp_path)(host_port(stack.sim.url))
    try:
        blocks = save_blocks(stack, url, slack_fake)
        before = stack.snapshot()
        state = rollout(blocks, image="vllm/vllm-openai:v0.12.0", args=["--max-num-seqs=512"])
    finally:
        proc.terminate()
        proc.wait(10)

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(1, "failed")]
    assert "no data" in state.message and "no vllm:request_success_total series" in \
        state.message
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    after = stack.snapshot()
    assert after["deployments"][MODEL] == before["deployments"][MODEL] == 2
    assert all(n == 0 for d, n in after["deployments"].items()
               if d not in before["deployments"])
    assert ROLLOUT not in (after["route"][1] or {})
    assert stack.ready_pods(MODEL) == 2


BAD_PARAMETERS = [
    ({"pool": f"{NS}/no-such-pool", "image": "vllm/vllm-openai:v0.12.0"}, "pool",
     "no InferencePool 'no-such-pool'"),
    ({"image": "vllm/vllm-openai:v0.12.0", "steps": [1, 50, 20, 100]}, "steps[2]",
     "must be above the step before it"),
    ({"image": "vllm/vllm-openai:v0.12.0", "steps": [1, 5, 50]}, "steps", "must end at 100"),
    ({"image": "vllm/vllm-openai:v0.12.0", "gates": [{"metric": "ttft_p95", "factor": 1.2}]},
     "gates[0].metric", "unknown metric 'ttft_p95'"),
    ({"image": "not an image"}, "image", "container image reference"),
    ({}, "image", "no new version given"),
    ({"image": OLD_IMAGE}, "image", "the new version is the one serving now"),
    ({"args": ["max-num-seqs=512"]}, "args[0]", "must be `--flag=value`"),
    ({"image": "vllm/vllm-openai:v0.12.0", "mode": "blue-green"}, "mode",
     "blue-green needs room for 2 new replica(s)"),
    ({"image": "vllm/vllm-openai:v0.12.0", "window_s": -4}, "window_s", "must be > 0"),
]


def test_bad_parameters_get_clear_errors_naming_the_field_and_change_nothing(
        sim_factory, slack_fake, prefect_server):
    stack = Stack(sim_factory("empty", speed=SPEED), gpus=3)  # room for 1 more replica only
    stack.deploy()
    blocks = save_blocks(stack, "http://127.0.0.1:9", slack_fake)
    before = stack.snapshot()
    for params, field, message in BAD_PARAMETERS:
        params = {"pool": f"{NS}/{MODEL}", **params}
        state = asyncio.run(serving_rollout(**blocks, **params, return_state=True))
        assert state.is_failed(), (params, state.message)
        assert f"{field}: " in state.message and message in state.message, state.message
    assert stack.snapshot() == before


class RolloutThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(serving_rollout(**params, return_state=True))


def _receiver(slack_fake) -> Receiver:
    conn = SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                           base_url=slack_fake.base_url)
    port = free_port()
    runner = slack_fake.loop.run(serve_http(build_receiver(conn), "127.0.0.1", port))
    slack_fake.loop.on_stop(runner.cleanup)
    return Receiver(f"http://127.0.0.1:{port}/slack/events")


def _approval_request(slack_fake) -> dict:
    def find() -> dict | None:
        return next((m for m in slack_fake.messages()
                     if any(b.get("type") == "header" and "Approval needed" in b["text"]["text"]
                            for b in m.get("blocks") or [])), None)
    return wait_for(find, timeout=120, message="the approval request in Slack")


def test_a_rejection_before_100_percent_rolls_back_and_the_old_version_keeps_serving(
        stack, served, slack_fake):
    blocks = served(approve="final")
    slack_fake.post("/_fake/usergroups", {"usergroup": "SOPS", "users": []})
    receiver = _receiver(slack_fake)
    run = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0", **blocks)

    message = _approval_request(slack_fake)
    text = json.dumps(message["blocks"])
    assert "to 100 %" in message["text"]
    # The approver sees every judged step and each gate's numbers so far.
    for shown in ("step 4 (50 %)", "ttft_p90", "error_ratio", "limit", "passed"):
        assert shown in text, shown
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 50, new: 50}  # nothing beyond 50 % before the answer
    wait_paused(run_id_of(message))
    assert receiver.click(message, "gpuops_reject", "UALICE")[0] == 200
    state = run.result(timeout=120)

    assert state.name == "RolledBack", state.message
    assert "not approved" in state.message and "UALICE" in state.message
    assert timeline(state)[-1] == (100, "rejected")
    assert stack.weights() == {MODEL: 100, new: 0}
    deployments = stack.deployments()
    assert deployments[MODEL] == 2 and stack.ready_pods(MODEL) == 2
    assert deployments[new] == 0  # the new Deployment bears the new pool's name
    assert ROLLOUT not in stack.route()["metadata"]["annotations"]


def _record(stack: Stack) -> dict | None:
    text = (stack.route()["metadata"].get("annotations") or {}).get(ROLLOUT)
    return json.loads(text) if text else None


async def _mark_crashed(run_id: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    async with get_client() as c:
        await c.set_flow_run_state(uuid.UUID(run_id), Crashed(message="process killed"),
                                   force=True)


def test_a_run_killed_mid_rollout_is_resumed_by_the_next_run(stack, served, tmp_path):
    # The killed run's slots free themselves after their 60 s lease: the next run waits.
    blocks = served(lock_timeout_s=150)
    params = {"pool": f"{NS}/{MODEL}", "image": "vllm/vllm-openai:v0.12.0", **blocks}
    code = ("import asyncio, json, sys; from gpuops.flows.serving_rollout import "
            "serving_rollout; asyncio.run(serving_rollout(**json.loads(sys.argv[1])))")
    killed = subprocess.Popen([sys.executable, "-c", code, json.dumps(params)],
                              stdout=subprocess.DEVNULL,
                              stderr=(tmp_path / "killed.log").open("w"),
                              start_new_session=True)
    try:
        record = wait_for(lambda: (r := _record(stack)) and r["weight"] == 5 and r,
                          timeout=120, interval=0.2, message="the rollout at its 5 % step")
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(10)
    new = record["new_pool"]
    # What the crash left: the route points at two serving versions, and says so.
    assert stack.weights() == {MODEL: 95, new: 5}
    assert stack.ready_pods(MODEL) == 2 and stack.ready_pods(new) == 2
    assert _record(stack)["run"] == record["run"]
    asyncio.run(_mark_crashed(record["run"]))  # what Prefect's heartbeat detection does

    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    steps = timeline(state)
    assert steps[0][0] == 5 and [w for w, _ in steps] == [5, 25, 50]  # resumed, not restarted
    assert all(outcome == "passed" for _, outcome in steps)
    assert stack.weights() == {MODEL: 0, new: 100}
    assert _record(stack) is None
    assert stack.pools() == sorted([MODEL, new])  # the same new version, not a second one
    assert stack.deployments()[new] == 2 and stack.deployments()[MODEL] == 0


def test_two_rollouts_on_one_pool_never_interleave(stack, served, slack_fake):
    blocks = served(approve="final", lock_timeout_s=2)
    receiver = _receiver(slack_fake)
    first = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0", **blocks)
    message = _approval_request(slack_fake)  # the first run waits at 50 %, holding the pool
    wait_paused(run_id_of(message))
    new = new_pool_of(stack)
    before = stack.snapshot()

    # Another version on the same pool, and a rollout from the first one's new pool (same
    # route): both end Busy and change nothing.
    for pool, image in ((MODEL, "vllm/vllm-openai:v0.13.0"), (new, "vllm/vllm-openai:v0.13.0")):
        other = asyncio.run(serving_rollout(pool=f"{NS}/{pool}", image=image, **blocks,
                                            return_state=True))
        assert other.name == "Busy" and other.is_failed(), other.message
        assert "nothing was changed" in other.message
    assert stack.snapshot() == before

    assert receiver.click(message, "gpuops_approve", "UALICE")[0] == 200
    state = first.result(timeout=120)
    assert state.is_completed(), state.message
    assert stack.weights() == {MODEL: 0, new: 100}


def _no_pod_pending(stack: Stack) -> bool:
    pods = stack.core.list_namespaced_pod(NS).items
    return all(p.status.phase == "Running" for p in pods if p.metadata.deletion_timestamp is None)


def _failed_scheduling(stack: Stack) -> list[str]:
    return [e.involved_object.name for e in stack.core.list_namespaced_event(NS).items
            if e.reason == "FailedScheduling"]


@pytest.fixture
def full_stack(sim_factory) -> Stack:
    """Four replicas on a node with four GPUs: no room for a new copy beside them."""
    demand = {"demand": {MODEL: {"baseRps": 40, "peakRps": 40}}}
    return Stack(sim_factory("empty", speed=SPEED, extra=demand), gpus=4)


def test_without_spare_gpus_fixed_capacity_moves_one_replica_at_a_time_to_100_percent(
        full_stack, prometheus_scraping, slack_fake, prefect_server):
    stack = full_stack
    stack.deploy(replicas=4)
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         min_requests=30)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.is_completed(), state.message
    assert state.result()["mode"] == "fixed-capacity"
    assert timeline(state) == [(25, "passed"), (50, "passed"), (75, "passed")]
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100}
    assert stack.deployments()[MODEL] == 0 and stack.ready_pods(new) == 4
    # New replicas were only created once an old one had given its GPU back: none waited.
    assert _no_pod_pending(stack) and _failed_scheduling(stack) == []


def test_a_bad_version_in_fixed_capacity_mode_is_rolled_back_to_the_old_replicas(
        full_stack, prometheus_scraping, slack_fake, prefect_server):
    stack = full_stack
    stack.deploy(replicas=4)
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         min_requests=30)
    stack.sim.fault("bad-version", image="vllm/vllm-openai:v0.12.*", ttft_factor=2,
                    error_rate=0.1)
    state = rollout(blocks, image="vllm/vllm-openai:v0.12.0")

    assert state.name == "RolledBack", state.message
    assert timeline(state) == [(25, "failed")]
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 100, new: 0}
    assert stack.deployments()[new] == 0 and stack.deployments()[MODEL] == 4
    wait_for(lambda: stack.ready_pods(MODEL) == 4 and _no_pod_pending(stack), timeout=60,
             interval=0.2, message="the old version back at 4 Ready replicas, nothing Pending")
