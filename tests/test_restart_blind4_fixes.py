"""Restart rules extended after blind batch 4 (tests/data/restart_cases/README.md): each test is
one message family the rules did not know, written with values of its own (not the corpus')."""

from __future__ import annotations

from typing import Any

from gpuops.bench.restart_corpus import evidence_data
from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.evidence import RestartEvidence


def _cause(case_id: str, **given: Any) -> str:
    return diagnose(RestartEvidence.model_validate(evidence_data(case_id, given))).cause


_EXIT_1 = {"terminated": {"reason": "Error", "exit_code": 1}}


def test_a_cuda_call_the_installed_driver_does_not_support_is_a_driver_mismatch() -> None:
    assert _cause("t-call-newer", last_state=_EXIT_1, previous_log=(
        "RuntimeError: CUDA error: API call is not supported in the installed CUDA driver\n"
    )) == "cuda-driver-mismatch"
    assert _cause("t-call-newer-name", last_state=_EXIT_1, previous_log=(
        "fatal: cuInit returned CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER\n"
    )) == "cuda-driver-mismatch"
    # a feature the model does not support is not the driver's
    assert _cause("t-not-supported", last_state=_EXIT_1, previous_log=(
        "ValueError: sliding window attention is not supported by this GPU backend\n"
    )) != "cuda-driver-mismatch"


def _evicted_by(message: str, source: str) -> dict[str, Any]:
    return {"trigger": "pod-failed", "restart_count": 0, "last_state": {},
            "state": {"terminated": {"reason": "Error", "exit_code": 137}},
            "pod_deleting": True,
            "pod_events": [{"type": "Warning", "reason": "Evict", "message": message,
                            "source": source, "last_seen": "2025-06-01T09:59:30Z"}]}


def test_another_schedulers_preemption_eviction_is_preempted() -> None:
    assert _cause("t-volcano", **_evicted_by("Pod is evicted, because of preempt",
                                             "volcano")) == "preempted"
    assert _cause("t-kueue", **_evicted_by(
        "Preempted to accommodate a workload (UID: 5d1e) due to prioritization in the "
        "ClusterQueue", "kueue-admission")) == "preempted"
    # a scheduler saying preemption would not help a Pending pod is no preemption
    assert _cause("t-no-victims", **_evicted_by(
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
        "available: 4 No preemption victims found for incoming pod.", "default-scheduler",
    )) != "preempted"


def test_a_master_name_that_does_not_resolve_in_the_store_is_a_rendezvous_failure() -> None:
    log = ("Traceback (most recent call last):\n"
           '  File "/usr/lib/python3/site-packages/torch/distributed/rendezvous.py", line 200,'
           " in _create_c10d_store\n"
           "    return TCPStore(host_name=hostname, port=port, world_size=world_size)\n"
           "RuntimeError: Temporary failure in name resolution\n")
    assert _cause("t-dns-store", last_state=_EXIT_1, previous_log=log) == "rendezvous-timeout"
    # the same failure fetching weights from a hub is not a rendezvous
    hub = ("Traceback (most recent call last):\n"
           '  File "/usr/lib/python3/site-packages/huggingface_hub/file_download.py", line 90,'
           " in hf_hub_download\n"
           "requests.exceptions.ConnectionError: Temporary failure in name resolution\n")
    assert _cause("t-dns-hub", last_state=_EXIT_1, previous_log=hub) != "rendezvous-timeout"
