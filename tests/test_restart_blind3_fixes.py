"""Restart rules extended after blind batch 3 (tests/data/restart_cases/README.md): each test is
one message family the rules did not know, written with values of its own (not the corpus')."""

from __future__ import annotations

from typing import Any

from gpuops.bench.restart_corpus import evidence_data
from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.evidence import RestartEvidence


def _cause(case_id: str, **given: Any) -> str:
    return diagnose(RestartEvidence.model_validate(evidence_data(case_id, given))).cause


def test_a_cuda_allocator_call_failing_out_of_memory_is_cuda_oom() -> None:
    log = ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 1: "
           "cudaMalloc failed: out of memory\n"
           "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 2147483648\n"
           "main: exiting due to model loading error\n")
    assert _cause("t-cudamalloc", previous_log=log) == "cuda-oom"


def test_jax_coordination_barrier_timeout_is_a_rendezvous_timeout() -> None:
    log = ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. "
           "Barrier_id: PjRT_Client_Connect. Timed out task names:\n"
           "/job:jax_worker/replica:0/task:1\n")
    assert _cause("t-jax-barrier", previous_log=log) == "rendezvous-timeout"
    assert _cause("t-jax-register", previous_log=(
        "Stopping coordination service as cluster registration failed. Original error: "
        "DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0.\n"
    )) == "rendezvous-timeout"


def test_llama_cpp_rejecting_a_flag_is_a_configuration_error() -> None:
    log = "error: invalid argument: --flash-atn\n\nusage: llama-cli [options]\n"
    assert _cause("t-llama-arg", previous_log=log,
                  last_state={"terminated": {"reason": "Error", "exit_code": 1,
                                             "started_at": "2025-06-01T09:59:59Z"}}
                  ) == "config-error"
    # a CUDA runtime error of the same words is not an argument
    assert _cause("t-cuda-invalid", previous_log="CUDA error: invalid argument\n") != \
        "config-error"


def test_an_nccl_timeout_with_abort_evidence_still_follows_the_earlier_hardware_xid() -> None:
    log = ("[rank1]:[E601 09:59:50.1 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, "
           "NumelOut=8, Timeout(ms)=1800000) ran for 1800050 milliseconds before timing out.\n"
           "terminate called after throwing an instance of 'c10::DistBackendError'\n")
    assert _cause(
        "t-xid-then-nccl", previous_log=log,
        last_state={"terminated": {"reason": "Error", "exit_code": 134, "signal": 6}},
        gpus=[{"index": 1, "uuid": "GPU-11111111-2222-4333-8444-555555555555",
               "pci_bus_id": "00000000:1A:00.0"}],
        node_xids=[{"xid": 79, "gpu": 1, "pci_bus_id": "0000:1a:00",
                    "time": "2025-06-01T09:40:10Z",
                    "message": "NVRM: Xid (PCI:0000:1a:00): 79, GPU has fallen off the bus."}],
    ) == "gpu-xid-hardware"


def test_a_recent_go_panic_outweighs_a_handled_cuda_oom_half_an_hour_earlier() -> None:
    log = ('time=2025-06-01T09:25:00.000Z level=WARN msg="retrying with fewer layers" '
           'error="CUDA error: out of memory"\n'
           'time=2025-06-01T09:25:09.000Z level=INFO msg="llama runner started"\n'
           "panic: runtime error: index out of range [3] with length 3\n"
           "goroutine 77 [running]:\n")
    assert _cause("t-go-panic", previous_log=log,
                  last_state={"terminated": {"reason": "Error", "exit_code": 2}}) == "app-error"
    # a fresh CUDA OOM is still the cause
    fresh = 'time=2025-06-01T09:59:58.000Z level=ERROR error="CUDA error: out of memory"\n'
    assert _cause("t-fresh-oom", previous_log=fresh) == "cuda-oom"


def test_a_pod_gpuops_marked_and_that_is_being_deleted_is_its_planned_eviction() -> None:
    marked = {"gpuops.io/evicted-by": "7c1d", "gpuops.io/evicted-by-run": "calm-heron",
              "gpuops.io/evicted-by-flow": "rebalance"}
    stopped = {"terminated": {"reason": "Error", "exit_code": 143}}
    assert _cause("t-marked", pod_deleting=True, pod_annotations=marked,
                  last_state=stopped) == "planned-eviction"
    # without the mark a deletion is someone else's
    assert _cause("t-unmarked", pod_deleting=True, last_state=stopped) == "pod-deleted"
