"""Restart evidence weighed by where and when it happened: Xids on the container's own GPU,
the look-back of an NCCL timeout, log lines by their age (recency), Xid classes as data."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.evidence import GpuDevice, XidEvent
from gpuops.tasks.restarts.logtime import line_time, written_by
from gpuops.tasks.restarts.rules import default_rules, load_rules
from tests import restart_fixtures as fx

REF = datetime(2025, 6, 1, 10, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("line", "expected"), [
    ("2025-06-01 09:41:02,511 WARNING skipped", datetime(2025, 6, 1, 9, 41, 2, tzinfo=UTC)),
    ("2025-06-01T11:41:02+02:00 boot", datetime(2025, 6, 1, 9, 41, 2, tzinfo=UTC)),
    ("(EngineCore_DP0 pid=241) ERROR 06-01 09:59:41 [core.py:708] x",
     datetime(2025, 6, 1, 9, 59, 41, tzinfo=UTC)),
    ("[rank5]:[E601 09:59:58.220114 ProcessGroupNCCL.cpp:632] x",
     datetime(2025, 6, 1, 9, 59, 58, tzinfo=UTC)),
    ("W1231 23:59:58.110000 1 torch/distributed/elastic/agent/server/api.py:704] x",
     datetime(2024, 12, 31, 23, 59, 58, tzinfo=UTC)),  # no year: the one before the end
    ("INFO:     10.42.0.12:40122 - \"POST /generate HTTP/1.1\" 200 OK", None),
])
def test_log_lines_are_dated_by_the_stamps_the_software_prints(line, expected):
    assert line_time(line, REF) == expected


def test_an_unstamped_line_is_dated_by_the_next_stamped_one_or_not_at_all():
    lines = ["2025-06-01 09:28:10,220 ERROR request failed", "torch.OutOfMemoryError: CUDA",
             "2025-06-01 09:28:10,231 WARNING returning 503", "Traceback (most recent call",
             "KeyError: 'X'"]
    bound = datetime(2025, 6, 1, 9, 28, 10, tzinfo=UTC)
    assert written_by(lines, REF) == [bound, bound, bound, None, None]


def _pod_gpu(bus: str, index: int = 0) -> list[GpuDevice]:
    return [GpuDevice(index=index, pci_bus_id=bus)]


def _xid(number: int, bus: str, time: str = "2025-06-01T09:59:58Z") -> XidEvent:
    return XidEvent(xid=number, time=time,
                    message=f"NVRM: Xid (PCI:{bus}): {number}, GPU has fallen off the bus.")


def _python_crash(**overrides):
    return fx.evidence(last_state=fx.terminated(1), previous_log=fx.log_with(
        *fx.traceback("/workspace/data.py|30|collate|labels = ex['labels']",
                      last="KeyError: 'labels'")), **overrides)


def test_a_hardware_xid_on_another_gpu_does_not_explain_a_python_crash():
    crash = _python_crash(gpus=_pod_gpu("00000000:1B:00.0"), node_xids=[_xid(79, "0000:3e:00")])
    assert diagnose(crash).cause == "app-error"
    # the same Xid on the container's own GPU (bus ids written differently) is the cause
    own = _python_crash(gpus=_pod_gpu("00000000:3E:00.0"), node_xids=[_xid(79, "0000:3e:00")])
    assert diagnose(own).cause == "gpu-xid-hardware"


def test_without_the_containers_gpus_an_xid_on_the_node_still_counts():
    assert diagnose(_python_crash(node_xids=[_xid(79, "0000:3e:00")])).cause == "gpu-xid-hardware"


def test_gpus_are_matched_by_index_when_there_is_no_bus_id():
    other = XidEvent(xid=95, gpu=2, time="2025-06-01T09:59:58Z", message="Uncontained: LTC")
    assert diagnose(_python_crash(gpus=[GpuDevice(index=5)], node_xids=[other])).cause == \
        "app-error"
    assert diagnose(_python_crash(gpus=[GpuDevice(index=2)], node_xids=[other])).cause == \
        "gpu-xid-hardware"


def test_an_nccl_timeout_within_the_collective_timeout_of_an_xid_follows_the_xid():
    def timeout(xid_at: str):
        return fx.evidence(last_state=fx.terminated(134), previous_log=fx.log_with(fx.NCCL_LINE),
                           gpus=_pod_gpu("0000:5d:00.0"),
                           node_xids=[_xid(79, "0000:5d:00", time=xid_at)])
    found = diagnose(timeout("2025-06-01T09:34:00Z"))  # 26 min before: inside 30 min
    assert found.cause == "gpu-xid-hardware" and found.rule_id == "nccl-timeout-after-hardware-xid"
    assert any("node Xid 79" in line for line in found.evidence_lines)
    assert diagnose(timeout("2025-06-01T08:00:00Z")).cause == "nccl-error"  # 2 h: unrelated


def test_an_application_xid_after_a_hardware_xid_on_the_same_gpu_is_hardware():
    xids = [XidEvent(xid=48, pci_bus_id="0000:41:00", time="2025-06-01T09:45:00Z",
                     message="double bit ECC error"),
            XidEvent(xid=45, pci_bus_id="0000:41:00", time="2025-06-01T09:59:59Z",
                     message="Ch 00000010")]
    ev = _python_crash(gpus=_pod_gpu("00000000:41:00.0"), node_xids=xids)
    assert diagnose(ev).rule_id == "gpu-xid-after-hardware-xid"
    alone = _python_crash(gpus=_pod_gpu("00000000:41:00.0"), node_xids=xids[1:])
    assert diagnose(alone).cause == "gpu-xid-application"


def _liveness_after(*log: str):
    live = fx.liveness_kill()
    return live.model_copy(update={"previous_log": "\n".join(log)})


def test_a_cuda_oom_handled_long_before_a_liveness_kill_does_not_outweigh_it():
    old = _liveness_after("2025-06-01 09:28:10,220 ERROR request failed",
                          fx.CUDA_OOM_LINE, "2025-06-01 09:28:10,231 WARNING returning 503",
                          "2025-06-01 09:59:30,002 WARNING request queue is full")
    found = diagnose(old)
    assert found.cause == "liveness-probe"
    assert "cuda-oom" in dict(found.alternatives)
    # with no timestamps, what counts is how many lines follow it
    buried = _liveness_after(fx.CUDA_OOM_LINE, *["INFO: GET /health 200"] * 150)
    assert diagnose(buried).cause == "liveness-probe"


def test_a_fresh_cuda_oom_still_wins_over_the_exit_code():
    fresh = fx.cuda_oom()
    assert diagnose(fresh).cause == "cuda-oom"


def test_recency_is_data_an_operator_can_switch_off():
    rules = load_rules("rules:\n  - id: cuda-oom\n    override: true\n"
                       "    cause: cuda-oom\n    title: CUDA OOM\n    confidence: 0.97\n"
                       "    priority: 70\n    recency: {stale_penalty: 0}\n"
                       "    when: {log_regex: ['CUDA out of memory']}\n")
    buried = _liveness_after(fx.CUDA_OOM_LINE, *["INFO: GET /health 200"] * 150)
    assert diagnose(buried, rules).cause == "cuda-oom"


def test_node_xid_conditions_are_validated_and_named():
    with pytest.raises(ConfigError, match=r"node_xid"):
        load_rules("rules:\n  - id: mine\n    cause: mine\n    title: t\n    confidence: 0.5\n"
                   "    when: {node_xid: {in: [], gpu: assigned}}\n")
    with pytest.raises(ConfigError, match=r"gpu"):
        load_rules("rules:\n  - id: mine\n    cause: mine\n    title: t\n    confidence: 0.5\n"
                   "    when: {node_xid: {in: [79], gpu: mine}}\n")


def test_the_shipped_rules_classify_the_xid_catalogue_as_data():
    rules = default_rules()
    hardware = rules.get("gpu-xid-hardware")
    application = rules.get("gpu-xid-application")
    assert hardware is not None and application is not None
    node_side = set(hardware.when.node_xid_in or [])
    app = set(application.when.node_xid_in or [])
    assert {48, 79, 94, 95, 140, 154, 119} <= node_side  # Hopper/Blackwell Xids included
    assert {13, 31, 43, 45} <= app and not node_side & app


def test_the_watcher_reads_the_gpu_of_an_xid_in_the_drivers_own_words():
    from gpuops.sensors.evidence_capture import xids_from
    from gpuops.tasks.restarts.evidence import KubeEvent
    events = [KubeEvent(reason="NVRMXid", last_seen="2025-06-01T09:59:58Z",
                        message="NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                                "name=<unknown>, GPU has fallen off the bus."),
              KubeEvent(reason="GPUXid", message="Xid 13: Graphics Engine Exception (GPU 3)")]
    found = xids_from({"metadata": {}}, events)
    assert [(x.xid, x.pci_bus_id, x.gpu) for x in found] == [(79, "0000:3b:00", None),
                                                             (13, "", 3)]


def test_the_watcher_takes_the_pods_gpus_from_the_schedulers_record():
    from gpuops.sensors.evidence_capture import gpus_from, xids_from
    from gpuops.tasks.restarts.evidence import KubeEvent
    pod = {"metadata": {"annotations": {"gpuops.io/gpu-index": "0,3"}}}
    assert [g.index for g in gpus_from(pod)] == [0, 3]
    assert gpus_from({"metadata": {}}) == []
    assert gpus_from({"metadata": {"annotations": {"gpuops.io/gpu-index": "0,x"}}}) == []
    exporter = KubeEvent(reason="GPUXid", message="Xid 79: GPU has fallen off the bus "
                                                  "(GPU 3, PCI 0000:5D:00.0)")
    node = {"metadata": {"annotations": {"sim.gpuops.io/xid-events": '[{"xid": 48, "gpu": 1, '
                                         '"pciBusId": "0000:2A:00.0"}]'}}}
    found = xids_from(node, [exporter])
    assert [(x.xid, x.gpu, x.pci_bus_id) for x in found] == [(79, 3, "0000:5D:00.0"),
                                                             (48, 1, "0000:2A:00.0")]
