"""The serving-rollout stack the end-to-end tests share: simcluster over HTTP (a fast clock,
vLLM replicas behind InferencePools with their endpoint pickers, an HTTPRoute), the Blocks a
rollout reads, and readers of what a run left (weights, record, timeline artifact)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from typing import Any

from kubernetes import client

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.blocks.rollout import RolloutPolicy
from gpuops.common.annotations import ROLLOUT
from gpuops.deployments.services import free_port
from gpuops.flows.serving_rollout import serving_rollout
from gpuops.sensors.slack_receiver import build_receiver, serve_http
from tests import helpers
from tests.helpers import wait_for
from tests.test_approvals import SIGNING_SECRET, Receiver

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
        """`gpus` 0: no node made here (the scenario's node pools have them)."""
        self.sim = sim
        self.core = client.CoreV1Api(sim.api)
        self.apps = client.AppsV1Api(sim.api)
        self.custom = client.CustomObjectsApi(sim.api)
        self.core.create_namespace({"metadata": {"name": NS}})
        if not gpus:
            return
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
    # The old pool as the baseline and the steps as given (not the defaults, which take a
    # fresh copy when there is room and adapt the first step to traffic): the tests that
    # want those name them.
    values = {"window_s": 4, "step_timeout_s": 20, "poll_s": 1, "min_requests": 40,
              "ready_timeout_s": 60, "warmup_requests": 5, "warmup_interval_s": 1,
              "keep_old_s": 1, "approve": "none", "prometheus_url": prometheus,
              "notify_channel": "#rollouts", "baseline": "none", "adapt_steps": False,
              **policy}

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


class RolloutThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(serving_rollout(**params, return_state=True))


def start_receiver(slack_fake) -> Receiver:
    conn = SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                           base_url=slack_fake.base_url)
    port = free_port()
    runner = slack_fake.loop.run(serve_http(build_receiver(conn), "127.0.0.1", port))
    slack_fake.loop.on_stop(runner.cleanup)
    return Receiver(f"http://127.0.0.1:{port}/slack/events")


def approval_request(slack_fake) -> dict:
    def find() -> dict | None:
        return next((m for m in slack_fake.messages()
                     if any(b.get("type") == "header" and "Approval needed" in b["text"]["text"]
                            for b in m.get("blocks") or [])), None)
    return wait_for(find, timeout=120, message="the approval request in Slack")


def rollout_record(stack: Stack) -> dict | None:
    text = (stack.route()["metadata"].get("annotations") or {}).get(ROLLOUT)
    return json.loads(text) if text else None


async def mark_crashed(run_id: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    async with get_client() as c:
        await c.set_flow_run_state(uuid.UUID(run_id), Crashed(message="process killed"),
                                   force=True)


def no_pod_pending(stack: Stack) -> bool:
    pods = stack.core.list_namespaced_pod(NS).items
    return all(p.status.phase == "Running" for p in pods if p.metadata.deletion_timestamp is None)


def failed_scheduling(stack: Stack) -> list[str]:
    return [e.involved_object.name for e in stack.core.list_namespaced_event(NS).items
            if e.reason == "FailedScheduling"]
