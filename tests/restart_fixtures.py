"""Restart evidence as real clusters show it, one builder per cause (for the pure-logic tests).

Shapes follow what the kubelet, scheduler and node controllers write (reasons, messages,
exit codes) and what the software prints (PyTorch, NCCL, vLLM), not simcluster's wording.
"""

from __future__ import annotations

from typing import Any

from gpuops.tasks.restarts.evidence import (
    ContainerState,
    KubeEvent,
    NodeCondition,
    PodCondition,
    RestartEvidence,
    TerminatedState,
    Workload,
    XidEvent,
)

STARTED = "2025-06-01T09:40:00Z"
FINISHED = "2025-06-01T10:00:00Z"
NEAR = "2025-06-01T09:59:52Z"

NODE_HEALTHY = [
    NodeCondition(type="MemoryPressure", status="False", reason="KubeletHasSufficientMemory",
                  message="kubelet has sufficient memory available"),
    NodeCondition(type="DiskPressure", status="False", reason="KubeletHasNoDiskPressure",
                  message="kubelet has no disk pressure"),
    NodeCondition(type="Ready", status="True", reason="KubeletReady",
                  message="kubelet is posting ready status"),
]

TRAINING_LOG = [
    "[rank0]: starting trainer from image ghcr.io/acme/trainer:1.4.2",
    "[rank0]: torch 2.7.1+cu128, CUDA available: True, devices: 8",
    "[rank0]: initializing process group backend=nccl rank=0",
    *[f"[rank0]: step {i * 50} | loss {3.1 - i * 0.01:.4f} | lr 3.00e-04 | tokens/s 41234"
      for i in range(1, 40)],
]

CUDA_OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process "
    "has 78.06 GiB memory in use. Of the allocated memory 75.55 GiB is allocated by PyTorch, and "
    "2.51 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
NCCL_LINE = (
    "[rank3]:[E0601 09:59:59.123456789 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=4211, OpType=ALLREDUCE, NumelIn=262144000, "
    "NumelOut=262144000, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.")


def terminated(exit_code: int | None, reason: str = "Error", *, started: str = STARTED,
               finished: str = FINISHED, message: str = "", signal: int | None = None
               ) -> ContainerState:
    return ContainerState(terminated=TerminatedState(
        reason=reason, exit_code=exit_code, started_at=started, finished_at=finished,
        message=message, signal=signal))


def event(reason: str, message: str, *, type: str = "Warning", count: int = 1,
          last_seen: str = NEAR, field_path: str = "", source: str = "kubelet") -> KubeEvent:
    return KubeEvent(type=type, reason=reason, message=message, count=count,
                     last_seen=last_seen, field_path=field_path, source=source)


def evidence(**overrides: Any) -> RestartEvidence:
    """A crash-looping training container on a GPU node; override what a case needs."""
    base: dict[str, Any] = {
        "cluster": "prod-gpu", "namespace": "ml", "pod": "trainer-6d9c7b5f4-x2k8p",
        "pod_uid": "uid-1",
        "container": "trainer", "container_kind": "app", "restart_count": 3,
        "image": "ghcr.io/acme/trainer:1.4.2", "node": "gpu-node-a1",
        "requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "8"},
        "last_state": terminated(1),
        "state": ContainerState(waiting_reason="CrashLoopBackOff",
                             waiting_message="back-off 40s restarting failed container=trainer "
                                             "pod=trainer-6d9c7b5f4-x2k8p_ml(uid-1)"),
        "pod_phase": "Running",
        "workload": Workload(kind="Deployment", name="trainer", namespace="ml", uid="dep-1"),
        "previous_log": "\n".join(TRAINING_LOG),
        "pod_events": [event("BackOff", "Back-off restarting failed container trainer in pod "
                          "trainer-6d9c7b5f4-x2k8p_ml(uid-1)", count=4)],
        "node_conditions": NODE_HEALTHY,
        "observed_at": "2025-06-01T10:00:01Z", "captured_at": "2025-06-01T10:00:02Z"}
    base.update(overrides)
    return RestartEvidence(**base)


def log_with(*lines: str) -> str:
    return "\n".join([*TRAINING_LOG, *lines])


def traceback(*frames: str, last: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for frame in frames:
        path, line, func, code = frame.split("|")
        out += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return [*out, last]


# --- one per cause -----------------------------------------------------------------------------

def oom_killed_limit() -> RestartEvidence:
    return evidence(last_state=terminated(137, "OOMKilled"),
                    previous_log=log_with("[rank0]: loading shard 7/16 of the dataset into memory"))


def oom_killed_node_pressure() -> RestartEvidence:
    return evidence(
        last_state=terminated(137, "OOMKilled"),
        node_conditions=[
            NodeCondition(type="MemoryPressure", status="True",
                          reason="KubeletHasInsufficientMemory",
                          message="kubelet has insufficient memory available"),
            NODE_HEALTHY[2]],
        node_events=[event("SystemOOM", "System OOM encountered, victim process: python, "
                           "pid: 41321", source="kubelet")])


def liveness_kill() -> RestartEvidence:
    probe = ('Liveness probe failed: Get "http://10.42.3.17:8000/health": context deadline '
             "exceeded (Client.Timeout exceeded while awaiting headers)")
    return evidence(
        container="vllm", pod="llama-8b-5f7d9c-q7wzt", image="vllm/vllm-openai:v0.9.1",
        workload=Workload(kind="Deployment", name="llama-8b", namespace="ml"),
        last_state=terminated(137),
        previous_log=("INFO 06-01 09:59:20 [loggers.py:118] Engine 000: Avg prompt throughput: "
                      "1812.0 tokens/s, Running: 22 reqs, Waiting: 41 reqs, GPU KV cache "
                      "usage: 99.1%"),
        pod_events=[
            event("Unhealthy", probe, count=3, field_path="spec.containers{vllm}"),
            event("Killing", "Container vllm failed liveness probe, will be restarted",
                  type="Normal", field_path="spec.containers{vllm}"),
        ])


def startup_kill() -> RestartEvidence:
    return evidence(
        container="vllm", last_state=terminated(143),
        pod_events=[
            event("Unhealthy", "Startup probe failed: HTTP probe failed with statuscode: 503",
                  count=30, field_path="spec.containers{vllm}"),
            event("Killing", "Container vllm failed startup probe, will be restarted",
                  type="Normal", field_path="spec.containers{vllm}"),
        ])


def cuda_oom() -> RestartEvidence:
    return evidence(last_state=terminated(1), previous_log=log_with(*traceback(
        "/workspace/train.py|212|<module>|main()",
        "/workspace/train.py|188|main|loss = model(**batch).loss",
        last=CUDA_OOM_LINE)))


def nccl_timeout() -> RestartEvidence:
    return evidence(last_state=terminated(134), previous_log=log_with(
        NCCL_LINE,
        "[rank3]:[E0601 09:59:59.123456789 ProcessGroupNCCL.cpp:698] [Rank 3] To avoid data "
        "inconsistency, we are taking the entire process down.",
        "terminate called after throwing an instance of 'c10::DistBackendError'"))


def xid(number: int, *, time: str = "2025-06-01T09:59:58Z") -> XidEvent:
    description = {79: "GPU has fallen off the bus", 13: "Graphics Engine Exception",
                   48: "Double Bit ECC Error"}.get(number, "error")
    return XidEvent(xid=number, gpu=3, time=time,
                    message=f"Xid {number}: {description} (GPU 3, PCI 0000:5D:00.0)")


def gpu_xid(number: int, cuda_error: str, *, time: str = "2025-06-01T09:59:58Z"
            ) -> RestartEvidence:
    return evidence(
        last_state=terminated(1),
        previous_log=log_with(*traceback("/workspace/train.py|188|main|loss.backward()",
                                         last=f"RuntimeError: CUDA error: {cuda_error}")),
        node_events=[event("GPUXid", xid(number, time=time).message, last_seen=time,
                           source="dcgm-exporter")],
        node_xids=[xid(number, time=time)])


def evicted() -> RestartEvidence:
    message = ("The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, "
               "available: 8Gi. Container trainer was using 52Gi, request is 0, has larger "
               "consumption of ephemeral-storage.")
    return evidence(
        last_state=ContainerState(), state=terminated(137, "ContainerStatusUnknown"),
        pod_phase="Failed", pod_reason="Evicted", pod_message=message,
        pod_conditions=[PodCondition(type="DisruptionTarget", status="True",
                                     reason="TerminationByKubelet", message=message)],
        pod_events=[event("Evicted", message)])


def evicted_under_memory_pressure() -> RestartEvidence:
    message = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: "
               "84Mi. Container trainer was using 60Gi, request is 16Gi, has larger "
               "consumption of memory.")
    return evidence(
        last_state=ContainerState(), state=terminated(137, "Error"),
        pod_phase="Failed", pod_reason="Evicted", pod_message=message,
        pod_events=[event("Evicted", message)],
        node_conditions=oom_killed_node_pressure().node_conditions)


def preempted() -> RestartEvidence:
    return evidence(
        workload=Workload(kind="Job", name="finetune-42", namespace="ml"),
        pod_deleting=True, last_state=terminated(143),
        pod_conditions=[PodCondition(
            type="DisruptionTarget", status="True", reason="PreemptionByScheduler",
            message="Kube-scheduler: preempting to accommodate a higher priority pod")],
        pod_events=[event("Preempted", "Preempted by pod 8a1bc2d4-7f3e-4c55-9d0e-5b1f0c2a9e11 "
                          "on node gpu-node-a1", type="Normal", source="default-scheduler"),
                    event("Killing", "Stopping container trainer", type="Normal")])


def node_not_ready() -> RestartEvidence:
    return evidence(
        last_state=terminated(137, "Error"),
        node_conditions=[NodeCondition(type="Ready", status="Unknown", reason="NodeStatusUnknown",
                                       message="Kubelet stopped posting node status.")],
        node_events=[event("NodeNotReady", "Node gpu-node-a1 status is now: NodeNotReady",
                           type="Normal", source="node-controller")],
        pod_events=[event("NodeNotReady", "Node is not ready", source="node-controller")])


def node_shutdown() -> RestartEvidence:
    return evidence(
        last_state=ContainerState(), state=terminated(143),
        pod_phase="Failed", pod_reason="Terminated",
        pod_message="Pod was terminated in response to imminent node shutdown.",
        pod_conditions=[PodCondition(type="DisruptionTarget", status="True",
                                     reason="TerminationByKubelet",
                                     message="Pod was terminated in response to imminent node "
                                             "shutdown.")])


def image_pull() -> RestartEvidence:
    pull = ('rpc error: code = NotFound desc = failed to pull and unpack image '
            '"ghcr.io/acme/trainer:1.5.0": failed to resolve reference '
            '"ghcr.io/acme/trainer:1.5.0": ghcr.io/acme/trainer:1.5.0: not found')
    return evidence(
        image="ghcr.io/acme/trainer:1.5.0", last_state=terminated(1), previous_log="",
        state=ContainerState(waiting_reason="ErrImagePull", waiting_message=pull),
        pod_events=[event("Failed", f'Failed to pull image "ghcr.io/acme/trainer:1.5.0": {pull}'),
                    event("Failed", "Error: ErrImagePull")])


def config_missing_configmap() -> RestartEvidence:
    return evidence(
        last_state=terminated(1),
        state=ContainerState(waiting_reason="CreateContainerConfigError",
                             waiting_message='configmap "trainer-config" not found'),
        pod_events=[event("Failed", 'Error: configmap "trainer-config" not found', count=5)])


def config_key_error_at_start() -> RestartEvidence:
    return evidence(
        container="server", last_state=terminated(1, started="2025-06-01T09:59:59Z"),
        previous_log="\n".join(traceback(
            '/app/serve.py|14|<module>|MODEL_NAME = os.environ["MODEL_NAME"]',
            "<frozen os>|714|__getitem__|raise KeyError(key) from None",
            last="KeyError: 'MODEL_NAME'")))


def app_error(exit_code: int = 1, *, reason: str = "Error", log: str | None = None
              ) -> RestartEvidence:
    default_log = log_with(*traceback(
        "/app/worker.py|97|from_env|return cls(client=connect(settings.redis_url))",
        last="ConnectionRefusedError: [Errno 111] Connection refused"))
    return evidence(last_state=terminated(exit_code, reason),
                    previous_log=default_log if log is None else log)


def rollout_termination(exit_code: int = 143) -> RestartEvidence:
    return evidence(
        pod_deleting=True,
        last_state=terminated(exit_code, "Completed" if exit_code == 0 else "Error"),
        workload=Workload(kind="Deployment", name="trainer", namespace="ml", rolling_out=True),
        pod_events=[event("Killing", "Stopping container trainer", type="Normal")])


def completed() -> RestartEvidence:
    return evidence(last_state=terminated(0, "Completed"),
                    previous_log="2025-06-01T10:00:00.000Z INFO work finished, exiting")


# --- not restarts: a Job's pod that failed, a pod taken away ------------------------------------

def job_pod_failed(log: str, exit_code: int, *, instance: str = "3f9a1c2b7d4e") -> RestartEvidence:
    """A training Job's pod with restartPolicy Never whose container failed: nothing
    restarts, so the failure is in `state.terminated` and the log is the current one."""
    return evidence(
        pod="finetune-llama-x7k2q", trigger="terminated", container_instance=instance,
        restart_count=0, last_state=ContainerState(), state=terminated(exit_code),
        pod_phase="Failed", previous_log=log,
        workload=Workload(kind="Job", name="finetune-llama", namespace="ml", uid="job-1"),
        pod_events=[])


def evicted_by_api_after_an_old_xid(**overrides: Any) -> RestartEvidence:
    """A pod whose container crashed on a hardware Xid an hour ago (still its `lastState`,
    restart #7) and has run since; now it is evicted through the Eviction API (a drain)."""
    base: dict[str, Any] = {
        "trigger": "pod-failed", "trigger_reason": "EvictionByEvictionAPI", "restart_count": 7,
        "last_state": terminated(1, started="2025-06-01T08:40:00Z",
                                 finished="2025-06-01T09:00:00Z"),
        "state": ContainerState(running_since="2025-06-01T09:00:30Z"),
        "pod_deleting": True,
        "pod_conditions": [PodCondition(type="DisruptionTarget", status="True",
                                        reason="EvictionByEvictionAPI",
                                        message="Eviction API: evicting")],
        "node_xids": [xid(79, time="2025-06-01T08:59:58Z"), xid(79)],
        "node_events": [event("GPUXid", xid(79).message, source="dcgm-exporter")],
        "previous_log": log_with("RuntimeError: CUDA error: no CUDA-capable device is detected"),
        "pod_events": [event("Killing", "Stopping container trainer", type="Normal")]}
    base.update(overrides)
    return evidence(**base)
