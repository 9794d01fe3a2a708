"""The `gpu-idle` fault: a workload keeps its GPUs allocated but stops using them.

What gpuops' idle-GPU detection looks for: DCGM reports near-zero utilisation on GPUs that pods
hold (the framebuffer stays used: the model or the job's state is still loaded). The fault is
a rule on a workload's pods, by its label selector, so replacement pods stay idle too, until
the same target is given `clear: true`. The DCGM exporter asks `util_of(pod)` for each GPU
holder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ..core import errors
from ..core.faults import FaultParams
from ..core.selectors import Requirement, labels_match, parse_label_selector, selector_from_spec
from ..core.store import Store

Obj = dict[str, Any]
WORKLOADS = (("deployment", "apps", "deployments"), ("statefulset", "apps", "statefulsets"),
             ("job", "batch", "jobs"), ("daemonset", "apps", "daemonsets"),
             ("replicaset", "apps", "replicasets"))


class IdleParams(FaultParams):
    util: float = Field(0.0, ge=0, le=100, description="the GPU utilisation the pods show (%)")
    selector: str | None = Field(None, min_length=1, description="a label selector: with a "
                                 "namespace target, the matching pods instead of a workload's")
    clear: bool = Field(False, description="end the target's gpu-idle instead")


@dataclass(frozen=True)
class IdleRule:
    target: str
    namespace: str
    selector: tuple[Requirement, ...]
    util: float


class IdleGpus:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.pods = store.type("pods")
        self.rules: list[IdleRule] = []

    def util_of(self, namespace: str, labels: dict[str, str]) -> float | None:
        """The utilisation a pod's GPUs are pinned to by a rule, None if no rule holds it."""
        for rule in self.rules:
            if rule.namespace == namespace and labels_match(list(rule.selector), labels):
                return rule.util
        return None

    def inject(self, target: str | None, params: dict[str, Any]) -> dict[str, Any]:
        if not target:
            raise errors.bad_request("gpu-idle needs a target: a workload (`namespace/name` or "
                                     "`kind/namespace/name`) or a namespace with "
                                     "params.selector")
        if params.get("clear"):
            before = len(self.rules)
            self.rules = [r for r in self.rules if r.target != target]
            return {"target": target, "cleared": before - len(self.rules)}
        namespace, selector = self._resolve(target, params.get("selector"))
        rule = IdleRule(target, namespace, tuple(selector), float(params["util"]))
        self.rules = [r for r in self.rules if r.target != target] + [rule]
        pods = [f"{namespace}/{p['metadata']['name']}" for p in self.store.list(
            self.pods, namespace) if labels_match(selector, p["metadata"].get("labels") or {})]
        return {"target": target, "util": rule.util, "pods": sorted(pods)}

    def _resolve(self, target: str, selector: str | None) -> tuple[str, list[Requirement]]:
        if selector:
            return target, parse_label_selector(selector)
        parts = target.split("/")
        if len(parts) == 3:
            kinds = [w for w in WORKLOADS if w[0] == parts[0].lower()]
            if not kinds:
                raise errors.bad_request(f"target kind {parts[0]!r} must be one of "
                                         f"{', '.join(w[0] for w in WORKLOADS)}")
            namespace, name = parts[1], parts[2]
        elif len(parts) == 2:
            kinds, (namespace, name) = list(WORKLOADS), parts
        else:
            raise errors.bad_request(f"target {target!r} must be `namespace/name`, "
                                     "`kind/namespace/name` or a namespace with params.selector")
        for _, group, plural in kinds:
            obj = self.store.find(self.store.type(plural, group), namespace, name)
            if obj is not None:
                return namespace, selector_from_spec((obj.get("spec") or {}).get("selector"))
        raise errors.not_found(kinds[0][2], name, kinds[0][1])
