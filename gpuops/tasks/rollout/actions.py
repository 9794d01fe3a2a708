"""A rollout's changes as safe actions for `perform()` (desired states with a postcondition).

Every action names the rollout's lock, `inferencepool/<namespace>/<old pool>` (`pool_target`),
which the run holds for its whole course (with the new pool's and the route's), so `perform`
takes no slot twice and no other rollout acts on these objects meanwhile.

- `RecordRollout`: the route's rollout record (annotations only), pinned to the route as read.
- `SetRouteWeights`: the (old, new) split on every rule naming the pools, with the record in
  the same JSON patch (`weights.weight_patch`; a route edited meanwhile is refused).
- `RemoveBackend`: a pool at weight 0 taken off the route (before the pool is deleted).
- `CreateObject` / `DeleteObject`: the new version's Deployment, InferencePool and endpoint
  picker, created if absent, deleted if present.
- `ScaleDeployment`: a Deployment's `spec.replicas` (or a LeaderWorkerSet's: its groups).
- `RequestAbort`: `gpuops rollout abort`'s request on the route, for the run going to act on
  (its own slot: the run holds the rollout's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuops.common.errors import KubeConflict, KubeNotFound
from gpuops.common.events import k8s_resource
from gpuops.tasks.actions.perform import SafeAction
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rollout.objects import PoolRef, ServedApis
from gpuops.tasks.rollout.read_objects import patch_route, read_route
from gpuops.tasks.rollout.weights import (
    WeightSplit,
    annotation_patch,
    remove_backend_patch,
    split_applied,
    weight_patch,
)
from gpuops.tasks.rollout.workloads import DEPLOYMENT, api_of

Obj = dict[str, Any]


def abort_target(namespace: str, route: str) -> str:
    return f"rollout-abort/{namespace}/{route}"


def pool_target(namespace: str, name: str) -> str:
    return f"inferencepool/{namespace}/{name}"


def route_target(namespace: str, name: str) -> str:
    return f"httproute/{namespace}/{name}"


def _annotations_hold(current: Mapping[str, str], wanted: Mapping[str, str | None]) -> bool:
    return all(current.get(k) == v for k, v in wanted.items())


# --- the route ----------------------------------------------------------------------------------

@dataclass
class _RouteAction(SafeAction):
    kube: Kube
    apis: ServedApis
    namespace: str
    route: str
    lock: str
    annotations: dict[str, str | None]

    @property
    def target(self) -> str:
        return self.lock

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, "HTTPRoute", self.namespace, self.route)


@dataclass
class RecordRollout(_RouteAction):
    what: str = ""
    kind = "rollout-record"

    def describe(self) -> str:
        return f"record on HTTPRoute {self.namespace}/{self.route}: {self.what}"

    def holds(self) -> bool:
        route = read_route(self.kube, self.apis, self.namespace, self.route)
        return _annotations_hold(route.annotations, self.annotations)

    def apply(self) -> None:
        route = read_route(self.kube, self.apis, self.namespace, self.route)
        patch = annotation_patch(route, self.annotations)
        if patch:
            patch_route(self.kube, self.apis, route, patch)


@dataclass
class RequestAbort(RecordRollout):
    kind = "rollout-abort"

    def describe(self) -> str:
        return f"ask the rollout on HTTPRoute {self.namespace}/{self.route} to abort"


@dataclass
class SetRouteWeights(_RouteAction):
    old: PoolRef
    new: PoolRef
    split: WeightSplit
    baseline: PoolRef | None = None  # the fresh-copy baseline, given split.baseline
    kind = "route-weights"

    def describe(self) -> str:
        return (f"set HTTPRoute {self.namespace}/{self.route} weights {self.old.name} "
                f"{self.split.old} % / {self.new.name} {self.split.new} %"
                + (f" / {self.baseline.name} {self.split.baseline} %"
                   if self.baseline is not None else ""))

    def holds(self) -> bool:
        route = read_route(self.kube, self.apis, self.namespace, self.route)
        # a baseline the route does not name holds 0 % as well as one at weight 0
        baseline = self.baseline if self.baseline is not None and (
            self.split.baseline or route.rules_for(self.baseline)) else None
        return split_applied(route, self.old, self.new, self.split, baseline) and \
            _annotations_hold(route.annotations, self.annotations)

    def apply(self) -> None:
        route = read_route(self.kube, self.apis, self.namespace, self.route)
        patch = weight_patch(route, self.old, self.new, self.split,
                             annotations=self.annotations, baseline=self.baseline)
        if patch:
            patch_route(self.kube, self.apis, route, patch)

    def details(self) -> dict[str, Any]:
        found: dict[str, Any] = {"old_pool": str(self.old), "new_pool": str(self.new),
                                 "old_weight": self.split.old, "new_weight": self.split.new}
        if self.baseline is not None:
            found.update(baseline_pool=str(self.baseline), baseline_weight=self.split.baseline)
        return found


@dataclass
class RemoveBackend(_RouteAction):
    pool: PoolRef
    kind = "route-remove-backend"

    def describe(self) -> str:
        return f"remove InferencePool {self.pool.name} from HTTPRoute {self.namespace}/{self.route}"

    def holds(self) -> bool:
        route = read_route(self.kube, self.apis, self.namespace, self.route)
        return not route.rules_for(self.pool) and \
            _annotations_hold(route.annotations, self.annotations)

    def apply(self) -> None:
        route = read_route(self.kube, self.apis, self.namespace, self.route)
        patch = remove_backend_patch(route, self.pool, annotations=self.annotations)
        if patch:
            patch_route(self.kube, self.apis, route, patch)


# --- objects ------------------------------------------------------------------------------------

def _coordinates(body: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name) of an object body."""
    meta = body.get("metadata") or {}
    return (str(body.get("apiVersion")), str(body.get("kind")),
            str(meta.get("namespace") or "default"), str(meta.get("name")))


def get_object(kube: Kube, api_version: str, kind: str, namespace: str, name: str) -> Obj:
    if kind == "Service":
        return kube.get_service(namespace, name)
    if kind == "Deployment":
        return kube.get_deployment(namespace, name)
    return kube.get(api_version, kind, namespace, name)


def exists(kube: Kube, api_version: str, kind: str, namespace: str, name: str) -> bool:
    try:
        get_object(kube, api_version, kind, namespace, name)
    except KubeNotFound:
        return False
    return True


@dataclass
class CreateObject(SafeAction):
    kube: Kube
    body: Obj
    lock: str
    kind = "create"

    @property
    def target(self) -> str:
        return self.lock

    def describe(self) -> str:
        _, kind, namespace, name = _coordinates(self.body)
        return f"create {kind} {namespace}/{name}"

    def holds(self) -> bool:
        return exists(self.kube, *_coordinates(self.body))

    def apply(self) -> None:
        api_version, kind, namespace, _ = _coordinates(self.body)
        try:
            if kind == "Service":
                self.kube.create_service(namespace, self.body)
            elif kind == "Deployment":
                self.kube.create_deployment(namespace, self.body)
            else:
                group, _, version = api_version.rpartition("/")
                self.kube.create_custom(group, version, namespace, kind.lower() + "s",
                                        self.body)
        except KubeConflict:
            pass  # AlreadyExists: a retry after a lost answer; the postcondition checks it

    def resource(self) -> dict[str, str]:
        _, kind, namespace, name = _coordinates(self.body)
        return k8s_resource(self.kube.cluster_name, kind, namespace, name)


@dataclass
class DeleteObject(SafeAction):
    kube: Kube
    api_version: str
    object_kind: str
    namespace: str
    name: str
    lock: str
    kind = "delete"

    @property
    def target(self) -> str:
        return self.lock

    def describe(self) -> str:
        return f"delete {self.object_kind} {self.namespace}/{self.name}"

    def holds(self) -> bool:
        return not exists(self.kube, self.api_version, self.object_kind, self.namespace,
                          self.name)

    def apply(self) -> None:
        try:
            if self.object_kind == "Service":
                self.kube.delete_service(self.namespace, self.name)
            elif self.object_kind == "Deployment":
                self.kube.delete_deployment(self.namespace, self.name)
            else:
                group, _, version = self.api_version.rpartition("/")
                self.kube.delete_custom(group, version, self.namespace,
                                        self.object_kind.lower() + "s", self.name)
        except KubeNotFound:
            pass

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, self.object_kind, self.namespace, self.name)


@dataclass
class ScaleDeployment(SafeAction):
    kube: Kube
    namespace: str
    name: str
    replicas: int
    lock: str
    workload_kind: str = DEPLOYMENT  # or LeaderWorkerSet (`workloads`)
    kind = "scale"

    @property
    def target(self) -> str:
        return self.lock

    def describe(self) -> str:
        return f"scale {self.workload_kind} {self.namespace}/{self.name} to {self.replicas}"

    def holds(self) -> bool:
        try:
            if self.workload_kind == DEPLOYMENT:
                workload = self.kube.get_deployment(self.namespace, self.name)
            else:
                api = api_of(self.workload_kind)
                workload = self.kube.get_custom(api.group, api.version, self.namespace,
                                                api.plural, self.name)
        except KubeNotFound:
            return self.replicas == 0  # gone serves nothing, as 0 replicas would
        return int((workload.get("spec") or {}).get("replicas") or 0) == self.replicas

    def apply(self) -> None:
        patch = {"spec": {"replicas": self.replicas}}
        if self.workload_kind == DEPLOYMENT:
            self.kube.patch_deployment(self.namespace, self.name, patch)
            return
        api = api_of(self.workload_kind)
        self.kube.patch_custom(api.group, api.version, self.namespace, api.plural, self.name,
                               patch)

    def resource(self) -> dict[str, str]:
        return k8s_resource(self.kube.cluster_name, self.workload_kind, self.namespace,
                            self.name)

    def details(self) -> dict[str, Any]:
        return {"replicas": self.replicas}
