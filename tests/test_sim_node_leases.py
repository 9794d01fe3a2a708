"""Node leases: each Ready node's kubelet holds a Lease in kube-node-lease and renews it, as
`kubectl describe node` and liveness checks read it; a kubelet that stopped posting does not."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)
NODE = "gpu-node-1"
SPEED = 20  # a 10 s renewal every half second


@pytest.fixture
def sim(sim_factory):
    sim = sim_factory("empty", speed=SPEED)
    client.CoreV1Api(sim.api).create_node({
        "metadata": {"name": NODE},
        "status": {"conditions": [{"type": "Ready", "status": "True",
                                   "reason": "KubeletReady"}]}})
    return sim


def lease(sim) -> client.V1Lease:
    return client.CoordinationV1Api(sim.api).read_namespaced_lease(NODE, "kube-node-lease")


def test_a_ready_nodes_kubelet_holds_its_lease_and_renews_it(sim):
    first = wait_for(lambda: lease(sim), message="the node's lease")
    assert first.spec.holder_identity == NODE
    assert first.spec.lease_duration_seconds == 40
    owner = first.metadata.owner_references[0]
    node = client.CoreV1Api(sim.api).read_node(NODE)
    assert (owner.kind, owner.name, owner.uid) == ("Node", NODE, node.metadata.uid)
    wait_for(lambda: lease(sim).spec.renew_time > first.spec.renew_time, message="a renewal")


def test_a_not_ready_nodes_lease_goes_stale_until_its_kubelet_is_back(sim):
    wait_for(lambda: lease(sim), message="the node's lease")
    sim.fault("node-notready", NODE)
    stale = lease(sim).spec.renew_time
    time.sleep(2)  # four renewal periods
    assert lease(sim).spec.renew_time == stale
    sim.fault("node-ready", NODE)
    wait_for(lambda: lease(sim).spec.renew_time > stale, message="renewed again")
