"""`gpuops.node.hardware-xid`: a restart classified as a hardware-class GPU Xid, said about
the node (pure: the event's fields; posting.py emits it).

Why an event of its own: `gpuops.pod.restarted` is about a pod and carries raw evidence,
not the verdict. What acts on a faulty node (the quarantine-node-on-xid runbook's trigger)
needs the node as the resource and the classified Xid, so it can match on the node kind and
read its parameters from the event without re-diagnosing. One event per classified restart:
a crash loop on a bad GPU repeats it, and the runbook does nothing more for a node already
quarantined.
"""

from __future__ import annotations

from typing import Any

from gpuops.common.events import event_name, k8s_resource, related, resource_id
from gpuops.tasks.restarts.diagnose import Diagnosis
from gpuops.tasks.restarts.evidence import RestartEvidence

HARDWARE_XID = event_name("node", "hardware-xid")
HARDWARE_CAUSE = "gpu-xid-hardware"  # the cause the shipped rules give hardware/driver Xids


def hardware_xid_event(evidence: RestartEvidence, diagnosis: Diagnosis
                       ) -> dict[str, Any] | None:
    """`emit_event` keyword arguments for a restart classified as a hardware-class Xid on a
    known node; None for any other restart."""
    if diagnosis.cause != HARDWARE_CAUSE or not evidence.node:
        return None
    pod = resource_id(evidence.cluster, "Pod", evidence.namespace, evidence.pod)
    return {
        "event": HARDWARE_XID,
        "resource": k8s_resource(evidence.cluster, "Node", None, evidence.node,
                                 **{"gpuops.cause": diagnosis.cause}),
        "related": [related("pod", pod, **{
            "prefect.resource.name": f"{evidence.namespace}/{evidence.pod}"})],
        "payload": {"node": evidence.node, "xid": diagnosis.xid, "cause": diagnosis.cause,
                    "rule_id": diagnosis.rule_id, "title": diagnosis.title,
                    "pod": f"{evidence.namespace}/{evidence.pod}",
                    "restart": evidence.identity},
    }
