"""Pods: what kube-apiserver checks and defaults, what may change, how they are deleted.

Defaults as the API server's defaulting and admission plugins set them (restartPolicy,
schedulerName, the DefaultTolerationSeconds tolerations, requests from limits, priority from
the PriorityClass, the QoS class); most of the spec is immutable; a pod bound to a node and
not finished is deleted gracefully (its kubelet stops it), others at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors
from ..gpus import gpu_request_problem
from .strategy import Strategy

if TYPE_CHECKING:
    from ..resources import ResourceType
    from ..store import Store

Obj = dict[str, Any]

_DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]


class PodStrategy(Strategy):
    returns_deleted_object = True

    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        validate_pod_spec(obj.get("spec"), "spec", rt.kind, name)
        _default_pod(store, obj)

    def validate_update(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        _check_pod_update(old, new)

    def check_graceful_delete(self, obj: Obj, grace_period: int | None) -> tuple[bool, Any]:
        """A pod on a node, not finished, terminates (its kubelet stops it) unless the grace
        period is 0; its own terminationGracePeriodSeconds unless the delete gives one."""
        if not (obj.get("spec", {}).get("nodeName") and grace_period != 0
                and obj.get("status", {}).get("phase") not in ("Succeeded", "Failed")):
            return False, None
        if grace_period is not None:
            return True, grace_period
        return True, obj["spec"].get("terminationGracePeriodSeconds", 30)


class BindingStrategy(Strategy):
    """`POST .../bindings` binds the pod the Binding names, as its binding subresource."""

    binds_pod = True


def validate_pod_spec(spec: Any, path: str, kind: str, name: str) -> None:
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
    problem = gpu_request_problem(spec, path)
    if problem is not None:
        raise errors.invalid(kind, name, *problem)


def default_pod_spec(spec: dict[str, Any]) -> None:
    """kube's SetDefaults_PodSpec and SetDefaults_Container, which apply wherever a pod spec
    is decoded, workload templates included (`kubectl get deploy -o yaml` shows them)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    # an empty security context, never a missing one (kubectl debug reads it unchecked)
    spec.setdefault("securityContext", {})
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            c.setdefault("imagePullPolicy", "Always" if c["image"].endswith(":latest")
                         or ":" not in c["image"] else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            if not c.get("resources"):
                c["resources"] = {}
            for port in c.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def _default_pod(store: Store, pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    default_pod_spec(spec)
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
            resources = c["resources"]
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


def _changed_tolerations(old: list[Obj], new: list[Obj]) -> bool:
    """As `validateOnlyAddedTolerations`: every existing toleration must still be there
    (only its tolerationSeconds may change); new ones may be added."""
    def identity(t: Obj) -> tuple[str, str, str, str]:
        return (t.get("key") or "", t.get("operator") or "Equal", str(t.get("value") or ""),
                t.get("effect") or "")
    kept = {identity(t) for t in new}
    return any(identity(t) not in kept for t in old)


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
    removed = _changed_tolerations(o.get("tolerations") or [], n.get("tolerations") or [])
    if removed:
        raise errors.invalid("Pod", old["metadata"]["name"], "spec.tolerations",
                             "Forbidden: existing toleration can not be modified except its "
                             "tolerationSeconds")
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
