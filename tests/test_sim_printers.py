"""simcluster's table printers, object -> row, as kube-apiserver's printers fill them (pure
functions: no server). The cells are the wide ones: kubectl hides the columns of priority > 0
unless `-o wide`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuops.simcluster.apiserver.printers import printer_for
from gpuops.simcluster.apiserver.printers.base import (
    human_duration,
    selector_string,
)
from gpuops.simcluster.apiserver.printers.custom import (
    JsonPathError,
    compile_path,
    crd_printer,
    first_match,
)

NOW = datetime(2027, 1, 15, 9, 0, 0, tzinfo=UTC).timestamp()  # the cluster clock
T0 = "2027-01-15T08:00:00Z"  # NOW - 3600 s
T_MINUS_10S = "2027-01-15T08:59:50Z"


def row(group: str, kind: str, obj: dict, *, builtin: bool = True) -> dict[str, object]:
    printer = printer_for(group, "v1", kind, builtin=builtin)
    return dict(zip([c.name for c in printer.columns], printer.cells(obj, NOW), strict=True))


def meta(name: str = "x", **more: object) -> dict:
    return {"name": name, "namespace": "default", "creationTimestamp": T0, **more}


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (125, "2m5s"),
    (600, "10m"), (10799, "179m"), (10800, "3h"), (3 * 3600 + 60 * 7, "3h7m"),
    (8 * 3600 + 59, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (50 * 3600, "2d2h"),
    (8 * 86400, "8d"), (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y")])
def test_ages_read_as_apimachinerys_human_duration(seconds, text):
    assert human_duration(seconds) == text


# --- pods --------------------------------------------------------------------------------------

def pod(*, containers: list[dict] | None = None, init: list[dict] | None = None,
        spec: dict | None = None, **status: object) -> dict:
    body_spec = {"nodeName": "n1", "containers": [{"name": "app"}], **(spec or {})}
    if init:
        body_spec["initContainers"] = [{"name": c["name"], **c.get("spec", {})} for c in init]
    return {"metadata": meta("p"), "spec": body_spec,
            "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.4"}],
                       "containerStatuses": containers or [], **status,
                       **({"initContainerStatuses": [c["status"] for c in init]} if init
                          else {})}}


RUNNING = {"name": "app", "ready": True, "restartCount": 0,
           "state": {"running": {"startedAt": T0}}}


def test_a_running_ready_pod_and_its_wide_cells():
    assert row("", "Pod", pod(containers=[RUNNING])) == {
        "Name": "p", "Ready": "1/1", "Status": "Running", "Restarts": "0", "Age": "60m",
        "IP": "10.1.0.4", "Node": "n1", "Nominated Node": "<none>", "Readiness Gates": "<none>"}


def test_a_crash_looping_container_shows_crashloopbackoff_and_when_it_last_restarted():
    crashing = {"name": "app", "ready": False, "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                             "finishedAt": T_MINUS_10S}}}
    cells = row("", "Pod", pod(containers=[crashing]))
    assert (cells["Ready"], cells["Status"], cells["Restarts"]) == (
        "0/1", "CrashLoopBackOff", "4 (10s ago)")


@pytest.mark.parametrize(("state", "status"), [
    ({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, "OOMKilled"),
    ({"terminated": {"exitCode": 3}}, "ExitCode:3"),
    ({"terminated": {"exitCode": 0, "signal": 9}}, "Signal:9"),
    ({"waiting": {"reason": "ContainerCreating"}}, "ContainerCreating"),
    ({"waiting": {"reason": "ImagePullBackOff"}}, "ImagePullBackOff"),
])
def test_the_status_is_the_containers_waiting_or_terminated_reason(state, status):
    container = {"name": "app", "ready": False, "restartCount": 0, "state": state}
    assert row("", "Pod", pod(containers=[container]))["Status"] == status


def test_the_first_containers_reason_wins_over_the_later_ones():
    first = {"name": "a", "ready": False, "state": {"waiting": {"reason": "ErrImagePull"}}}
    second = {"name": "b", "ready": False, "state": {"terminated": {"reason": "Error"}}}
    obj = pod(containers=[first, second], spec={"containers": [{"name": "a"}, {"name": "b"}]})
    assert row("", "Pod", obj)["Status"] == "ErrImagePull"


def init_container(name: str, state: dict, **more: object) -> dict:
    return {"name": name, "spec": more.pop("spec", {}),
            "status": {"name": name, "ready": False, "restartCount": 0, "state": state, **more}}


@pytest.mark.parametrize(("states", "status"), [
    ([{"running": {}}], "Init:0/1"),
    ([{"terminated": {"exitCode": 0}}, {"waiting": {"reason": "PodInitializing"}}], "Init:1/2"),
    ([{"waiting": {"reason": "CrashLoopBackOff"}}], "Init:CrashLoopBackOff"),
    ([{"terminated": {"exitCode": 1, "reason": "Error"}}], "Init:Error"),
    ([{"terminated": {"exitCode": 2}}], "Init:ExitCode:2"),
])
def test_init_containers_in_the_way_show_as_init(states, status):
    init = [init_container(f"init-{i}", s) for i, s in enumerate(states)]
    waiting = {"name": "app", "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}
    assert row("", "Pod", pod(containers=[waiting], init=init, phase="Pending"))["Status"] \
        == status


def test_a_started_sidecar_counts_as_a_container_and_does_not_block_the_pod():
    sidecar = init_container("proxy", {"running": {}}, started=True, ready=True,
                             spec={"restartPolicy": "Always"})
    cells = row("", "Pod", pod(containers=[RUNNING], init=[sidecar],
                               conditions=[{"type": "Initialized", "status": "True"}]))
    assert (cells["Ready"], cells["Status"]) == ("2/2", "Running")


def test_a_deleted_pod_is_terminating_unless_it_already_ended_or_its_node_was_lost():
    deleted = pod(containers=[RUNNING])
    deleted["metadata"]["deletionTimestamp"] = T0
    assert row("", "Pod", deleted)["Status"] == "Terminating"
    deleted["status"]["reason"] = "NodeLost"
    assert row("", "Pod", deleted)["Status"] == "Unknown"
    done = pod(containers=[{"name": "app", "state": {"terminated": {"exitCode": 0,
                                                                    "reason": "Completed"}}}],
               phase="Succeeded")
    done["metadata"]["deletionTimestamp"] = T0
    assert row("", "Pod", done)["Status"] == "Completed"


def test_a_completed_container_beside_a_running_one_reads_running_or_not_ready():
    done = {"name": "a", "ready": False, "state": {"terminated": {"exitCode": 0,
                                                                  "reason": "Completed"}}}
    live = {**RUNNING, "name": "b"}
    spec = {"containers": [{"name": "a"}, {"name": "b"}]}
    assert row("", "Pod", pod(containers=[done, live], spec=spec))["Status"] == "NotReady"
    ready = pod(containers=[done, live], spec=spec,
                conditions=[{"type": "Ready", "status": "True"}])
    assert row("", "Pod", ready)["Status"] == "Running"


def test_pod_reason_scheduling_gates_nominated_node_and_readiness_gates():
    evicted = pod(reason="Evicted", phase="Failed")
    assert row("", "Pod", evicted)["Status"] == "Evicted"
    gated = pod(phase="Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                              "reason": "SchedulingGated"}])
    assert row("", "Pod", gated)["Status"] == "SchedulingGated"
    gates = pod(containers=[RUNNING], nominatedNodeName="n2",
                spec={"readinessGates": [{"conditionType": "example.com/a"},
                                         {"conditionType": "example.com/b"}]},
                conditions=[{"type": "example.com/a", "status": "True"},
                            {"type": "example.com/b", "status": "False"}])
    cells = row("", "Pod", gates)
    assert (cells["Nominated Node"], cells["Readiness Gates"]) == ("n2", "1/2")


def test_finished_pods_carry_a_completed_row_condition():
    printer = printer_for("", "v1", "Pod", builtin=True)
    assert printer.conditions is not None
    assert printer.conditions(pod(phase="Succeeded")) == [
        {"type": "Completed", "status": "True", "reason": "Succeeded",
         "message": "The pod has completed successfully."}]
    assert printer.conditions(pod(phase="Failed"))[0]["reason"] == "Failed"
    assert printer.conditions(pod()) == []


# --- nodes -------------------------------------------------------------------------------------

def node(ready: str | None, *, unschedulable: bool = False, labels: dict | None = None) -> dict:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {"metadata": meta("n1", labels=labels or {}),
            "spec": {"unschedulable": unschedulable},
            "status": {"conditions": conditions,
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.5", "osImage": "AL2023"}}}


@pytest.mark.parametrize(("ready", "unschedulable", "status"), [
    ("True", False, "Ready"), ("True", True, "Ready,SchedulingDisabled"),
    ("False", False, "NotReady"), ("Unknown", True, "NotReady,SchedulingDisabled"),
    (None, False, "Unknown")])
def test_node_status_is_its_ready_condition_and_cordon(ready, unschedulable, status):
    assert row("", "Node", node(ready, unschedulable=unschedulable))["Status"] == status


def test_node_roles_version_and_wide_cells():
    labels = {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/gpu": "",
              "kubernetes.io/role": "inference", "node-role.kubernetes.io/": ""}
    cells = row("", "Node", node("True", labels=labels))
    assert cells == {"Name": "n1", "Status": "Ready", "Roles": "control-plane,gpu,inference",
                     "Age": "60m", "Version": "v1.33.5", "Internal-IP": "10.0.0.5",
                     "External-IP": "<none>", "OS-Image": "AL2023",
                     "Kernel-Version": "<unknown>", "Container-Runtime": "<unknown>"}
    assert row("", "Node", node("True"))["Roles"] == "<none>"


# --- workloads ---------------------------------------------------------------------------------

TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"},
                                    {"name": "proxy", "image": "envoy:1.31"}],
                     "nodeSelector": {"pool": "l4", "gpu": "true"}}}
SELECTOR = {"matchLabels": {"app": "llama"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]}


def test_label_selectors_print_sorted_by_key_as_kubernetes_formats_them():
    assert selector_string(SELECTOR) == "app=llama,!canary,tier in (a,b)"
    assert selector_string({"matchExpressions": [
        {"key": "x", "operator": "NotIn", "values": ["1"]}, {"key": "y", "operator": "Exists"}]}
    ) == "x notin (1),y"
    assert selector_string({}) == ""


def test_deployment_replicaset_statefulset_and_daemonset_rows():
    spec = {"replicas": 4, "selector": SELECTOR, "template": TEMPLATE}
    status = {"replicas": 4, "readyReplicas": 3, "updatedReplicas": 2, "availableReplicas": 3}
    assert row("apps", "Deployment", {"metadata": meta("d"), "spec": spec,
                                      "status": status}) == {
        "Name": "d", "Ready": "3/4", "Up-to-date": 2, "Available": 3, "Age": "60m",
        "Containers": "vllm,proxy", "Images": "vllm/vllm-openai:v0.11.0,envoy:1.31",
        "Selector": "app=llama,!canary,tier in (a,b)"}
    assert list(row("apps", "ReplicaSet", {"metadata": meta("r"), "spec": spec,
                                           "status": status}).values())[:4] == ["r", 4, 4, 3]
    assert row("apps", "StatefulSet", {"metadata": meta("s"), "spec": {"template": TEMPLATE},
                                       "status": {}})["Ready"] == "0/1"  # replicas default 1
    ds = row("apps", "DaemonSet", {"metadata": meta("ds"), "spec": {
        "selector": {"matchLabels": {"app": "dcgm"}}, "template": TEMPLATE}, "status": {
        "desiredNumberScheduled": 10, "currentNumberScheduled": 9, "numberReady": 8,
        "updatedNumberScheduled": 7, "numberAvailable": 6}})
    assert [ds[c] for c in ("Desired", "Current", "Ready", "Up-to-date", "Available",
                            "Node Selector", "Selector")] == [
        10, 9, 8, 7, 6, "gpu=true,pool=l4", "app=dcgm"]


@pytest.mark.parametrize(("conditions", "deleting", "status"), [
    ([], False, "Running"), ([{"type": "Complete", "status": "True"}], False, "Complete"),
    ([{"type": "Failed", "status": "True"}], False, "Failed"), ([], True, "Terminating"),
    ([{"type": "Suspended", "status": "True"}], False, "Suspended"),
    ([{"type": "FailureTarget", "status": "True"}], False, "FailureTarget"),
    ([{"type": "Complete", "status": "False"}], False, "Running")])
def test_job_status(conditions, deleting, status):
    job = {"metadata": meta("j", **({"deletionTimestamp": T0} if deleting else {})),
           "spec": {"template": TEMPLATE}, "status": {"conditions": conditions}}
    assert row("batch", "Job", job)["Status"] == status


def test_job_completions_and_duration():
    def job(spec: dict, status: dict) -> dict[str, object]:
        return row("batch", "Job", {"metadata": meta("j"), "spec": {"template": TEMPLATE,
                                                                     **spec}, "status": status})

    running = job({"completions": 8}, {"succeeded": 3, "startTime": T0})
    assert (running["Completions"], running["Duration"]) == ("3/8", "60m")
    assert job({"parallelism": 4}, {"succeeded": 1})["Completions"] == "1/1 of 4"
    assert job({}, {})["Completions"] == "0/1"
    assert job({}, {})["Duration"] == ""
    done = job({"completions": 1}, {"succeeded": 1, "startTime": T0,
                                    "completionTime": T_MINUS_10S})
    assert done["Duration"] == "59m"  # from 10 minutes on, whole minutes


# --- events, services, the rest -------------------------------------------------------------------

def test_core_and_events_v1_events_print_the_same_columns():
    core = {"metadata": meta("crashy.1"), "type": "Warning", "reason": "BackOff",
            "message": "Back-off restarting failed container\n", "count": 7,
            "firstTimestamp": T0, "lastTimestamp": T_MINUS_10S,
            "involvedObject": {"kind": "Pod", "name": "crashy",
                               "fieldPath": "spec.containers{app}"},
            "source": {"component": "kubelet", "host": "n1"}}
    expected = {"Last Seen": "10s", "Type": "Warning", "Reason": "BackOff",
                "Object": "pod/crashy", "Subobject": "spec.containers{app}",
                "Source": "kubelet, n1", "Message": "Back-off restarting failed container",
                "First Seen": "60m", "Count": 7, "Name": "crashy.1"}
    assert row("", "Event", core) == expected
    v1 = {"metadata": meta("crashy.1"), "type": "Warning", "reason": "BackOff",
          "note": "Back-off restarting failed container", "deprecatedCount": 7,
          "deprecatedFirstTimestamp": T0, "deprecatedLastTimestamp": T_MINUS_10S,
          "regarding": {"kind": "Pod", "name": "crashy", "fieldPath": "spec.containers{app}"},
          "reportingController": "kubelet", "reportingInstance": "n1"}
    assert row("events.k8s.io", "Event", v1) == expected


def test_a_singleton_new_style_event_counts_one_and_is_seen_at_its_event_time():
    event = {"metadata": meta("e"), "type": "Normal", "reason": "Scheduled",
             "eventTime": "2027-01-15T08:59:50.123456Z",
             "regarding": {"kind": "Pod", "name": "p"}, "note": "assigned"}
    cells = row("events.k8s.io", "Event", event)
    # 9.88 s ago: whole seconds, truncated
    assert (cells["Last Seen"], cells["First Seen"], cells["Count"]) == ("9s", "9s", 1)


def test_service_rows():
    svc = {"metadata": meta("llama"), "spec": {
        "clusterIP": "10.96.0.12", "clusterIPs": ["10.96.0.12"], "selector": {"app": "llama"},
        "ports": [{"port": 8000, "protocol": "TCP"}, {"port": 9090, "nodePort": 30090}]}}
    assert row("", "Service", svc) == {
        "Name": "llama", "Type": "ClusterIP", "Cluster-IP": "10.96.0.12",
        "External-IP": "<none>", "Port(s)": "8000/TCP,9090:30090/TCP", "Age": "60m",
        "Selector": "app=llama"}
    lb = {"metadata": meta("gw"), "spec": {"type": "LoadBalancer", "ports": []},
          "status": {"loadBalancer": {"ingress": [{"hostname": "a.elb.amazonaws.com"}]}}}
    assert row("", "Service", lb)["External-IP"] == "a.elb.amazonaws.com"
    pending = {"metadata": meta("gw"), "spec": {"type": "LoadBalancer"}}
    assert (row("", "Service", pending)["External-IP"],
            row("", "Service", pending)["Port(s)"]) == ("<pending>", "<none>")


def test_namespaces_configmaps_secrets_serviceaccounts_pdbs_and_priorityclasses():
    assert list(row("", "Namespace", {"metadata": meta("ns"), "status": {"phase": "Active"}}
                    ).values()) == ["ns", "Active", "60m"]
    assert row("", "ConfigMap", {"metadata": meta("c"), "data": {"a": "1", "b": "2"},
                                 "binaryData": {"c": ""}})["Data"] == 3
    secret = row("", "Secret", {"metadata": meta("s"), "data": {"token": "eA=="}})
    assert (secret["Type"], secret["Data"]) == ("Opaque", 1)
    assert row("", "ServiceAccount", {"metadata": meta("sa"), "secrets": [{}]})["Secrets"] == 1
    pdb = row("policy", "PodDisruptionBudget", {"metadata": meta("p"), "spec": {
        "minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}})
    assert list(pdb.values()) == ["p", "50%", "N/A", 1, "60m"]
    pc = row("scheduling.k8s.io", "PriorityClass", {"metadata": meta("pc"), "value": -10,
                                                    "preemptionPolicy": "Never"})
    assert list(pc.values()) == ["pc", -10, False, "60m", "Never"]


def test_a_builtin_without_a_printer_gets_name_and_created_at():
    printer = printer_for("apiextensions.k8s.io", "v1", "CustomResourceDefinition",
                          builtin=True)
    assert [c.name for c in printer.columns] == ["Name", "Created At"]
    assert printer.cells({"metadata": meta("a.b")}, NOW) == ["a.b", T0]


def test_every_wide_column_has_priority_one_and_every_row_fills_every_column():
    wide = {c.name for c in printer_for("", "v1", "Pod", builtin=True).columns if c.priority}
    assert wide == {"IP", "Node", "Nominated Node", "Readiness Gates"}
    for group, kind in [("", "Node"), ("", "Service"), ("apps", "Deployment"),
                        ("apps", "DaemonSet"), ("batch", "Job"), ("", "Event")]:
        printer = printer_for(group, "v1", kind, builtin=True)
        assert len(printer.cells({"metadata": meta()}, NOW)) == len(printer.columns), kind


# --- custom resources -------------------------------------------------------------------------------

ROUTE = {"metadata": meta("r"), "spec": {"hostnames": ["a.example.com", "b.example.com"]},
         "status": {"addresses": [{"value": "10.0.0.1"}, {"value": "10.0.0.2"}],
                    "conditions": [{"type": "Accepted", "status": "True"},
                                   {"type": "Programmed", "status": "False"}]}}


@pytest.mark.parametrize(("path", "value"), [
    (".spec.hostnames", ["a.example.com", "b.example.com"]),
    (".spec.hostnames[1]", "b.example.com"), (".spec.hostnames[-1]", "b.example.com"),
    (".status.addresses[*].value", "10.0.0.1"),
    ('.status.conditions[?(@.type=="Programmed")].status', "False"),
    (".status.conditions[?(@.type=='Accepted')].status", "True"),
    ("{.metadata.name}", "r"), (".metadata['name']", "r"), (".spec.missing", None),
    (".spec.hostnames[5]", None)])
def test_crd_column_json_paths_select_the_first_match(path, value):
    assert first_match(ROUTE, compile_path(path)) == value


def test_an_unsupported_json_path_is_refused_naming_it():
    with pytest.raises(JsonPathError, match=r"unsupported JSONPath '\.a\.\.b'"):
        compile_path(".a..b")


def test_crd_columns_are_typed_and_missing_values_are_empty_cells():
    printer = crd_printer([
        {"name": "Hostnames", "type": "string", "jsonPath": ".spec.hostnames"},
        {"name": "Addresses", "type": "integer", "jsonPath": ".status.addresses[*].value"},
        {"name": "Ready", "type": "boolean", "jsonPath": ".spec.ready"},
        {"name": "Since", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Broken", "type": "string", "jsonPath": ".a..b", "priority": 1}])
    assert [c.name for c in printer.columns] == ["Name", "Hostnames", "Addresses", "Ready",
                                                 "Since", "Broken"]
    assert printer.columns[-1].priority == 1
    assert printer.columns[1].description == ("Custom resource definition column (in JSONPath "
                                              "format): .spec.hostnames")
    assert printer.cells(ROUTE, NOW) == ["r", '["a.example.com","b.example.com"]', None, None,
                                         "60m", None]


def test_custom_resources_print_their_crds_columns_or_name_and_age():
    crd = {"spec": {"versions": [
        {"name": "v1", "additionalPrinterColumns": [
            {"name": "Model", "type": "string", "jsonPath": ".spec.model"}]},
        {"name": "v2"}]}}
    v1 = printer_for("example.com", "v1", "Cache", builtin=False, crd=crd)
    assert [c.name for c in v1.columns] == ["Name", "Model"]
    v2 = printer_for("example.com", "v2", "Cache", builtin=False, crd=crd)
    assert [c.name for c in v2.columns] == ["Name", "Age"]
    assert [c.type for c in v2.columns] == ["string", "date"]


@pytest.mark.parametrize(("group", "kind", "columns"), [
    ("inference.networking.k8s.io", "InferencePool", ["Name", "Age"]),
    ("gateway.networking.k8s.io", "HTTPRoute", ["Name", "Hostnames", "Age"]),
    ("gateway.networking.k8s.io", "Gateway", ["Name", "Class", "Address", "Programmed", "Age"]),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet", ["Name", "Ready", "Desired", "Up-to-date",
                                                     "Age"])])
def test_resources_served_built_in_that_are_crds_upstream_print_the_upstream_columns(
        group, kind, columns):
    printer = printer_for(group, "v1", kind, builtin=False)
    assert [c.name for c in printer.columns] == columns
    gateway = printer_for("gateway.networking.k8s.io", "v1", "Gateway", builtin=False)
    assert gateway.cells(ROUTE, NOW)[2:4] == ["10.0.0.1", "False"]
