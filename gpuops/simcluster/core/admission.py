"""Admission: the defaults and checks kube-apiserver applies before an object is stored."""

from __future__ import annotations

import copy
from typing import Any

from . import errors
from .resources import ResourceType
from .store import Store

_DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]


def admit_create(store: Store, rt: ResourceType, obj: dict[str, Any],
                 namespace: str | None) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get(
        "generateName", "")
    if rt.key == "pods":
        _validate_pod_spec(obj.get("spec"), "spec", rt.kind, name)
        _default_pod(store, obj)
    elif rt.key == "namespaces":
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("metadata", {}).setdefault("labels", {})[
            "kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")
    elif rt.key in ("apps/deployments", "apps/replicasets", "apps/statefulsets", "batch/jobs"):
        _default_workload(rt, obj, name)
    elif rt.key == "scheduling.k8s.io/priorityclasses":
        if not isinstance(obj.get("value"), int):
            raise errors.invalid(rt.kind, name, "value", "Required value")
    elif rt.key == "apiextensions.k8s.io/customresourcedefinitions":
        try:
            store.registry.register_crd(obj)
        except ValueError as e:
            raise errors.invalid(rt.kind, name, "spec", str(e)) from e
        obj["status"] = {"conditions": [{"type": "Established", "status": "True"},
                                        {"type": "NamesAccepted", "status": "True"}],
                         "acceptedNames": obj["spec"]["names"]}
    elif "status" in rt.subresources and rt.key not in ("nodes",):
        obj.pop("status", None)  # status is the controllers' to write
    return obj


def admit_update(store: Store, rt: ResourceType, old: dict[str, Any],
                 new: dict[str, Any]) -> dict[str, Any]:
    if rt.key == "pods":
        _check_pod_update(old, new)
    elif rt.key == "apps/deployments":
        replicas = (new.get("spec") or {}).get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid(rt.kind, old["metadata"]["name"], "spec.replicas",
                                 f"Invalid value: {replicas!r}: must be greater than or equal "
                                 "to 0")
    return new


def admit_delete(store: Store, rt: ResourceType, obj: dict[str, Any]) -> None:
    if rt.key == "namespaces" and obj["metadata"]["name"] in ("default", "kube-system"):
        raise errors.ApiError(403, "Forbidden", f'namespaces "{obj["metadata"]["name"]}" is '
                              "forbidden: this namespace may not be deleted")


def delete_namespace_contents(store: Store, namespace: str) -> None:
    """The namespace controller's job, done at once: delete everything inside, then the ns."""
    for rt in store.registry.all():
        if not rt.namespaced:
            continue
        for obj in store.list(rt, namespace):
            if store.find(rt, namespace, obj["metadata"]["name"]) is not None:
                store.delete(rt, namespace, obj["metadata"]["name"], grace_period=0)
    ns_type = store.type("namespaces")
    if store.find(ns_type, None, namespace) is not None:
        store.finalize_deletion(ns_type, None, namespace)


# --- pods --------------------------------------------------------------------------------------

def _validate_pod_spec(spec: Any, path: str, kind: str, name: str) -> None:
    if not isinstance(spec, dict):
        raise errors.invalid(kind, name, path, "Required value")
    containers = spec.get("containers")
    if not containers:
        raise errors.invalid(kind, name, f"{path}.containers", "Required value")
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            where = f"{path}.{group}[{i}]"
            if not c.get("name"):
                raise errors.invalid(kind, name, f"{where}.name", "Required value")
            if c["name"] in seen:
                raise errors.invalid(kind, name, f"{where}.name",
                                     f'Duplicate value: "{c["name"]}"')
            seen.add(c["name"])
            if not c.get("image"):
                raise errors.invalid(kind, name, f"{where}.image", "Required value")


def _default_pod(store: Store, pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for default in _DEFAULT_TOLERATIONS:
        # As the DefaultTolerationSeconds plugin: an empty key or effect already tolerates it.
        if not any(t.get("key") in (default["key"], "", None)
                   and t.get("effect") in (default["effect"], "", None) for t in tolerations):
            tolerations.append(dict(default))
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            c.setdefault("imagePullPolicy", "Always" if c["image"].endswith(":latest")
                         or ":" not in c["image"] else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            resources = c.setdefault("resources", {})
            limits = resources.get("limits") or {}
            requests = resources.setdefault("requests", {})
            for res, value in limits.items():
                requests.setdefault(res, value)  # requests default to limits
            if not requests:
                resources.pop("requests")
    _set_priority(store, pod)
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def _set_priority(store: Store, pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    pc_type = store.type("priorityclasses", "scheduling.k8s.io")
    name = spec.get("priorityClassName")
    if name:
        pc = store.find(pc_type, None, name)
        if pc is None:
            raise errors.ApiError(403, "Forbidden", f'pods "{pod["metadata"].get("name", "")}" '
                                  f"is forbidden: no PriorityClass with name {name} was found")
    else:
        pc = next((p for p in store.list(pc_type) if p.get("globalDefault")), None)
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
    spec["priority"] = pc["value"] if pc else 0
    if pc and pc.get("preemptionPolicy"):
        spec["preemptionPolicy"] = pc["preemptionPolicy"]


def _qos_class(spec: dict[str, Any]) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim.get(r)) != lim.get(r):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _check_pod_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Most of a pod's spec is immutable; images, tolerations (additions) and
    activeDeadlineSeconds may change, and nodeName only through binding."""
    o, n = old.get("spec") or {}, new.get("spec") or {}
    mutable = {"containers", "initContainers", "tolerations", "activeDeadlineSeconds",
               "schedulingGates", "terminationGracePeriodSeconds", "nodeName"}
    for key in set(o) | set(n):
        if key not in mutable and o.get(key) != n.get(key):
            raise errors.invalid("Pod", old["metadata"]["name"], f"spec.{key}",
                                 "Forbidden: pod updates may not change fields other than "
                                 "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                 "`spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                                 "additions to existing tolerations), "
                                 "`spec.terminationGracePeriodSeconds`")
    if o.get("nodeName") and n.get("nodeName") != o.get("nodeName"):
        raise errors.invalid("Pod", old["metadata"]["name"], "spec.nodeName",
                             "Forbidden: pod is already bound to a node")
    for group in ("containers", "initContainers"):
        oc, nc = o.get(group) or [], n.get(group) or []
        if [c.get("name") for c in oc] != [c.get("name") for c in nc]:
            raise errors.invalid("Pod", old["metadata"]["name"], f"spec.{group}",
                                 "Forbidden: containers may not be added or removed")
        for a, b in zip(oc, nc):
            if {k: v for k, v in a.items() if k != "image"} != {
                    k: v for k, v in b.items() if k != "image"}:
                raise errors.invalid("Pod", old["metadata"]["name"], f"spec.{group}",
                                     "Forbidden: pod updates may only change the image of a "
                                     "container")


def _default_workload(rt: ResourceType, obj: dict[str, Any], name: str) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise errors.invalid(rt.kind, name, "spec", "Required value")
    template = spec.get("template")
    if not isinstance(template, dict):
        raise errors.invalid(rt.kind, name, "spec.template", "Required value")
    _validate_pod_spec(template.get("spec"), "spec.template.spec", rt.kind, name)
    labels = (template.get("metadata") or {}).get("labels") or {}
    selector = spec.get("selector")
    if rt.key == "batch/jobs":
        template["spec"].setdefault("restartPolicy", "Never")
        if template["spec"]["restartPolicy"] not in ("Never", "OnFailure"):
            raise errors.invalid(rt.kind, name, "spec.template.spec.restartPolicy",
                                 f'Unsupported value: "{template["spec"]["restartPolicy"]}": '
                                 'supported values: "OnFailure", "Never"')
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1  # only then: parallelism alone is a work-queue Job
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    else:
        if not selector:
            raise errors.invalid(rt.kind, name, "spec.selector", "Required value")
        match = selector.get("matchLabels") or {}
        if any(labels.get(k) != v for k, v in match.items()):
            raise errors.invalid(rt.kind, name, "spec.template.metadata.labels",
                                 "Invalid value: `selector` does not match template `labels`")
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        if rt.key == "apps/deployments":
            spec.setdefault("progressDeadlineSeconds", 600)
            strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
            if strategy.get("type", "RollingUpdate") == "RollingUpdate":
                strategy["type"] = "RollingUpdate"
                ru = strategy.setdefault("rollingUpdate", {})
                ru.setdefault("maxSurge", "25%")
                ru.setdefault("maxUnavailable", "25%")
        if rt.key == "apps/statefulsets":
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                               "rollingUpdate": {"partition": 0}})
    obj.pop("status", None)
