"""Integer fields of stored objects hold what their Go type can: int32 or int64, as in
kube-apiserver, checked on every write to the store (by a client or by a simulated
component), so no object can hold a number that a client cannot decode, or that breaks a
LIST or WATCH for everyone. A bad value is a 422 Invalid naming the field path.

Only the fields simcluster's components or gpuops set are listed (pod spec and status,
workload replicas and counters, ports, probe timings, grace periods); unknown fields are
not checked.
"""

from __future__ import annotations

import json
from typing import Any

from . import errors

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
# The int64 fields among those below (Go types); every other listed field is an int32.
_INT64 = {"terminationGracePeriodSeconds", "activeDeadlineSeconds", "tolerationSeconds",
          "runAsUser", "runAsGroup", "fsGroup", "generation", "observedGeneration",
          "deletionGracePeriodSeconds"}

_PROBE = [f"{probe}.{f}" for probe in ("livenessProbe", "readinessProbe", "startupProbe")
          for f in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds",
                    "successThreshold", "failureThreshold", "terminationGracePeriodSeconds")]
_CONTAINER = ["ports[].containerPort", "ports[].hostPort", *_PROBE,
              "securityContext.runAsUser", "securityContext.runAsGroup"]
_POD_SPEC = [*(f"{group}[].{f}" for group in ("containers", "initContainers",
                                               "ephemeralContainers") for f in _CONTAINER),
             "terminationGracePeriodSeconds", "activeDeadlineSeconds", "priority",
             "tolerations[].tolerationSeconds", "securityContext.runAsUser",
             "securityContext.runAsGroup", "securityContext.fsGroup"]
_POD_STATUS = [f"{group}[].{f}" for group in ("containerStatuses", "initContainerStatuses",
                                              "ephemeralContainerStatuses")
               for f in ("restartCount", "state.terminated.exitCode",
                         "state.terminated.signal", "lastState.terminated.exitCode",
                         "lastState.terminated.signal")]
_WORKLOAD = ["spec.replicas", "spec.minReadySeconds", "spec.revisionHistoryLimit",
             "status.replicas", "status.readyReplicas", "status.availableReplicas",
             "status.updatedReplicas", "status.unavailableReplicas", "status.currentReplicas",
             "status.fullyLabeledReplicas", "status.observedGeneration",
             *(f"spec.template.spec.{p}" for p in _POD_SPEC)]


def _fields(*paths: str) -> list[tuple[tuple[str, ...], tuple[int, int]]]:
    every = ("metadata.generation", "metadata.deletionGracePeriodSeconds", *paths)
    return [(tuple(p.split(".")), INT64 if p.rsplit(".", 1)[-1] in _INT64 else INT32)
            for p in every]


FIELDS = {
    "pods": _fields(*(f"spec.{p}" for p in _POD_SPEC), *(f"status.{p}" for p in _POD_STATUS)),
    "apps/deployments": _fields(*_WORKLOAD, "spec.progressDeadlineSeconds"),
    "apps/replicasets": _fields(*_WORKLOAD),
    "apps/statefulsets": _fields(*_WORKLOAD),
    "apps/daemonsets": _fields(*_WORKLOAD, "status.numberReady",
                               "status.desiredNumberScheduled"),
    "batch/jobs": _fields(*(f"spec.template.spec.{p}" for p in _POD_SPEC), "spec.parallelism",
                          "spec.completions", "spec.backoffLimit", "spec.activeDeadlineSeconds",
                          "spec.ttlSecondsAfterFinished", "status.active", "status.succeeded",
                          "status.failed", "status.ready"),
    "services": _fields("spec.ports[].port", "spec.ports[].nodePort"),
    "scheduling.k8s.io/priorityclasses": _fields("value"),
    "policy/poddisruptionbudgets": _fields("status.currentHealthy", "status.desiredHealthy",
                                           "status.disruptionsAllowed", "status.expectedPods",
                                           "status.observedGeneration"),
}


class _Node:
    """One step of the field paths, shared by every path through it (walked once)."""

    __slots__ = ("bounds", "children", "listed")

    def __init__(self, listed: bool = False) -> None:
        self.listed = listed
        self.bounds: tuple[int, int] | None = None
        self.children: dict[str, _Node] = {}


def _tree(paths: list[tuple[tuple[str, ...], tuple[int, int]]]) -> _Node:
    root = _Node()
    for path, bounds in paths:
        node = root
        for part in path:
            key = part.removesuffix("[]")
            node = node.children.setdefault(key, _Node(part.endswith("[]")))
        node.bounds = bounds
    return root


_TREES = {key: _tree(paths) for key, paths in FIELDS.items()}


def check_integer_fields(rt_key: str, kind: str, obj: dict[str, Any],
                         unchanged: tuple[str, ...] = ()) -> None:
    """Raise 422 Invalid if a known integer field is not an integer of its width.
    `unchanged` top-level keys (already checked when stored) are skipped."""
    tree = _TREES.get(rt_key)
    if tree is None:
        return
    for key, node in tree.children.items():
        if key in obj and key not in unchanged:
            _check(obj[key], node, key, kind, obj)


def _check(value: Any, node: _Node, where: str, kind: str, obj: dict[str, Any]) -> None:
    if node.listed:
        if isinstance(value, list):
            for i, item in enumerate(value):
                _check_one(item, node, f"{where}[{i}]", kind, obj)
        return
    _check_one(value, node, where, kind, obj)


def _check_one(value: Any, node: _Node, where: str, kind: str, obj: dict[str, Any]) -> None:
    if node.bounds is not None:
        _check_integer(value, node.bounds, where, kind, obj)
    if node.children and isinstance(value, dict):
        for key, child in node.children.items():
            if key in value:
                _check(value[key], child, f"{where}.{key}", kind, obj)


def _check_integer(value: Any, bounds: tuple[int, int], where: str, kind: str,
                   obj: dict[str, Any]) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        problem = f"Invalid value: {_shown(value)}: must be an integer"
    elif not bounds[0] <= value <= bounds[1]:
        bits = 32 if bounds == INT32 else 64
        problem = (f"Invalid value: {value}: must be a {bits}-bit integer "
                   f"({bounds[0]} to {bounds[1]})")
    else:
        return
    raise errors.invalid(kind, (obj.get("metadata") or {}).get("name", ""), where, problem)


def _shown(value: Any) -> str:
    """As kube's field errors quote a value: a string in double quotes ("three")."""
    text = json.dumps(value) if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
