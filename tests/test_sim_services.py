"""Services as kube-apiserver stores them: a cluster IP (and node ports) allocated on create,
the defaults filled in, the allocated values kept by an update that leaves them out (a PUT of
a manifest, a server-side apply), and a changed cluster IP refused."""

from __future__ import annotations

import ipaddress

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import status_message

pytestmark = pytest.mark.timeout(60)
NS = "default"


def service(name: str = "web", **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80}], **spec}}


def test_a_service_gets_a_cluster_ip_from_the_service_range_and_kubes_defaults(sim):
    core = client.CoreV1Api(sim.api)
    made = core.create_namespaced_service(NS, service())
    spec = made.spec
    assert ipaddress.ip_address(spec.cluster_ip) in ipaddress.ip_network("10.96.0.0/12")
    assert spec.cluster_ips == [spec.cluster_ip]
    assert (spec.type, spec.session_affinity, spec.ip_families, spec.ip_family_policy,
            spec.internal_traffic_policy) == ("ClusterIP", "None", ["IPv4"], "SingleStack",
                                              "Cluster")
    assert (spec.ports[0].protocol, spec.ports[0].target_port) == ("TCP", 80)
    other = core.create_namespaced_service(NS, service("api"))
    assert other.spec.cluster_ip != spec.cluster_ip


def test_headless_and_node_port_services(sim):
    core = client.CoreV1Api(sim.api)
    headless = core.create_namespaced_service(NS, service("db", clusterIP="None"))
    assert headless.spec.cluster_ip == "None"
    node_port = core.create_namespaced_service(NS, service("edge", type="NodePort"))
    assert 30000 <= node_port.spec.ports[0].node_port <= 32767


def test_an_update_without_the_cluster_ip_keeps_it_and_a_changed_one_is_refused(sim):
    core = client.CoreV1Api(sim.api)
    ip = core.create_namespaced_service(NS, service()).spec.cluster_ip
    replaced = core.replace_namespaced_service("web", NS, service(selector={"app": "v2"}))
    assert replaced.spec.cluster_ip == ip and replaced.spec.selector == {"app": "v2"}
    applied = core.patch_namespaced_service("web", NS, service(), field_manager="ci", force=True,
                                            _content_type="application/apply-patch+yaml")
    assert applied.spec.cluster_ip == ip
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("web", NS, {"spec": {"clusterIP": "10.96.0.99",
                                                           "clusterIPs": ["10.96.0.99"]}})
    assert err.value.status == 422
    assert status_message(err.value) == (
        'Service "web" is invalid: spec.clusterIPs[0]: Invalid value: '
        '[]string{"10.96.0.99"}: may not change once set')
