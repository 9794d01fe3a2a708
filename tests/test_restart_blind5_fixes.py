"""Restart rules extended after blind batch 5 (tests/data/restart_cases/README.md): each test is
one message family or weighing the rules got wrong, with values of its own (not the corpus')."""

from __future__ import annotations

from typing import Any

from gpuops.bench.restart_corpus import evidence_data
from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.evidence import RestartEvidence


def _cause(case_id: str, **given: Any) -> str:
    return diagnose(RestartEvidence.model_validate(evidence_data(case_id, given))).cause


def _exit(code: int, reason: str = "Error") -> dict[str, Any]:
    return {"terminated": {"reason": reason, "exit_code": code}}


_KEY_ERROR = ("2025-06-01 09:59:58 | ERROR | stderr | Traceback (most recent call last):\n"
              '2025-06-01 09:59:58 | ERROR | stderr |   File "worker.py", line 80, in main\n'
              '2025-06-01 09:59:58 | ERROR | stderr |     name = reply["model"]\n'
              "2025-06-01 09:59:58 | ERROR | stderr | KeyError: 'model'\n")


def test_a_gpu_oom_handled_long_before_the_exception_it_died_of_does_not_win() -> None:
    old = ("2025-06-01 09:18:02 | ERROR | stderr | request failed: CUDA out of memory. Tried to "
           "allocate 96.00 MiB (GPU 0; 79.1 GiB total capacity)\n"
           "2025-06-01 09:18:40 | INFO | worker | heart beat\n")
    assert _cause("t-old-oom", last_state=_exit(1), previous_log=old + _KEY_ERROR) == "app-error"
    # the same OOM just before the end is the cause
    fresh = old.replace("09:18:02", "09:59:50").replace("09:18:40", "09:59:52")
    assert _cause("t-fresh-oom", last_state=_exit(1),
                  previous_log=_KEY_ERROR + fresh) == "cuda-oom"


def _engine_traceback(frame: str) -> str:
    return ("Traceback (most recent call last):\n"
            '  File "/srv/engine/loop.py", line 51, in run\n'
            "    self._step()\n"
            "tvm.error.InternalError: Traceback (most recent call last):\n"
            f"  1: tvm::runtime::{frame}::AllocDataSpace(DLDevice, unsigned long)\n"
            "  0: tvm::runtime::detail::LogFatal::Entry::Finalize()\n"
            "InternalError: Check failed: (e == 0) is false: Failed to allocate 1073741824 "
            "bytes with alignment 64 bytes.\n")


def test_an_allocation_failed_inside_the_cuda_device_allocator_is_a_cuda_oom() -> None:
    assert _cause("t-cuda-alloc", last_state=_exit(1),
                  previous_log=_engine_traceback("CUDADeviceAPI")) == "cuda-oom"
    # the host's allocator failing is not the GPU's memory
    assert _cause("t-cpu-alloc", last_state=_exit(1),
                  previous_log=_engine_traceback("CPUDeviceAPI")) != "cuda-oom"


def _replaced(code: int, reason: str = "Error") -> dict[str, Any]:
    return {"workload": {"rolling_out": True}, "pod_deleting": True, "last_state": _exit(code, reason),
            "pod_events": [{"type": "Normal", "reason": "Killing", "source": "kubelet",
                            "message": "Stopping container app",
                            "last_seen": "2025-06-01T09:59:58Z"}]}


def test_any_error_exit_on_the_stop_request_of_a_rollout_is_planned() -> None:
    log = ("2025-06-01T09:59:57Z INFO server: got the shutdown signal, draining\n"
           "thread 'tokio-runtime-worker' panicked at src/server.rs:88:14:\n"
           "called `Option::unwrap()` on a `None` value\n")
    assert _cause("t-rollout-101", previous_log=log, **_replaced(101)) == "rollout-termination"
    assert _cause("t-rollout-3", previous_log="", **_replaced(3)) == "rollout-termination"
    # an OOM kill during a rollout is still an OOM kill
    assert _cause("t-rollout-oom", previous_log="", **_replaced(137, "OOMKilled")) != \
        "rollout-termination"


def test_a_panic_naming_a_model_file_that_is_not_there_is_a_configuration_error() -> None:
    log = ("thread 'main' panicked at engine/src/loader.rs:52:9:\n"
           'file "tokenizer.json" not found at model id "/models/llama-3-8b.Q4_K_M.gguf"\n'
           "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n")
    assert _cause("t-panic-model", last_state=_exit(101), previous_log=log) == "config-error"
    # a panic about something else is the program's own bug
    bug = ("thread 'main' panicked at engine/src/batch.rs:310:22:\n"
           "index out of bounds: the len is 4 but the index is 4\n")
    assert _cause("t-panic-bug", last_state=_exit(101), previous_log=bug) == "app-error"


def test_a_model_file_the_hub_answers_404_for_is_a_configuration_error() -> None:
    log = ('INFO hf_hub: Token file not found "/data/hf-cache/token"\n'
           'Error: failed to fetch file "config.json" from the hub: Status(404, Not Found)\n')
    assert _cause("t-hub-404", last_state=_exit(1), previous_log=log) == "config-error"
    # the hub client's note that there is no token is not the cause of another crash
    other = ('INFO hf_hub: Token file not found "/data/hf-cache/token"\n'
             "Error: listener failed: Address already in use (os error 98)\n")
    assert _cause("t-no-token", last_state=_exit(1), previous_log=other) != "config-error"
