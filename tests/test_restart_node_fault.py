"""The node event a hardware-class Xid restart gives (what quarantine-node-on-xid's trigger
reads): only for that cause, about the node, with the Xid the rule matched."""

from __future__ import annotations

from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.node_fault import HARDWARE_XID, hardware_xid_event
from tests import restart_fixtures as fx


def test_a_hardware_xid_restart_is_an_event_about_its_node_carrying_the_xid():
    evidence = fx.gpu_xid(79, "unspecified launch failure")
    event = hardware_xid_event(evidence, diagnose(evidence))
    assert event is not None and event["event"] == HARDWARE_XID == "gpuops.node.hardware-xid"
    resource = event["resource"]
    assert resource["gpuops.kind"] == "Node"
    assert resource["prefect.resource.name"] == evidence.node
    assert resource["prefect.resource.id"] == f"k8s.{evidence.cluster}.node._.{evidence.node}"
    assert event["payload"]["xid"] == 79
    assert event["payload"]["pod"] == f"{evidence.namespace}/{evidence.pod}"


def test_an_application_xid_or_an_oom_is_no_node_event():
    for evidence in (fx.gpu_xid(13, "an illegal instruction was encountered"),
                     fx.cuda_oom()):
        assert hardware_xid_event(evidence, diagnose(evidence)) is None
