"""The simulated kubelet, seen through the official client: pods run, fail and leave evidence
the way they do on a real node. Pods are bound with `spec.nodeName`, so the scheduler is not
involved; time-dependent behaviour is reached by advancing the virtual clock."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpuops.simcluster.kubelet.backoff import (
    BackoffEntry,
    after_restart,
    delay_before_restart,
    go_duration,
)
from tests.helpers import wait_for

NS = "default"


# --- helpers ---------------------------------------------------------------------------------

@pytest.fixture
def core(sim) -> client.CoreV1Api:
    api = client.CoreV1Api(sim.api)
    api.create_node({
        "metadata": {"name": "gpu-node-1", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.20.0.7"}],
            "capacity": {"cpu": "96", "memory": "1024Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "96", "memory": "1000Gi", "nvidia.com/gpu": "8",
                            "pods": "110"}}})
    return api


def make_pod(core: client.CoreV1Api, name: str, *, image: str = "ghcr.io/acme/api:1.4.2",
             annotations: dict | None = None, restart_policy: str = "Always",
             gpus: int = 0, labels: dict | None = None, init: list | None = None,
             **container: object) -> None:
    app = {"name": "app", "image": image, **container}
    if gpus:
        app["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = {"nodeName": "gpu-node-1", "restartPolicy": restart_policy, "containers": [app]}
    if init:
        spec["initContainers"] = init
    core.create_namespaced_pod(NS, {"metadata": {"name": name, "labels": labels or {},
                                                 "annotations": annotations or {}},
                                    "spec": spec})


def pod(core: client.CoreV1Api, name: str) -> client.V1Pod:
    return core.read_namespaced_pod(name, NS)


def app_status(core: client.CoreV1Api, name: str) -> client.V1ContainerStatus | None:
    statuses = pod(core, name).status.container_statuses or []
    return next((s for s in statuses if s.name == "app"), None)


def wait_running(core: client.CoreV1Api, name: str, sim, *, ready: bool = True) -> None:
    sim.advance(3)

    def running() -> bool:
        p = pod(core, name)
        status = app_status(core, name)
        return p.status.phase == "Running" and status is not None and \
            status.state.running is not None and (status.ready or not ready)

    wait_for(running, message=f"pod {name} running")


def events(core: client.CoreV1Api, name: str, kind: str = "Pod") -> list[client.CoreV1Event]:
    return [e for e in core.list_namespaced_event(NS).items
            if e.involved_object.name == name and e.involved_object.kind == kind]


def reasons(core: client.CoreV1Api, name: str) -> set[str]:
    return {e.reason for e in events(core, name)}


def log(core: client.CoreV1Api, name: str, **kwargs: object) -> str:
    return core.read_namespaced_pod_log(name, NS, container="app", **kwargs)


# --- pure back-off schedule ------------------------------------------------------------------

def test_crashloop_backoff_doubles_from_10s_to_a_5_minute_cap_and_resets_after_10_minutes():
    entry, delays, t = None, [], 0.0
    for _ in range(8):
        delay = delay_before_restart(entry, t)
        delays.append(delay)
        t += delay
        entry = after_restart(entry, t - delay, t)
        t += 5  # the container crashes 5 s after each start
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300]
    assert delay_before_restart(BackoffEntry(300, 0), 601) == 0  # long-lived: reset
    assert [go_duration(s) for s in (10, 80, 160, 300)] == ["10s", "1m20s", "2m40s", "5m0s"]


class _QuietWorld:
    """The lifecycle's questions answered for a pod alone on a node: images pull, configs
    exist, and one crashloop fault is active."""

    def __init__(self, fault) -> None:
        self.fault, self.images = fault, set()

    def pull_error(self, pod, spec):
        return None

    def image_present(self, pod, image):
        return image in self.images

    def image_pulled(self, pod, image):
        self.images.add(image)

    def config_error(self, pod, refs):
        return None

    def faults(self, pod, container):
        return [self.fault]

    def fault_fired(self, pod, container, fault):
        fault.fired += 1


def test_a_ten_minute_clock_jump_replays_the_crash_loop_at_its_own_times():
    from gpuops.simcluster.kubelet.containerlogs import LogContext
    from gpuops.simcluster.kubelet.lifecycle import advance
    from gpuops.simcluster.kubelet.runtime import Fault, Outbox, new_pod_runtime
    from gpuops.simcluster.kubelet.spec import pod_spec_view

    view = pod_spec_view({"metadata": {}, "spec": {"containers": [
        {"name": "app", "image": "ghcr.io/acme/api:1.4.2"}]}})
    pod = new_pod_runtime("ns", "p", "uid-1", "node", view, now=0.0, host_ip="10.0.0.1",
                          pod_ip="10.1.0.2", ctx=LogContext("p", "ns"))
    out = Outbox()
    advance(pod, 600.0, _QuietWorld(Fault("crashloop", {"after_seconds": 5}, 0.0)), out)
    app = pod.containers[0]
    # Started at 2 s (pull); each instance runs 5 s; back-offs 0, 10, 20, 40, 80, 160, 300.
    starts = [2, 7, 22, 47, 92, 177, 342]
    assert app.restart_count == len(starts) - 1
    assert app.stage == "backoff" and "back-off 5m0s" in app.waiting_message
    assert app.terminated["finishedAt"].endswith("00:05:47Z")  # 342 + 5 s after the epoch
    assert sum(1 for op, *_ in out.logs if op == "rotate") == len(starts)
    assert len([e for e in out.events if e[2] == "Started"]) == len(starts)


# --- starting --------------------------------------------------------------------------------

def test_pod_bound_to_a_node_runs_and_becomes_ready_with_full_status(sim, core):
    make_pod(core, "web", readinessProbe={"httpGet": {"path": "/healthz", "port": 8080}})
    wait_running(core, "web", sim)
    p = pod(core, "web")
    assert p.status.host_ip == "10.20.0.7"
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", p.status.pod_ip)
    assert p.status.start_time is not None
    conditions = {c.type: c.status for c in p.status.conditions}
    assert conditions["Initialized"] == conditions["ContainersReady"] == "True"
    assert conditions["Ready"] == conditions["PodScheduled"] == "True"
    status = app_status(core, "web")
    assert status.started and status.restart_count == 0 and status.last_state.terminated is None
    assert status.container_id.startswith("containerd://")
    assert status.image == "ghcr.io/acme/api:1.4.2"
    assert status.image_id.startswith("ghcr.io/acme/api@sha256:")
    assert {"Pulling", "Pulled", "Created", "Started"} <= reasons(core, "web")
    started = next(e for e in events(core, "web") if e.reason == "Started")
    assert started.message == "Started container app" and started.source.component == "kubelet"


def test_image_pull_and_model_load_delay_readiness(sim, core):
    make_pod(core, "llm", image="vllm/vllm-openai:v0.9.1", gpus=1,
             annotations={"sim.gpuops.io/pull-seconds": "60", "sim.gpuops.io/load-seconds": "90"},
             readinessProbe={"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10})
    sim.advance(30)
    wait_for(lambda: app_status(core, "llm") is not None, message="container status")
    assert app_status(core, "llm").state.waiting.reason == "ContainerCreating"
    sim.advance(40)  # pulled at 60 s, loading
    wait_for(lambda: app_status(core, "llm").state.running, message="container started")
    assert not app_status(core, "llm").ready
    assert pod(core, "llm").status.phase == "Running"
    sim.advance(100)
    wait_for(lambda: app_status(core, "llm").ready, message="model loaded and ready")
    assert "Model loading took" in log(core, "llm")
    unhealthy = [e for e in events(core, "llm") if e.reason == "Unhealthy"]
    assert unhealthy and unhealthy[0].message.startswith("Readiness probe failed: Get ")


def test_init_containers_run_to_completion_in_order_before_the_app(sim, core):
    init = [{"name": "fetch-weights", "image": "busybox:1.36"},
            {"name": "warm-cache", "image": "busybox:1.36"}]
    make_pod(core, "with-init", init=init,
             annotations={"sim.gpuops.io/run-seconds.fetch-weights": "5"})
    sim.advance(2)
    wait_for(lambda: pod(core, "with-init").status.init_container_statuses,
             message="init statuses")
    assert pod(core, "with-init").status.phase == "Pending"
    sim.advance(10)
    wait_running(core, "with-init", sim)
    first, second = pod(core, "with-init").status.init_container_statuses
    for status in (first, second):
        assert status.state.terminated.reason == "Completed"
        assert status.state.terminated.exit_code == 0
    assert first.state.terminated.finished_at <= second.state.terminated.started_at
    assert second.state.terminated.finished_at <= app_status(core, "with-init").state \
        .running.started_at
    init_log = core.read_namespaced_pod_log("with-init", NS, container="fetch-weights")
    assert "busybox:1.36" in init_log


def test_sidecar_keeps_running_and_a_job_pod_with_it_succeeds(sim, core):
    sidecar = [{"name": "proxy", "image": "envoyproxy/envoy:v1.31.0", "restartPolicy": "Always"}]
    make_pod(core, "job-with-sidecar", init=sidecar, restart_policy="Never",
             annotations={"sim.gpuops.io/run-seconds": "30"})
    wait_running(core, "job-with-sidecar", sim)
    proxy = pod(core, "job-with-sidecar").status.init_container_statuses[0]
    assert proxy.state.running is not None and proxy.started
    sim.advance(40)
    wait_for(lambda: pod(core, "job-with-sidecar").status.phase == "Succeeded",
             message="pod Succeeded")
    p = pod(core, "job-with-sidecar")
    assert p.status.init_container_statuses[0].state.terminated is not None
    ready = next(c for c in p.status.conditions if c.type == "Ready")
    assert ready.status == "False" and ready.reason == "PodCompleted"


def test_job_pod_that_exits_zero_succeeds_and_nonzero_fails(sim, core):
    make_pod(core, "train-ok", restart_policy="Never", image="nvcr.io/nvidia/pytorch:24.05-py3",
             annotations={"sim.gpuops.io/run-seconds": "20"})
    make_pod(core, "train-bad", restart_policy="Never", image="nvcr.io/nvidia/pytorch:24.05-py3",
             annotations={"sim.gpuops.io/run-seconds": "20", "sim.gpuops.io/exit-code": "2"})
    sim.advance(30)
    wait_for(lambda: pod(core, "train-ok").status.phase == "Succeeded", message="Succeeded")
    wait_for(lambda: pod(core, "train-bad").status.phase == "Failed", message="Failed")
    ok = app_status(core, "train-ok").state.terminated
    assert (ok.exit_code, ok.reason) == (0, "Completed")
    bad = app_status(core, "train-bad").state.terminated
    assert (bad.exit_code, bad.reason) == (2, "Error")
    assert app_status(core, "train-bad").restart_count == 0


# --- failures --------------------------------------------------------------------------------

def test_crashloop_backs_off_with_doubling_delays_and_keeps_the_previous_log(sim, core):
    make_pod(core, "crashy")
    wait_running(core, "crashy", sim)
    sim.fault("crashloop", f"{NS}/crashy", after_seconds=30, exit_code=3)
    sim.advance(31)  # first crash: restarted at once
    wait_for(lambda: app_status(core, "crashy").restart_count == 1 and
             app_status(core, "crashy").state.running, message="first restart")
    last = app_status(core, "crashy").last_state.terminated
    assert (last.exit_code, last.reason) == (3, "Error")
    assert last.started_at < last.finished_at
    previous, current = log(core, "crashy", previous=True), log(core, "crashy")
    assert "Traceback (most recent call last):" in previous
    assert "ConnectionRefusedError: [Errno 111] Connection refused" in previous
    assert "Traceback" not in current and current

    sim.advance(31)  # second crash: 10 s back-off
    wait_for(lambda: app_status(core, "crashy").state.waiting, message="CrashLoopBackOff")
    waiting = app_status(core, "crashy").state.waiting
    assert waiting.reason == "CrashLoopBackOff"
    uid = pod(core, "crashy").metadata.uid
    assert waiting.message == (f"back-off 10s restarting failed container=app "
                               f"pod=crashy_default({uid})")
    assert "Traceback" in log(core, "crashy")  # waiting: the last terminated instance
    sim.advance(11)
    wait_for(lambda: app_status(core, "crashy").restart_count == 2, message="second restart")
    sim.advance(31)
    wait_for(lambda: (app_status(core, "crashy").state.waiting or
                      client.V1ContainerStateWaiting()).message and
             "back-off 20s" in app_status(core, "crashy").state.waiting.message,
             message="back-off doubled to 20s")
    backoff = next(e for e in events(core, "crashy") if e.reason == "BackOff")
    assert backoff.type == "Warning"
    assert backoff.message == f"Back-off restarting failed container app in pod crashy_default({uid})"
    assert pod(core, "crashy").status.phase == "Running"


def test_recover_stops_a_crash_loop(sim, core):
    make_pod(core, "flaky")
    wait_running(core, "flaky", sim)
    sim.fault("crashloop", f"{NS}/flaky", after_seconds=5)
    sim.advance(6)
    wait_for(lambda: app_status(core, "flaky").restart_count == 1, message="restart")
    sim.fault("recover", f"{NS}/flaky")
    sim.advance(60)
    wait_running(core, "flaky", sim)
    assert app_status(core, "flaky").restart_count == 1


def test_oom_fault_leaves_oomkilled_exit_137_in_last_state(sim, core):
    make_pod(core, "hungry", resources={"limits": {"memory": "2Gi"}})
    wait_running(core, "hungry", sim)
    sim.fault("oom", f"{NS}/hungry", once=True)
    sim.advance(6)
    wait_for(lambda: app_status(core, "hungry").restart_count == 1, message="OOM restart")
    last = app_status(core, "hungry").last_state.terminated
    assert (last.reason, last.exit_code) == ("OOMKilled", 137)
    sim.advance(60)
    wait_running(core, "hungry", sim)
    assert app_status(core, "hungry").restart_count == 1  # once: it runs normally again


def test_memory_growth_past_the_limit_is_oomkilled_without_a_fault(sim, core):
    make_pod(core, "leaky", resources={"limits": {"memory": "1Gi"}},
             annotations={"sim.gpuops.io/memory-growth-mib-per-min": "100"})
    wait_running(core, "leaky", sim)
    sim.advance(600)  # (1024 - 102.4) MiB at 100 MiB/min: about 9.2 min
    wait_for(lambda: app_status(core, "leaky").restart_count >= 1, message="OOMKilled")
    assert app_status(core, "leaky").last_state.terminated.reason == "OOMKilled"


def test_cuda_oom_and_nccl_timeout_leave_their_characteristic_logs_and_exit_codes(sim, core):
    for name in ("trainer-0", "trainer-1"):
        make_pod(core, name, image="nvcr.io/nvidia/pytorch:24.05-py3", gpus=8)
    wait_running(core, "trainer-0", sim)
    wait_running(core, "trainer-1", sim)
    sim.fault("cuda-oom", f"{NS}/trainer-0", after_seconds=5)
    sim.fault("nccl-timeout", f"{NS}/trainer-1", after_seconds=5, rank=3)
    sim.advance(6)
    wait_for(lambda: app_status(core, "trainer-0").restart_count == 1, message="cuda-oom")
    wait_for(lambda: app_status(core, "trainer-1").restart_count == 1, message="nccl")
    assert app_status(core, "trainer-0").last_state.terminated.exit_code == 1
    assert ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
            "a total capacity of 79.10 GiB of which 1.02 GiB is free.") in \
        log(core, "trainer-0", previous=True)
    assert app_status(core, "trainer-1").last_state.terminated.exit_code == 134
    nccl = log(core, "trainer-1", previous=True)
    assert "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4211, " \
           "OpType=ALLREDUCE" in nccl
    assert "ran for 600021 milliseconds before timing out." in nccl


def test_liveness_failure_kills_the_container_with_events(sim, core):
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
             "failureThreshold": 3}
    make_pod(core, "hung", livenessProbe=probe)
    wait_running(core, "hung", sim)
    sim.fault("liveness", f"{NS}/hung")
    sim.advance(31)
    wait_for(lambda: app_status(core, "hung").restart_count == 1, message="liveness restart")
    last = app_status(core, "hung").last_state.terminated
    assert (last.exit_code, last.reason) == (137, "Error")
    unhealthy = next(e for e in events(core, "hung") if e.reason == "Unhealthy")
    assert unhealthy.message == "Liveness probe failed: HTTP probe failed with statuscode: 500"
    assert unhealthy.count == 3
    killing = next(e for e in events(core, "hung") if e.reason == "Killing")
    assert killing.message == "Container app failed liveness probe, will be restarted"


def test_model_load_longer_than_the_startup_probe_allows_is_killed_and_restarted(sim, core):
    probe = {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10,
             "failureThreshold": 3}
    make_pod(core, "slow-load", image="vllm/vllm-openai:v0.9.1", startupProbe=probe,
             annotations={"sim.gpuops.io/load-seconds": "120"})
    sim.advance(25)  # started at 2 s, third failed probe at 22 s
    wait_for(lambda: app_status(core, "slow-load").restart_count >= 1, message="startup kill")
    assert app_status(core, "slow-load").last_state.terminated.exit_code == 137
    assert not app_status(core, "slow-load").started
    messages = {e.message for e in events(core, "slow-load")}
    assert "Container app failed startup probe, will be restarted" in messages
    assert any(m.startswith("Startup probe failed: Get \"http://") for m in messages)


def test_liveness_fault_on_a_container_without_probe_is_refused(sim, core):
    make_pod(core, "no-probe")
    with pytest.raises(Exception, match="400"):
        sim.fault("liveness", f"{NS}/no-probe")


def test_bad_image_shows_err_image_pull_then_image_pull_backoff(sim, core):
    bad = "ghcr.io/acme/api:1.4.3-typo"
    sim.fault("image-pull", None, image=bad)
    make_pod(core, "bad-image", image=bad)
    sim.advance(1.5)
    wait_for(lambda: (app_status(core, "bad-image") or client.V1ContainerStatus(
        name="", image="", image_id="", ready=False, restart_count=0)).state and
        app_status(core, "bad-image").state.waiting.reason == "ErrImagePull",
        message="ErrImagePull")
    assert "rpc error: code = NotFound" in app_status(core, "bad-image").state.waiting.message
    sim.advance(3)
    wait_for(lambda: app_status(core, "bad-image").state.waiting.reason == "ImagePullBackOff",
             message="ImagePullBackOff")
    assert app_status(core, "bad-image").state.waiting.message == f'Back-off pulling image "{bad}"'
    messages = {e.message for e in events(core, "bad-image")}
    assert any(m.startswith(f'Failed to pull image "{bad}": rpc error: code = NotFound')
               for m in messages)
    assert {"Error: ErrImagePull", "Error: ImagePullBackOff"} <= messages
    assert pod(core, "bad-image").status.phase == "Pending"
    sim.fault("recover", None, image=bad)
    sim.advance(15)
    wait_running(core, "bad-image", sim)


def test_missing_configmap_blocks_the_container_until_it_exists(sim, core):
    env = [{"name": "MODEL_NAME", "valueFrom": {"configMapKeyRef": {
        "name": "model-config", "key": "MODEL_NAME"}}}]
    make_pod(core, "needs-config", env=env)
    sim.advance(3)
    wait_for(lambda: app_status(core, "needs-config") and
             app_status(core, "needs-config").state.waiting and
             app_status(core, "needs-config").state.waiting.reason ==
             "CreateContainerConfigError", message="CreateContainerConfigError")
    assert app_status(core, "needs-config").state.waiting.message == \
        'configmap "model-config" not found'
    assert "Error: configmap \"model-config\" not found" in \
        {e.message for e in events(core, "needs-config")}
    core.create_namespaced_config_map(NS, {"metadata": {"name": "model-config"},
                                           "data": {"MODEL_NAME": "llama-3.1-8b"}})
    wait_running(core, "needs-config", sim)


def test_missing_configmap_volume_keeps_the_pod_creating_with_failed_mount(sim, core):
    core.create_namespaced_pod(NS, {"metadata": {"name": "needs-volume"}, "spec": {
        "nodeName": "gpu-node-1",
        "volumes": [{"name": "cfg", "configMap": {"name": "serving-config"}}],
        "containers": [{"name": "app", "image": "ghcr.io/acme/api:1.4.2",
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]}]}})
    sim.advance(5)
    wait_for(lambda: "FailedMount" in reasons(core, "needs-volume"), message="FailedMount")
    failed = next(e for e in events(core, "needs-volume") if e.reason == "FailedMount")
    assert failed.message == ('MountVolume.SetUp failed for volume "cfg" : configmap '
                              '"serving-config" not found')
    assert app_status(core, "needs-volume").state.waiting.reason == "ContainerCreating"
    core.create_namespaced_config_map(NS, {"metadata": {"name": "serving-config"}})
    wait_running(core, "needs-volume", sim)


def test_config_error_fault_exits_with_a_keyerror(sim, core):
    make_pod(core, "misconfigured")
    wait_running(core, "misconfigured", sim)
    sim.fault("config-error", f"{NS}/misconfigured")
    sim.advance(2)
    wait_for(lambda: app_status(core, "misconfigured").restart_count == 1, message="restart")
    assert "KeyError: 'MODEL_NAME'" in log(core, "misconfigured", previous=True)


def test_gpu_xid_records_a_node_event_and_crashes_the_gpu_container(sim, core):
    make_pod(core, "gpu-job", image="nvcr.io/nvidia/pytorch:24.05-py3", gpus=8)
    wait_running(core, "gpu-job", sim)
    sim.fault("gpu-xid", f"{NS}/gpu-job", xid=79, gpu=3)
    sim.advance(2)
    wait_for(lambda: app_status(core, "gpu-job").restart_count == 1, message="xid crash")
    node_events = [e for e in events(core, "gpu-node-1", kind="Node") if e.reason == "GPUXid"]
    assert node_events and node_events[0].type == "Warning"
    assert node_events[0].message.startswith("Xid 79: GPU has fallen off the bus")
    node = core.read_node("gpu-node-1")
    history = json.loads(node.metadata.annotations["sim.gpuops.io/xid-events"])
    assert history[-1]["xid"] == 79 and history[-1]["gpu"] == 3
    assert history[-1]["pod"] == f"{NS}/gpu-job"
    assert "RuntimeError: CUDA error:" in log(core, "gpu-job", previous=True)


def test_gpu_xid_lands_on_the_gpu_the_pod_holds_in_the_dcgm_metrics(sim, core):
    make_pod(core, "first", image="nvcr.io/nvidia/pytorch:24.05-py3", gpus=2)
    make_pod(core, "second", image="nvcr.io/nvidia/pytorch:24.05-py3", gpus=2)
    wait_running(core, "second", sim)
    sim.fault("gpu-xid", f"{NS}/second", xid=48)
    sim.advance(2)
    wait_for(lambda: app_status(core, "second").restart_count == 1, message="xid crash")
    with urllib.request.urlopen(f"{sim.url}/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    xids = [line for line in metrics.splitlines()
            if line.startswith("DCGM_FI_DEV_XID_ERRORS") and line.endswith(" 48")]
    assert len(xids) == 1 and 'pod="second"' in xids[0]


def test_evict_fails_the_pod_with_the_kubelet_eviction_reason(sim, core):
    make_pod(core, "evictee")
    wait_running(core, "evictee", sim)
    sim.fault("evict", f"{NS}/evictee")
    wait_for(lambda: pod(core, "evictee").status.phase == "Failed", message="evicted")
    p = pod(core, "evictee")
    assert p.status.reason == "Evicted"
    assert p.status.message.startswith("The node was low on resource: memory.")
    assert any(c.type == "DisruptionTarget" and c.status == "True" for c in p.status.conditions)
    assert "Evicted" in reasons(core, "evictee")


def test_selector_fault_also_hits_pods_created_later(sim, core):
    make_pod(core, "batch-a", labels={"app": "batch"})
    wait_running(core, "batch-a", sim)
    result = sim.fault("crashloop", NS, selector="app=batch", after_seconds=5)
    assert result["rule"] and [p["pod"] for p in result["pods"]] == [f"{NS}/batch-a"]
    make_pod(core, "batch-b", labels={"app": "batch"})
    make_pod(core, "other", labels={"app": "web"})
    sim.advance(10)
    wait_for(lambda: app_status(core, "batch-b") and
             app_status(core, "batch-b").restart_count >= 1, message="later pod crashes")
    assert app_status(core, "batch-a").restart_count >= 1
    assert app_status(core, "other").restart_count == 0


# --- deletion and logs -----------------------------------------------------------------------

def test_deleting_a_running_pod_terminates_it_and_removes_it(sim, core):
    make_pod(core, "doomed")
    wait_running(core, "doomed", sim)
    core.delete_namespaced_pod("doomed", NS)
    assert pod(core, "doomed").metadata.deletion_timestamp is not None
    sim.advance(3)

    def gone() -> bool:
        try:
            pod(core, "doomed")
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(gone, message="pod removed")
    assert any(e.reason == "Killing" and e.message == "Stopping container app"
               for e in events(core, "doomed"))


def test_pods_of_a_deleted_node_are_removed(sim, core):
    make_pod(core, "stranded")
    wait_running(core, "stranded", sim)
    core.delete_node("gpu-node-1")
    wait_for(lambda: not [p for p in core.list_namespaced_pod(NS).items
                          if p.metadata.name == "stranded"], message="pod removed")


def test_a_not_ready_node_freezes_its_pods_until_it_is_back(sim, core):
    make_pod(core, "on-flaky-node")
    wait_running(core, "on-flaky-node", sim)
    sim.fault("node-notready", "gpu-node-1")
    core.delete_namespaced_pod("on-flaky-node", NS)
    sim.advance(30)
    time.sleep(0.5)  # the kubelet would have finished it by now, were the node up
    assert pod(core, "on-flaky-node").metadata.deletion_timestamp is not None  # Terminating
    sim.fault("node-ready", "gpu-node-1")
    wait_for(lambda: not [p for p in core.list_namespaced_pod(NS).items
                          if p.metadata.name == "on-flaky-node"], message="pod removed")


def test_logs_honour_tail_lines_and_timestamps(sim, core):
    make_pod(core, "chatty")
    wait_running(core, "chatty", sim)
    sim.advance(300)
    wait_for(lambda: len(log(core, "chatty").splitlines()) > 6, message="steady log lines")
    full = log(core, "chatty").splitlines()
    assert "ghcr.io/acme/api:1.4.2" in full[0]
    assert log(core, "chatty", tail_lines=2).splitlines() == full[-2:]
    stamped = log(core, "chatty", tail_lines=3, timestamps=True).splitlines()
    assert len(stamped) == 3
    for line, plain in zip(stamped, full[-3:]):
        stamp, _, rest = line.partition(" ")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", stamp)
        assert rest == plain


# --- bad input cannot break the cluster ---------------------------------------------------------

def _refusal(call) -> tuple[int, str]:
    import urllib.error
    with pytest.raises(urllib.error.HTTPError) as err:
        call()
    return err.value.code, json.loads(err.value.read())["message"]


@pytest.mark.parametrize(("kind", "params", "expected"), [
    ("crashloop", {"exit_code": 2**70}, "params.exit_code must be an integer from 0 to 255"),
    ("crashloop", {"exit_code": "boom"}, "params.exit_code must be an integer from 0 to 255"),
    ("crashloop", {"after_seconds": "soon"}, "params.after_seconds must be a number"),
    ("oom", {"after_seconds": -1}, "params.after_seconds must be a number from 0"),
    ("oom", {"once": "maybe"}, "params.once must be true or false"),
    ("image-pull", {"reason": "Gone"},
     "params.reason must be one of NotFound, Unauthorized, Timeout"),
    ("crashloop", {"exitcode": 3}, ("params.exitcode: unknown parameter of 'crashloop' "
                                    "(its parameters: selector, namespace, container, once, "
                                    "exit_code, error, after_seconds)")),
])
def test_fault_parameters_a_kind_cannot_take_are_refused_naming_the_field(sim, core, kind,
                                                                           params, expected):
    make_pod(core, "target")

    code, message = _refusal(lambda: sim.fault(kind, f"{NS}/target", **params))

    assert code == 400 and expected in message, message
    assert "gpuops sim fault --list" in message


def test_a_huge_exit_code_cannot_poison_the_cluster_wide_pod_list(sim, core):
    """An exit code no process can have used to reach the pod's status; every LIST and WATCH
    of pods then failed (the watcher went blind). It is refused at the door now."""
    make_pod(core, "victim")
    wait_running(core, "victim", sim)

    code, _ = _refusal(lambda: sim.fault("crashloop", f"{NS}/victim", exit_code=2**70,
                                         after_seconds=0.1))
    sim.advance(5)

    assert code == 400
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["victim"]


def test_a_pod_whose_status_cannot_be_stored_is_logged_once_and_lists_keep_working(
        sim, core, caplog):
    """The kubelet computes an exit code its status cannot hold (from an annotation): the
    write is refused as kube-apiserver refuses it, pod lists keep working, and the failing
    sync is logged once, not at every retry."""
    make_pod(core, "overflow", restart_policy="Never", annotations={
        "sim.gpuops.io/run-seconds": "30", "sim.gpuops.io/exit-code": "1e30"})
    wait_running(core, "overflow", sim)

    def failures() -> list[str]:
        return [r.getMessage() for r in caplog.records if "overflow" in r.getMessage()
                and "sync of" in r.getMessage()]
    sim.advance(30)
    wait_for(failures, message="the failed sync logged")
    for _ in range(5):  # retries back off: 5, 10, 20 ... virtual seconds
        sim.advance(120)
        time.sleep(0.3)  # let the loop retry: what is asserted is that nothing more appears

    assert len(failures()) == 1, failures()
    assert "exitCode" in failures()[0] and "32-bit integer" in failures()[0]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces().items] == ["overflow"]


def _deployment(core: client.CoreV1Api, name: str, replicas: int = 1) -> None:
    client.AppsV1Api(core.api_client).create_namespaced_deployment(NS, {
        "metadata": {"name": name}, "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "containers": [{"name": "app", "image": "ghcr.io/acme/api:1.4.2"}]}}}})


def _pods_of(core: client.CoreV1Api, name: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(NS, label_selector=f"app={name}").items


def _restarts(p: client.V1Pod) -> int:
    return sum(s.restart_count for s in p.status.container_statuses or [])


@pytest.mark.parametrize("target", [f"{NS}/web", f"deployment/{NS}/web"])
def test_a_workload_target_fails_its_pods_and_those_it_creates_later(sim, core, target):
    _deployment(core, "web")
    sim.advance(3)
    first = wait_for(lambda: [p for p in _pods_of(core, "web") if p.status.phase == "Running"],
                     message="the deployment's pod running")[0]

    result = sim.fault("crashloop", target, after_seconds=1)

    assert result["rule"] is True
    assert result["pods"] == [{"pod": f"{NS}/{first.metadata.name}", "container": "app"}]
    sim.advance(3)
    wait_for(lambda: _restarts(core.read_namespaced_pod(first.metadata.name, NS)) >= 1,
             message="the pod restarted")
    core.delete_namespaced_pod(first.metadata.name, NS, grace_period_seconds=0)
    sim.advance(3)

    def replacement_restarted() -> bool:
        sim.advance(2)
        return any(p.metadata.name != first.metadata.name and _restarts(p) >= 1
                   for p in _pods_of(core, "web"))
    wait_for(replacement_restarted, timeout=20, interval=0.2,
             message="the replacement pod hit too")


def test_a_target_that_names_nothing_says_which_namespace_and_what_is_there(sim, core):
    make_pod(core, "present")

    code, message = _refusal(lambda: sim.fault("crashloop", f"{NS}/absent"))
    assert code == 404
    assert message == ('no pod or workload named "absent" in namespace "default"; pods '
                       "there: present")
    code, message = _refusal(lambda: sim.fault("crashloop", "nowhere/absent"))
    assert code == 404
    assert message == 'namespace "nowhere" not found; namespaces: default'


def test_image_pull_on_a_running_pod_is_refused_with_what_to_do_instead(sim, core):
    """A running container pulls nothing until it starts again: the fault would silently
    change nothing, so it is refused, saying how to make a pull fail."""
    make_pod(core, "serving")
    wait_running(core, "serving", sim)

    code, message = _refusal(lambda: sim.fault("image-pull", f"{NS}/serving"))

    assert code == 400
    assert f"pod {NS}/serving is running" in message
    assert "--param image=IMAGE" in message and "deployment/NAMESPACE/NAME" in message
    assert app_status(core, "serving").state.running is not None
