"""Workloads, the controllers of pods from a template: ReplicaSets, Deployments,
StatefulSets, DaemonSets and Jobs, with the defaults kube-apiserver gives each.

Every one needs `spec.template` with a valid pod spec; the replicated ones a selector that
matches the template's labels; status is the controllers' to write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import errors
from .pods import default_pod_spec, validate_pod_spec
from .strategy import Strategy

if TYPE_CHECKING:
    from ..resources import ResourceType
    from ..store import Store

Obj = dict[str, Any]


class WorkloadStrategy(Strategy):
    def prepare_for_create(self, store: Store, rt: ResourceType, obj: Obj, name: str) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise errors.invalid(rt.kind, name, "spec", "Required value")
        template = spec.get("template")
        if not isinstance(template, dict):
            raise errors.invalid(rt.kind, name, "spec.template", "Required value")
        validate_pod_spec(template.get("spec"), "spec.template.spec", rt.kind, name)
        self.default(rt, spec, template, name)
        default_pod_spec(template["spec"])  # after the kind's own (a Job's restartPolicy)
        obj.pop("status", None)

    def default(self, rt: ResourceType, spec: Obj, template: Obj, name: str) -> None:
        """Check and default the spec (a copy) of a workload whose template is valid."""


class ReplicaSetStrategy(WorkloadStrategy):
    def default(self, rt: ResourceType, spec: Obj, template: Obj, name: str) -> None:
        selector = spec.get("selector")
        if not selector:
            raise errors.invalid(rt.kind, name, "spec.selector", "Required value")
        labels = (template.get("metadata") or {}).get("labels") or {}
        match = selector.get("matchLabels") or {}
        if any(labels.get(k) != v for k, v in match.items()):
            raise errors.invalid(rt.kind, name, "spec.template.metadata.labels",
                                 "Invalid value: `selector` does not match template `labels`")
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)


class DeploymentStrategy(ReplicaSetStrategy):
    def default(self, rt: ResourceType, spec: Obj, template: Obj, name: str) -> None:
        super().default(rt, spec, template, name)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy["type"] = "RollingUpdate"
            ru = strategy.setdefault("rollingUpdate", {})
            ru.setdefault("maxSurge", "25%")
            ru.setdefault("maxUnavailable", "25%")

    def validate_update(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        replicas = (new.get("spec") or {}).get("replicas", 1)
        # a value that is no integer at all is the store's integer check's to name
        if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas < 0:
            raise errors.invalid(rt.kind, old["metadata"]["name"], "spec.replicas",
                                 f"Invalid value: {replicas}: must be greater than or equal "
                                 "to 0")


class StatefulSetStrategy(ReplicaSetStrategy):
    def default(self, rt: ResourceType, spec: Obj, template: Obj, name: str) -> None:
        super().default(rt, spec, template, name)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"partition": 0}})


class DaemonSetStrategy(WorkloadStrategy):
    """apps/v1 DaemonSet: a selector matching the template, restartPolicy Always, and the
    defaults of `SetDefaults_DaemonSet` (RollingUpdate with maxUnavailable 1, maxSurge 0)."""

    def default(self, rt: ResourceType, spec: Obj, template: Obj, name: str) -> None:
        selector = spec.get("selector")
        if not selector:
            raise errors.invalid(rt.kind, name, "spec.selector", "Required value")
        labels = (template.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
            raise errors.invalid(rt.kind, name, "spec.template.metadata.labels",
                                 "Invalid value: `selector` does not match template `labels`")
        policy = template["spec"].setdefault("restartPolicy", "Always")
        if policy != "Always":
            raise errors.invalid(rt.kind, name, "spec.template.spec.restartPolicy",
                                 f'Unsupported value: "{policy}": supported values: "Always"')
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy["type"] = "RollingUpdate"
            ru = strategy.setdefault("rollingUpdate", {})
            ru.setdefault("maxUnavailable", 1)
            ru.setdefault("maxSurge", 0)
        elif strategy["type"] != "OnDelete":
            raise errors.invalid(rt.kind, name, "spec.updateStrategy.type",
                                 f'Unsupported value: "{strategy["type"]}": supported values: '
                                 '"OnDelete", "RollingUpdate"')
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("minReadySeconds", 0)


class JobStrategy(WorkloadStrategy):
    default_propagation = "Orphan"  # batch/v1 Jobs orphan their pods, kept for compatibility

    def default(self, rt: ResourceType, spec: Obj, template: Obj, name: str) -> None:
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
