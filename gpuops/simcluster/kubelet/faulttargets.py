"""What a kubelet fault's target names: one pod, a workload's pods, or the pods a selector picks.

Targets, as `gpuops sim fault --target` takes them:

- `namespace/name`: the pod of that name, else the workload (Deployment, StatefulSet,
  DaemonSet, ReplicaSet, Job) of that name;
- `kind/namespace/name` (`pod/ml/x`, `deployment/ml/x`, `job/training/y`...): exactly that;
- `namespace` (or none: every namespace) with `params.selector`: the pods the label selector
  picks.

A workload or a selector is a *standing* selection: the fault also hits the pods created
later (a Deployment's or Job's replacements) until `recover` with the same target.
A target that names nothing is a 404 naming the namespace and what is there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import errors
from ..core.selectors import Requirement, parse_label_selector, selector_from_spec
from ..core.store import Store

Obj = dict[str, Any]

# kind -> (API group, plural), in the order a bare `namespace/name` is looked up
WORKLOAD_KINDS = {"deployment": ("apps", "deployments"), "statefulset": ("apps", "statefulsets"),
                  "daemonset": ("apps", "daemonsets"), "replicaset": ("apps", "replicasets"),
                  "job": ("batch", "jobs")}
_ALIASES = {"pod": "pod", "pods": "pod", "po": "pod", "deploy": "deployment",
            "sts": "statefulset", "ds": "daemonset", "rs": "replicaset",
            **{k: k for k in WORKLOAD_KINDS}, **{p: k for k, (_, p) in WORKLOAD_KINDS.items()}}
_SHOWN = 10  # names listed in a "not found" answer


@dataclass(frozen=True)
class Selection:
    """The pods a target picks now; `standing` ones also pick pods created later."""

    pods: list[Obj]
    what: str  # for answers: "pod ml/x", "deployment ml/x", "pods matching app=x in ml"
    standing: bool = False
    namespace: str | None = None
    selector: str = ""  # the standing selection's identity (recover matches on it)
    requirements: tuple[Requirement, ...] = ()


def select_pods(store: Store, target: str | None, selector: str | None,
                namespace: str | None = None) -> Selection:
    pods_rt = store.type("pods")
    if target and "/" in target:
        parts = target.split("/")
        if len(parts) == 2:
            return _by_name(store, parts[0], parts[1])
        if len(parts) == 3 and all(parts):
            kind = _ALIASES.get(parts[0].lower())
            if kind is None:
                raise errors.bad_request(
                    f"target {target!r}: unknown kind {parts[0]!r}; use pod or one of "
                    f"{', '.join(WORKLOAD_KINDS)} (`deployment/NAMESPACE/NAME`)")
            return _by_kind(store, kind, parts[1], parts[2])
        raise errors.bad_request(f"target {target!r} is not `namespace/name` or "
                                 "`kind/namespace/name`")
    if not selector:
        raise errors.bad_request("the fault needs a target: `namespace/name` of a pod or "
                                 "workload, `kind/namespace/name`, or a namespace (none: every "
                                 "namespace) with params.selector")
    reqs = parse_label_selector(selector)
    ns = target or namespace or None
    if ns:
        _namespace_exists(store, ns)
    where = f"in {ns}" if ns else "in every namespace"
    return Selection(store.list(pods_rt, ns, reqs), f"pods matching {selector} {where}",
                     standing=True, namespace=ns, selector=selector, requirements=tuple(reqs))


def _by_name(store: Store, namespace: str, name: str) -> Selection:
    pod = store.find(store.type("pods"), namespace, name)
    if pod is not None:
        return Selection([pod], f"pod {namespace}/{name}")
    found = [kind for kind in WORKLOAD_KINDS if _workload(store, kind, namespace, name)]
    if len(found) > 1:
        raise errors.bad_request(
            f"{namespace}/{name} names a {' and a '.join(found)}; say which: "
            + " or ".join(f"`{k}/{namespace}/{name}`" for k in found))
    if found:
        return _by_kind(store, found[0], namespace, name)
    _namespace_exists(store, namespace)
    raise errors.ApiError(404, "NotFound", f'no pod or workload named "{name}" in namespace '
                          f'"{namespace}"; {_what_is_there(store, namespace)}')


def _by_kind(store: Store, kind: str, namespace: str, name: str) -> Selection:
    if kind == "pod":
        pod = store.find(store.type("pods"), namespace, name)
        if pod is None:
            _namespace_exists(store, namespace)
            raise errors.ApiError(404, "NotFound", f'no pod named "{name}" in namespace '
                                  f'"{namespace}"; {_what_is_there(store, namespace)}')
        return Selection([pod], f"pod {namespace}/{name}")
    workload = _workload(store, kind, namespace, name)
    if workload is None:
        _namespace_exists(store, namespace)
        raise errors.ApiError(404, "NotFound", f'no {kind} named "{name}" in namespace '
                              f'"{namespace}"; {_what_is_there(store, namespace)}')
    reqs = selector_from_spec((workload.get("spec") or {}).get("selector"))
    if not reqs:
        raise errors.bad_request(f"{kind} {namespace}/{name} has no selector: target its "
                                 "pods instead")
    return Selection(store.list(store.type("pods"), namespace, reqs),
                     f"{kind} {namespace}/{name}", standing=True, namespace=namespace,
                     selector=f"{kind}/{namespace}/{name}", requirements=tuple(reqs))


def _workload(store: Store, kind: str, namespace: str, name: str) -> Obj | None:
    group, plural = WORKLOAD_KINDS[kind]
    rt = store.registry.get(group, "v1", plural)
    return None if rt is None else store.find(rt, namespace, name)


def _namespace_exists(store: Store, namespace: str) -> None:
    ns_type = store.type("namespaces")
    if store.find(ns_type, None, namespace) is None:
        names = sorted(o["metadata"]["name"] for o in store.list(ns_type))
        raise errors.ApiError(404, "NotFound", f'namespace "{namespace}" not found; namespaces: '
                              f"{_listed(names)}")


def _what_is_there(store: Store, namespace: str) -> str:
    pods = sorted(o["metadata"]["name"] for o in store.list(store.type("pods"), namespace))
    workloads = []
    for kind, (group, plural) in WORKLOAD_KINDS.items():
        rt = store.registry.get(group, "v1", plural)
        if rt is not None and kind != "replicaset":
            workloads += [f"{kind}/{o['metadata']['name']}" for o in store.list(rt, namespace)]
    if not pods and not workloads:
        return "the namespace is empty"
    out = f"pods there: {_listed(pods)}" if pods else "no pods there"
    return out + (f"; workloads: {_listed(sorted(workloads))}" if workloads else "")


def _listed(names: list[str]) -> str:
    if not names:
        return "none"
    more = len(names) - _SHOWN
    return ", ".join(names[:_SHOWN]) + (f", … ({more} more)" if more > 0 else "")
