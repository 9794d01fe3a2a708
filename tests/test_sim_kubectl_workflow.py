"""A platform engineer's first session on `make up`'s cluster, with the real kubectl and helm.

The cluster is started as `gpuops up` starts it (`start_simcluster` with the default scenario,
real-time clock, node pools backed by moto's AWS) and each test is one step a newcomer takes:
look around, create and apply, diff, explain, edit, scale and roll out, cordon and drain, check
access, read logs and events, install a chart. The assertions are on what the user reads: the
columns, statuses and messages kubectl and helm print. kubectl commands that need a container
runtime (exec, cp, attach, port-forward, debug) are checked for a clear refusal.

One cluster serves the module (starting it takes seconds); each test works in its own namespace
or on its own node, so the order of the tests does not matter.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuops.common.settings import UpSettings
from gpuops.deployments.services import start_moto, start_simcluster
from tests.helpers import wait_for
from tests.kubectl import table

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`make up`'s cluster: its kubeconfig."""
    home = tmp_path_factory.mktemp("gpuops-home")
    moto = start_moto(home)
    kubeconfig = home / "simcluster" / "kubeconfig.yaml"
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    defaults = UpSettings.model_fields  # what `gpuops up` starts when nothing is set
    sim = start_simcluster(home, kubeconfig=kubeconfig, scenario=defaults["scenario"].default,
                           speed=defaults["sim_speed"].default, aws_endpoint=moto.url)
    try:
        yield kubeconfig
    finally:
        sim.stop()
        moto.stop()


def get_json(kubectl, up: Path, *args: str) -> dict:
    return json.loads(kubectl(up, "get", *args, "-o", "json"))


def running_pods(kubectl, up: Path, namespace: str, selector: str, count: int) -> list[dict]:
    def ready() -> list[dict]:
        items = get_json(kubectl, up, "pods", "-n", namespace, "-l", selector)["items"]
        ok = [p for p in items if p["status"].get("phase") == "Running"
              and not p["metadata"].get("deletionTimestamp")]
        return ok if len(ok) == count else []
    return wait_for(ready, timeout=60, message=f"{count} running pods {selector}")


def idle_gpu_node(kubectl, up: Path) -> str:
    """A GPU node that runs only DaemonSet pods (the default scenario leaves A100 and H100
    capacity idle)."""
    pods = get_json(kubectl, up, "pods", "-A")["items"]
    busy = {p["spec"].get("nodeName") for p in pods
            if not any(o.get("kind") == "DaemonSet"
                       for o in p["metadata"].get("ownerReferences") or [])}
    nodes = get_json(kubectl, up, "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    return next(n["metadata"]["name"] for n in nodes
                if n["metadata"]["name"] not in busy and not n["spec"].get("unschedulable"))


# --- looking around ----------------------------------------------------------------------------

def test_get_pods_all_namespaces_shows_the_default_workloads_with_their_status(kubectl, up):
    rows = table(kubectl(up, "get", "pods", "-A"))
    assert list(rows[0]) == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert {"inference", "kube-system", "training"} <= {r["NAMESPACE"] for r in rows}
    assert any(r["NAME"].startswith("llama-3-8b-") for r in rows)
    assert all(re.fullmatch(r"\d+/\d+", r["READY"]) for r in rows)
    assert {r["STATUS"] for r in rows} <= {"Running", "ContainerCreating", "Pending",
                                           "Completed", "Terminating"}
    plugins = [r for r in rows if r["NAME"].startswith("nvidia-device-plugin-daemonset-")]
    assert len(plugins) == 10  # one per GPU node: 3 H100, 3 A100, 4 L4


def test_get_nodes_wide_shows_every_node_ready_with_its_kubelet_version_and_ip(kubectl, up):
    rows = table(kubectl(up, "get", "nodes", "-o", "wide"))
    assert list(rows[0])[:7] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP",
                                 "EXTERNAL-IP"]
    nodes = {n["metadata"]["name"]: n for n in get_json(kubectl, up, "nodes")["items"]}
    assert {r["NAME"] for r in rows} == set(nodes) and len(nodes) == 12
    for row in rows:
        status = nodes[row["NAME"]]["status"]
        ip = next(a["address"] for a in status["addresses"] if a["type"] == "InternalIP")
        assert (row["STATUS"], row["INTERNAL-IP"]) == ("Ready", ip)
        assert row["VERSION"] == status["nodeInfo"]["kubeletVersion"]
        assert row["VERSION"].startswith("v1.33.")


def test_describe_node_shows_its_gpus_taint_lease_and_the_pods_it_runs(kubectl, up):
    node = get_json(kubectl, up, "nodes", "-l", "gpuops.io/pool=l4")["items"][0]
    name = node["metadata"]["name"]
    out = kubectl(up, "describe", "node", name)
    assert f"Name:               {name}" in out
    assert "Taints:             nvidia.com/gpu=present:NoSchedule" in out
    assert re.search(r"^  nvidia\.com/gpu:\s+4$", out, re.MULTILINE)  # capacity and allocatable
    assert f"HolderIdentity:  {name}" in out  # the kubelet's lease, not "Failed to get lease"
    leases = table(kubectl(up, "get", "leases", "-n", "kube-node-lease"))
    assert list(leases[0]) == ["NAME", "HOLDER", "AGE"] and len(leases) == 12
    assert "Non-terminated Pods:" in out and "nvidia-device-plugin-daemonset-" in out
    assert re.search(r"^  nvidia\.com/gpu\s+\d+\s+\d+$", out, re.MULTILINE)  # allocated resources


def test_top_nodes_and_pods_show_usage_from_the_metrics_api(kubectl, up):
    rows = wait_for(lambda: table(kubectl(up, "top", "nodes")), message="node metrics")
    assert list(rows[0]) == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
    assert len(rows) == 12
    assert all(re.fullmatch(r"\d+m", r["CPU(cores)"]) and r["MEMORY(bytes)"].endswith("Mi")
               for r in rows)
    # metrics-server has no figures for a pod before its first scrape window: "metrics not
    # available yet", as on a real cluster just after start-up
    pods = wait_for(lambda: table(kubectl.run(up, "top", "pods", "-n", "kube-system").stdout),
                    message="pod metrics")
    assert list(pods[0]) == ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert any(r["NAME"].startswith("nvidia-device-plugin-daemonset-") for r in pods)


def test_inferencepools_httproutes_and_gateways_show_their_crds_columns_and_status(
        kubectl, up):
    pools = table(kubectl(up, "get", "inferencepools", "-A"))
    assert list(pools[0]) == ["NAMESPACE", "NAME", "AGE"]  # InferencePool v1 declares none
    assert {r["NAME"] for r in pools} == {"llama-3-8b", "qwen-72b"}
    routes = table(kubectl(up, "get", "httproutes", "-n", "inference"))
    assert list(routes[0]) == ["NAME", "HOSTNAMES", "AGE"]
    assert {r["NAME"] for r in routes} == {"llama-3-8b", "qwen-72b"}
    gateways = wait_for(lambda: [r for r in table(kubectl(up, "get", "gateways", "-n",
                                                          "inference"))
                                 if r["PROGRAMMED"] == "True"], message="a programmed gateway")
    assert list(gateways[0]) == ["NAME", "CLASS", "ADDRESS", "PROGRAMMED", "AGE"]
    assert (gateways[0]["NAME"], gateways[0]["CLASS"]) == ("inference-gateway", "istio")
    described = kubectl(up, "describe", "httproute", "llama-3-8b", "-n", "inference")
    assert "Controller Name:         istio.io/gateway-controller" in described


def test_auth_can_i_and_whoami_answer_for_the_kubeconfigs_user(kubectl, up):
    assert kubectl(up, "auth", "can-i", "create", "deployments", "-n", "inference") == "yes\n"
    assert kubectl(up, "auth", "can-i", "create", "pods/eviction", "-n", "inference"
                   ) == "yes\n"
    who = table(kubectl(up, "auth", "whoami"))
    assert {r["ATTRIBUTE"]: r["VALUE"] for r in who}["Groups"].startswith("[system:masters")


def test_version_cluster_info_and_config_view_describe_the_server(kubectl, up):
    assert re.search(r"^Server Version: v1\.33\.\d+", kubectl(up, "version"), re.MULTILINE)
    served = json.loads(kubectl(up, "version", "-o", "json"))["serverVersion"]["gitVersion"]
    openapi = json.loads(kubectl(up, "get", "--raw", "/openapi/v2"))["info"]["version"]
    assert served.startswith(f"{openapi}-")  # one version, wherever a client reads it
    assert kubectl(up, "get", "--raw", "/readyz?verbose").splitlines() == [
        "[+]ping ok", "readyz check passed"]
    info = kubectl(up, "cluster-info")
    assert re.search(r"Kubernetes control plane is running at http://127\.0\.0\.1:\d+", info)
    dump = kubectl(up, "cluster-info", "dump", "--namespaces", "inference")
    assert '"kind": "NodeList"' in dump and '"kind": "ReplicationControllerList"' in dump
    assert '"name": "llama-3-8b-epp"' in dump
    view = kubectl(up, "config", "view", "--minify")
    assert "token: REDACTED" in view and "current-context: sim" in view


# --- creating and changing things --------------------------------------------------------------

def test_create_scale_and_roll_out_a_deployment_restart_then_undo(kubectl, up):
    assert kubectl(up, "create", "namespace", "rollouts") == "namespace/rollouts created\n"
    kubectl(up, "create", "deployment", "web", "--image=nginx:1.27", "--replicas=2",
            "-n", "rollouts")
    status = kubectl(up, "rollout", "status", "deploy/web", "-n", "rollouts", "--timeout=60s")
    assert 'deployment "web" successfully rolled out' in status
    template = get_json(kubectl, up, "deploy", "web", "-n", "rollouts")["spec"]["template"]
    spec = template["spec"]  # kube's pod spec defaults, as `get -o yaml` shows them
    assert {k: spec[k] for k in ("dnsPolicy", "restartPolicy", "schedulerName",
                                 "securityContext", "terminationGracePeriodSeconds")} == {
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
        "schedulerName": "default-scheduler", "securityContext": {},
        "terminationGracePeriodSeconds": 30}
    assert spec["containers"][0]["terminationMessagePolicy"] == "File"
    assert kubectl(up, "scale", "deploy/web", "--replicas=3", "-n", "rollouts"
                   ) == "deployment.apps/web scaled\n"
    kubectl(up, "rollout", "status", "deploy/web", "-n", "rollouts", "--timeout=60s")
    row = table(kubectl(up, "get", "deploy", "web", "-n", "rollouts"))[0]
    assert (row["READY"], row["UP-TO-DATE"], row["AVAILABLE"]) == ("3/3", "3", "3")

    assert kubectl(up, "rollout", "restart", "deploy/web", "-n", "rollouts"
                   ) == "deployment.apps/web restarted\n"
    kubectl(up, "rollout", "status", "deploy/web", "-n", "rollouts", "--timeout=90s")
    assert kubectl(up, "rollout", "undo", "deploy/web", "-n", "rollouts"
                   ) == "deployment.apps/web rolled back\n"
    kubectl(up, "rollout", "status", "deploy/web", "-n", "rollouts", "--timeout=90s")
    # The undo brought back revision 1's ReplicaSet as revision 3: two ReplicaSets, history
    # 2 and 3 (a new ReplicaSet for the same template would leave 1, 2, 3 and a third one).
    history = table(kubectl(up, "rollout", "history", "deploy/web", "-n", "rollouts"
                            ).split("\n", 1)[1])
    assert [r["REVISION"] for r in history] == ["2", "3"]
    assert len(get_json(kubectl, up, "rs", "-n", "rollouts")["items"]) == 2
    running_pods(kubectl, up, "rollouts", "app=web", 3)


MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: apply
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: api
        image: ghcr.io/acme/api:1.0
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: apply
spec:
  selector: {app: api}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: api-config
  namespace: apply
data:
  LOG_LEVEL: info
"""


def test_apply_then_diff_then_server_side_apply_a_manifest(kubectl, up, tmp_path):
    kubectl(up, "create", "namespace", "apply")
    first, second = tmp_path / "v1.yaml", tmp_path / "v2.yaml"
    first.write_text(MANIFEST)
    second.write_text(MANIFEST.replace("LOG_LEVEL: info", "LOG_LEVEL: debug")
                      .replace("api:1.0", "api:1.1"))
    assert kubectl(up, "apply", "-f", str(first)).splitlines() == [
        "deployment.apps/api created", "service/api created", "configmap/api-config created"]
    assert kubectl(up, "diff", "-f", str(first)) == ""  # exit 0: nothing would change

    diff = kubectl.run(up, "diff", "-f", str(second))
    assert diff.returncode == 1, diff.stderr  # 1: differences found
    assert "-  LOG_LEVEL: info\n+  LOG_LEVEL: debug" in diff.stdout
    assert "-      - image: ghcr.io/acme/api:1.0\n+      - image: ghcr.io/acme/api:1.1" in (
        diff.stdout)
    assert get_json(kubectl, up, "cm", "api-config", "-n", "apply")["data"] == {
        "LOG_LEVEL": "info"}  # a diff changes nothing

    applied = kubectl(up, "apply", "--server-side", "-f", str(second))
    assert applied.splitlines() == ["deployment.apps/api serverside-applied",
                                    "service/api serverside-applied",
                                    "configmap/api-config serverside-applied"]
    cm = get_json(kubectl, up, "cm", "api-config", "-n", "apply", "--show-managed-fields")
    assert cm["data"] == {"LOG_LEVEL": "debug"}
    assert "kubectl" in {m["manager"] for m in cm["metadata"]["managedFields"]}
    row = table(kubectl(up, "get", "svc", "api", "-n", "apply"))[0]
    assert (row["TYPE"], row["PORT(S)"]) == ("ClusterIP", "80/TCP")
    assert re.fullmatch(r"10\.\d+\.\d+\.\d+", row["CLUSTER-IP"])


def test_explain_describes_fields_from_the_servers_openapi(kubectl, up):
    out = kubectl(up, "explain", "deployment.spec.strategy")
    assert "KIND:       Deployment" in out and "FIELD: strategy <DeploymentStrategy>" in out
    assert "rollingUpdate\t<RollingUpdateDeployment>" in out
    out = kubectl(up, "explain", "pods.spec.containers.resources")
    assert "FIELD: resources <ResourceRequirements>" in out and "requests\t<map[string]" in out


def test_edit_with_an_editor_saves_a_valid_change_and_refuses_an_invalid_one(
        kubectl, up, tmp_path):
    kubectl(up, "create", "namespace", "edit")
    kubectl(up, "create", "configmap", "settings", "--from-literal=LOG_LEVEL=info",
            "-n", "edit")
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/LOG_LEVEL: info/LOG_LEVEL: warn/' \"$1\"\n")
    editor.chmod(0o755)
    edit = {"KUBE_EDITOR": str(editor)}
    assert kubectl(up, "edit", "cm", "settings", "-n", "edit", env=edit
                   ) == "configmap/settings edited\n"
    assert get_json(kubectl, up, "cm", "settings", "-n", "edit")["data"] == {
        "LOG_LEVEL": "warn"}

    kubectl(up, "create", "deployment", "web", "--image=nginx:1.27", "-n", "edit")
    editor.write_text("#!/bin/sh\nsed -i 's/replicas: 1/replicas: three/' \"$1\"\n")
    done = kubectl.run(up, "edit", "deploy", "web", "-n", "edit", env=edit)
    assert done.returncode == 1
    assert 'deployments.apps "web" is invalid' in done.stderr
    assert "Edit cancelled, no valid changes were saved." in done.stderr
    # kubectl keeps the attempt with the server's reasons at its top
    kept = re.search(r'A copy of your changes has been stored to "([^"]+)"', done.stderr)
    assert kept, done.stderr
    copy = Path(kept.group(1))
    assert '# * spec.replicas: Invalid value: "three": must be an integer' in copy.read_text()
    copy.unlink()
    assert get_json(kubectl, up, "deploy", "web", "-n", "edit")["spec"]["replicas"] == 1


def test_cordon_then_drain_evicts_all_but_daemonset_pods(kubectl, up, tmp_path):
    node = idle_gpu_node(kubectl, up)
    kubectl(up, "create", "namespace", "drain")
    manifest = tmp_path / "pinned.yaml"
    manifest.write_text(_pinned_deployment(node))
    kubectl(up, "apply", "-f", str(manifest))
    running_pods(kubectl, up, "drain", "app=pinned", 2)

    assert kubectl(up, "cordon", node) == f"node/{node} cordoned\n"
    done = kubectl.run(up, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                       "--timeout=60s")
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr  # kubectl reports evictions on stderr
    assert "Warning: ignoring DaemonSet-managed Pods: kube-system/dcgm-exporter-" in (
        done.stderr)
    assert f"node/{node} already cordoned" in out and f"node/{node} drained" in out
    assert len(re.findall(r"^pod/pinned-\S+ evicted$", out, re.MULTILINE)) == 2
    row = table(kubectl(up, "get", "node", node))[0]
    assert row["STATUS"] == "Ready,SchedulingDisabled"
    left = get_json(kubectl, up, "pods", "-A", "--field-selector", f"spec.nodeName={node}")
    assert left["items"] and all(p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
                                 for p in left["items"])
    # the replacements have nowhere else to go: Pending, as on a real cluster
    rows = wait_for(lambda: [r for r in table(kubectl(up, "get", "pods", "-n", "drain"))
                             if r["STATUS"] != "Terminating"], message="replacements")
    assert {r["STATUS"] for r in rows} == {"Pending"}
    assert kubectl(up, "uncordon", node) == f"node/{node} uncordoned\n"


def _pinned_deployment(node: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: pinned, namespace: drain}}
        spec:
          replicas: 2
          selector: {{matchLabels: {{app: pinned}}}}
          template:
            metadata: {{labels: {{app: pinned}}}}
            spec:
              nodeSelector: {{kubernetes.io/hostname: {node}}}
              tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
              containers:
              - name: app
                image: nginx:1.27
                volumeMounts: [{{name: scratch, mountPath: /scratch}}]
              volumes: [{{name: scratch, emptyDir: {{}}}}]
        """)


def test_logs_and_events_show_what_a_deployment_did(kubectl, up):
    kubectl(up, "create", "namespace", "logs")
    kubectl(up, "create", "deployment", "web", "--image=nginx:1.27", "-n", "logs")
    running_pods(kubectl, up, "logs", "app=web", 1)
    logs = wait_for(lambda: kubectl(up, "logs", "deploy/web", "-n", "logs"), message="logs")
    assert logs.strip()
    events = table(kubectl(up, "events", "-n", "logs"))
    assert list(events[0]) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    reasons = {(r["REASON"], r["OBJECT"].split("/")[0]) for r in events}
    assert {("ScalingReplicaSet", "Deployment"), ("SuccessfulCreate", "ReplicaSet"),
            ("Scheduled", "Pod"), ("Started", "Pod")} <= reasons


# --- helm --------------------------------------------------------------------------------------

CHART = {
    "Chart.yaml": "apiVersion: v2\nname: hello\nversion: 0.1.0\nappVersion: '1.27'\n",
    "values.yaml": "replicas: 1\nmessage: hello\n",
    "templates/deployment.yaml": textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: {{ .Release.Name }}, labels: {app: {{ .Release.Name }}}}
        spec:
          replicas: {{ .Values.replicas }}
          selector: {matchLabels: {app: {{ .Release.Name }}}}
          template:
            metadata: {labels: {app: {{ .Release.Name }}}}
            spec:
              containers:
              - name: web
                image: nginx:{{ .Chart.AppVersion }}
                ports: [{containerPort: 80}]
        """),
    "templates/service.yaml": textwrap.dedent("""\
        apiVersion: v1
        kind: Service
        metadata: {name: {{ .Release.Name }}}
        spec:
          selector: {app: {{ .Release.Name }}}
          ports: [{port: 80}]
        """),
    "templates/configmap.yaml": textwrap.dedent("""\
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: {{ .Release.Name }}}
        data: {message: {{ .Values.message | quote }}}
        """),
}


def test_helm_install_upgrade_and_uninstall_a_small_chart(helm, kubectl, up, tmp_path):
    for path, text in CHART.items():
        (tmp_path / "hello" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "hello" / path).write_text(text)
    chart = str(tmp_path / "hello")
    out = helm(up, "install", "hello", chart, "-n", "helm", "--create-namespace", "--wait",
               "--timeout", "90s")
    assert "STATUS: deployed" in out and "REVISION: 1" in out
    releases = json.loads(helm(up, "list", "-n", "helm", "-o", "json"))
    assert [(r["name"], r["status"], r["chart"]) for r in releases] == [
        ("hello", "deployed", "hello-0.1.0")]
    row = table(kubectl(up, "get", "deploy", "hello", "-n", "helm"))[0]
    assert row["READY"] == "1/1"

    helm(up, "upgrade", "hello", chart, "-n", "helm", "--set", "replicas=2",
         "--set", "message=hi", "--wait", "--timeout", "90s")
    history = json.loads(helm(up, "history", "hello", "-n", "helm", "-o", "json"))
    assert [(r["revision"], r["status"]) for r in history] == [(1, "superseded"),
                                                               (2, "deployed")]
    assert table(kubectl(up, "get", "deploy", "hello", "-n", "helm"))[0]["READY"] == "2/2"
    assert get_json(kubectl, up, "cm", "hello", "-n", "helm")["data"] == {"message": "hi"}

    assert helm(up, "uninstall", "hello", "-n", "helm") == 'release "hello" uninstalled\n'
    gone = kubectl.run(up, "get", "deploy", "hello", "-n", "helm")
    assert 'deployments.apps "hello" not found' in gone.stderr
    assert json.loads(helm(up, "list", "-n", "helm", "-o", "json")) == []


# --- what needs a container runtime ------------------------------------------------------------

def test_exec_cp_attach_port_forward_and_debug_say_why_they_cannot_work(kubectl, up):
    kubectl(up, "create", "namespace", "shell")
    kubectl(up, "create", "deployment", "web", "--image=nginx:1.27", "-n", "shell")
    pod = running_pods(kubectl, up, "shell", "app=web", 1)[0]["metadata"]["name"]
    why = "simcluster runs no containers"
    for args in (["exec", pod, "--", "ls", "/"], ["cp", f"shell/{pod}:/etc/hosts", "hosts"],
                 ["attach", pod], ["port-forward", pod, "18080:80"]):
        done = kubectl.run(up, "-n", "shell", *args, timeout=30)
        assert done.returncode == 1 and why in done.stderr, (args, done.stderr)
    done = kubectl.run(up, "exec", pod, "-n", "shell", "-c", "nope", "--", "ls", timeout=30)
    assert f"Error from server (BadRequest): container nope is not valid for pod {pod}" in (
        done.stderr)
    done = kubectl.run(up, "debug", pod, "-n", "shell", "--image=busybox", "--profile=general",
                       "-it", "--", "sh", timeout=30)
    assert "ephemeral containers are disabled for this cluster" in done.stderr, done.stderr
