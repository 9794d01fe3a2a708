"""Restart rules that match a failure's vocabulary, not one program's sentence (`log_words`),
and the weaker general readings below them (a child's SIGKILL, a bare SIGBUS, the exception a
traceback ends with). Messages here are written for the test, in the wording of software the
corpus does not use, so they check that the rules generalise rather than remember."""

from __future__ import annotations

from typing import Any

import pytest

from gpuops.bench.restart_corpus import evidence_data
from gpuops.common.errors import ConfigError
from gpuops.tasks.restarts.diagnose import Diagnosis, diagnose
from gpuops.tasks.restarts.evidence import RestartEvidence
from gpuops.tasks.restarts.rules import RuleSet, load_rules


def _diagnose(log: str, *, rules: RuleSet | None = None, exit_code: int = 1,
              **given: Any) -> Diagnosis:
    given.setdefault("last_state", {"terminated": {"reason": "Error", "exit_code": exit_code}})
    evidence = RestartEvidence.model_validate(evidence_data("t", {"previous_log": log,
                                                                   **given}))
    return diagnose(evidence, rules)


# --- the condition ------------------------------------------------------------------------------

WORDS_RULE = """
- id: gpu-mem
  cause: gpu-mem
  title: GPU memory
  confidence: 0.99
  priority: 99
  when:
    log_words:
      all: [[out of memory, oom], [gpu, cuda]]
      unless: [shared memory]
"""


def _words_rule() -> RuleSet:
    return load_rules(WORDS_RULE, base=RuleSet(()))


def test_log_words_needs_a_term_of_every_group_on_one_line() -> None:
    rules = _words_rule()
    assert _diagnose("GPU 3: Out Of Memory while loading\n", rules=rules).cause == "gpu-mem"
    # the two groups on different lines are not one failure
    assert _diagnose("GPU 3 ready\nout of memory\n", rules=rules).cause == "unknown"


def test_a_log_words_term_matches_where_a_word_starts() -> None:
    rules = _words_rule()
    assert _diagnose("cudaMalloc: OOM\n", rules=rules).cause == "gpu-mem"
    # "oom" inside "room" and "gpu" inside "xgpu" are other words
    assert _diagnose("no room left in xgpu queue\n", rules=rules).cause == "unknown"


def test_a_log_words_unless_pattern_keeps_its_line_out() -> None:
    rules = _words_rule()
    found = _diagnose("CUDA IPC: out of shared memory\n", rules=rules)
    assert found.cause == "unknown"


def test_a_bad_log_words_term_names_the_field_and_line() -> None:
    bad = WORDS_RULE.replace("[gpu, cuda]", "[gpu, '(']")
    with pytest.raises(ConfigError) as e:
        load_rules(bad, base=RuleSet(()))
    assert "log_words" in str(e.value) and "not a valid regular expression" in str(e.value)
    assert e.value.line is not None


def test_log_traceback_regex_reads_only_the_last_traceback() -> None:
    rules = load_rules("""
- id: dist
  cause: dist
  title: dist
  confidence: 0.99
  when:
    log_traceback_regex: ["torch/distributed/"]
    log_exception_regex: ["TimeoutError"]
""", base=RuleSet(()))
    frames = ('Traceback (most recent call last):\n'
              '  File "/usr/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 9\n'
              'TimeoutError: timed out\n')
    assert _diagnose(frames, rules=rules).cause == "dist"
    elsewhere = ('Traceback (most recent call last):\n  File "/app/db.py", line 9, in connect\n'
                 'TimeoutError: timed out\n')
    assert _diagnose("torch/distributed/ initialised\n" + elsewhere, rules=rules).cause == "unknown"


# --- the shipped vocabularies on wordings the corpus does not have ---------------------------

@pytest.mark.parametrize("line", [
    "RuntimeError: HIP out of memory. Tried to allocate 2.00 GiB (GPU 0; 63.98 GiB total)",
    "onnxruntime: CUDA failure 2: out of memory ; GPU=0 ; expr=cudaMalloc((void**)&p, size)",
    "[E] [TRT] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)",
    "engine: not enough free VRAM on device 0 for 32 cache blocks",
    "fatal: KV cache allocation failed: insufficient device memory (need 12.0 GiB)",
    "ERROR model would exceed the GPU memory budget; lower --gpu-fraction",
], ids=["hip", "onnxruntime", "tensorrt", "vram", "kv-cache", "budget"])
def test_other_engines_words_for_gpu_memory_are_cuda_oom(line: str) -> None:
    assert _diagnose(f"loading weights\n{line}\n").cause == "cuda-oom"


@pytest.mark.parametrize("line", [
    "OSError: [Errno 12] Cannot allocate memory",
    "RuntimeError: unable to mmap 4096 bytes from file </torch_1_2_3>: Cannot allocate memory (12)",
    "WARNING: to avoid OOM on the GPU, consider lowering the batch size",
], ids=["host-enomem", "torch-shm", "advice"])
def test_host_memory_shared_memory_and_advice_are_not_cuda_oom(line: str) -> None:
    assert _diagnose(f"{line}\nexiting\n").cause != "cuda-oom"


@pytest.mark.parametrize(("line", "cause"), [
    (("[W socket.cpp:663] [c10d] connection to trainer-0:29500 refused, retrying\n"
      "torch.distributed.DistStoreError: Timed out after 600 seconds waiting for workers"),
     "rendezvous-timeout"),
    ("ray: Failed to connect to GCS at address 10.4.0.2:6379 within 60 seconds.",
     "rendezvous-timeout"),
    ("horovod: timed out waiting for the coordinator (rank 0) after 300 s", "rendezvous-timeout"),
    ("write /data/ckpt/step-900/shard-3.bin: no space left on device", "disk-full"),
    ("Error: ENOSPC: no space left on device, write", "disk-full"),
    ("fatal: /dev/shm is too small for 8 workers (64 MiB)", "shm-exhausted"),
    ("Error: installed CUDA driver is older than the CUDA 12.8 runtime this build requires",
     "cuda-driver-mismatch"),
    ("NCCL WARN NET/Socket : peer 10.0.0.7 closed the connection: collective aborted",
     "nccl-error"),
    ("level=fatal msg=\"environment variable MODEL_ID is required\"", "config-error"),
    ("Error: unknown flag: --max-batch", "config-error"),
    ("flag provided but not defined: -listen-adress", "config-error"),
], ids=["c10d-refused", "ray-gcs", "coordinator", "disk-go", "disk-node", "shm-too-small",
        "driver-older", "nccl-aborted", "env-required", "cobra-flag", "go-flag"])
def test_each_classs_vocabulary_reads_other_programs_words(line: str, cause: str) -> None:
    # a start-up that took a minute: a setting it misses is read as configuration then
    started = {"terminated": {"reason": "Error", "exit_code": 1,
                              "started_at": "2025-06-01T09:59:00Z"}}
    assert _diagnose(f"starting\n{line}\n", last_state=started).cause == cause


def test_an_invalid_argument_from_cuda_is_not_a_rejected_command_line() -> None:
    log = "RuntimeError: CUDA error: invalid argument\nCompile with TORCH_USE_CUDA_DSA\n"
    assert _diagnose(log).cause != "config-error"


# --- the weaker general readings ------------------------------------------------------------

def test_a_child_killed_by_sigkill_at_the_memory_limit_is_an_oom_kill() -> None:
    log = ("epoch 3 step 120\n"
           "RuntimeError: DataLoader worker (pid 4411) is killed by signal: Killed.\n")
    found = _diagnose(log)
    assert (found.cause, found.rule_id) == ("oom-killed-limit", "oom-killed-child-process")
    assert "32Gi" in found.explanation  # the limit it ran into, for the person reading it


def test_a_child_sigkill_without_a_memory_limit_is_the_nodes_memory() -> None:
    log = ("torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 "
           "(pid: 77) of binary: /usr/bin/python\n")
    found = _diagnose(log, limits={"nvidia.com/gpu": "1"})
    assert found.cause == "oom-killed-node-pressure"


def test_a_bare_bus_error_is_read_as_shared_memory() -> None:
    found = _diagnose("step 10\n", exit_code=135)
    assert found.cause == "shm-exhausted" and found.rule_id == "shm-exhausted-sigbus"
    assert "/dev/shm" in found.explanation


def test_a_missing_module_says_so_in_the_title() -> None:
    log = ('Traceback (most recent call last):\n  File "/app/serve.py", line 3, in <module>\n'
           "    import xformers.ops\nModuleNotFoundError: No module named 'xformers'\n")
    found = _diagnose(log)
    assert found.cause == "app-error" and found.rule_id == "app-error-missing-module"
    assert "No module named 'xformers'" in found.title


@pytest.mark.parametrize("line", [
    "OSError: /models/llama-3-70b does not appear to have a file named config.json.",
    "FileNotFoundError: [Errno 2] No such file or directory: '/mnt/weights/model-00001.safetensors'",
    "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url",
], ids=["hf-config", "weights-path", "gated"])
def test_a_model_path_that_is_not_there_is_a_configuration_error(line: str) -> None:
    log = ('Traceback (most recent call last):\n  File "/app/serve.py", line 40, in load\n'
           f"    model = load(path)\n{line}\n")
    assert _diagnose(log).cause == "config-error"


def test_a_refused_connection_inside_torch_distributed_is_a_rendezvous_failure() -> None:
    log = ('Traceback (most recent call last):\n'
           '  File "/usr/lib/python3.11/site-packages/torch/distributed/elastic/agent.py", '
           "line 80, in _rendezvous\n    store = self._store()\n"
           "ConnectionRefusedError: [Errno 111] Connection refused\n")
    found = _diagnose(log)
    assert found.cause == "rendezvous-timeout", found
    assert found.rule_id == "rendezvous-connection-exception"


def test_a_refused_connection_to_a_database_stays_an_application_error() -> None:
    log = ("initializing process group backend=nccl\n"
           'Traceback (most recent call last):\n  File "/app/cache.py", line 9, in connect\n'
           "    return redis.Redis(url)\nConnectionRefusedError: [Errno 111] Connection refused\n")
    assert _diagnose(log).cause == "app-error"


# --- the same words wherever the evidence has them -------------------------------------------

def test_the_termination_message_counts_as_the_logs_last_lines_when_the_log_is_gone() -> None:
    # terminationMessagePolicy: FallbackToLogsOnError keeps the log's tail in the message
    message = "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be reported later"
    found = _diagnose("", last_state={"terminated": {"reason": "Error", "exit_code": 1,
                                                     "message": message}},
                      log_error="previous terminated container not found")
    assert found.cause == "cuda-oom"
    assert "RuntimeError: CUDA error: out of memory" in found.evidence_lines


def test_the_container_toolkit_refusing_the_images_cuda_is_a_driver_mismatch_while_waiting(
        ) -> None:
    refusal = ("failed to create containerd task: OCI runtime create failed: nvidia-container-cli"
               ": requirement error: unsatisfied condition: cuda>=12.8, please update your "
               "driver to a newer version, or use an earlier cuda container: unknown")
    found = _diagnose("", trigger="waiting", last_state={},
                      state={"waiting_reason": "RunContainerError", "waiting_message": refusal})
    assert found.cause == "cuda-driver-mismatch"


def test_a_config_file_that_does_not_parse_at_start_up_is_a_configuration_error() -> None:
    started = {"terminated": {"reason": "Error", "exit_code": 1,
                              "started_at": "2025-06-01T09:59:30Z"}}
    log = ("loading /etc/router/routes.yaml\n"
           "Error: failed to parse config file /etc/router/routes.yaml: yaml: line 7: "
           "mapping values are not allowed in this context\n")
    assert _diagnose(log, last_state=started).cause == "config-error"


@pytest.mark.parametrize(("line", "cause"), [
    (("Not enough memory to handle 4096 prefill tokens. You need to decrease "
     "`--max-batch-prefill-tokens`"), "cuda-oom"),
    ("ValueError: the KV cache memory is not enough for 2 sequences of 32768 tokens",
     "cuda-oom"),
    ("misc/shmutils.cc:72 NCCL WARN Call to posix_fallocate failed : No space left on device",
     "shm-exhausted"),
    (("Not enough free disk space to download the file. The target location /data/hub only "
     "has 120.00 MB free disk space."), "disk-full"),
], ids=["tgi-prefill", "kv-cache-not-enough", "nccl-fallocate", "hub-download"])
def test_more_of_each_classs_words(line: str, cause: str) -> None:
    assert _diagnose(f"starting\n{line}\n").cause == cause


def test_a_memory_eviction_is_the_nodes_memory_after_memory_pressure_has_cleared() -> None:
    message = ("The node was low on resource: memory. Threshold quantity: 100Mi, available: "
               "90112Ki. Container app was using 30Gi, request is 8Gi, has larger consumption "
               "of memory.")
    found = _diagnose("", trigger="pod-failed", pod_phase="Failed", pod_reason="Evicted",
                      pod_message=message)  # the node's conditions are healthy again
    assert found.cause == "oom-killed-node-pressure"


def test_an_exec_liveness_probe_that_errored_is_a_liveness_kill() -> None:
    events = [{"type": "Warning", "reason": "Unhealthy", "count": 3,
               "message": "Liveness probe errored: rpc error: code = DeadlineExceeded desc = "
                          "failed to exec in container: timeout 5s exceeded"}]
    found = _diagnose("serving\n", pod_events=events,
                      last_state={"terminated": {"reason": "Error", "exit_code": 137}})
    assert found.cause == "liveness-probe"


def test_a_jobs_active_deadline_on_the_pods_events_is_deadline_exceeded() -> None:
    # the Job controller's message, recorded on the pod under another reason than its own
    events = [{"type": "Warning", "reason": "Killing", "count": 1,
               "message": "Job was active longer than specified deadline"}]
    found = _diagnose("step 900\n", pod_events=events, pod_deleting=True,
                      last_state={"terminated": {"reason": "Error", "exit_code": 143}})
    assert found.cause == "deadline-exceeded"
