"""Preflight: everything a rollout needs, read and checked before anything changes.

Reads the served API versions, the pool with its model server, pods and route, the objects
the new version is derived from (the pool and Deployment as stored, the endpoint picker's
Service and Deployment), the nodes and pods (free GPUs) and the rollout record on the route;
derives the new version (`derive`), chooses the mode (`capacity`) and checks the route can
carry the split (`weights`). Any problem is a `ConfigError` naming the parameter, raised
before the first write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuops.common.annotations import ROLLOUT_RUN
from gpuops.common.errors import ConfigError, KubeNotFound
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rollout.actions import get_object
from gpuops.tasks.rollout.capacity import (
    ChosenMode,
    Prewarm,
    Room,
    choose_baseline,
    choose_mode,
    choose_prewarm,
)
from gpuops.tasks.rollout.derive import NewVersion, PoolCopy, derive, epp_deployment_of
from gpuops.tasks.rollout.gates import with_comparable_step
from gpuops.tasks.rollout.objects import HTTPRoute, PoolRef, PoolView, ServedApis
from gpuops.tasks.rollout.params import RolloutSpec
from gpuops.tasks.rollout.read_objects import read_pool_view, read_served_apis, read_workload
from gpuops.tasks.rollout.routes import check_routes_agree, routes_record
from gpuops.tasks.rollout.state import RolloutRecord
from gpuops.tasks.rollout.weights import WeightSplit, current_split, weight_patch
from gpuops.tasks.rollout.workloads import room_for_replicas


@dataclass(frozen=True)
class Plan:
    spec: RolloutSpec
    apis: ServedApis
    old: PoolView
    route: HTTPRoute
    new: NewVersion
    room: Room
    mode: ChosenMode
    record: RolloutRecord | None  # what the route records now (another run's, or ours)
    baseline: PoolCopy | None = None  # the fresh copy of the old version this run makes
    baseline_note: str = "none: the new version judged against the old pool"
    prewarm: Prewarm | None = None  # no room yet: the GPUs asked of the capacity side
    # Every HTTPRoute naming the old pool (`route` first): their weights move together.
    routes: tuple[HTTPRoute, ...] = ()

    @property
    def route_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.routes) or (self.route.name,)

    @property
    def old_ref(self) -> PoolRef:
        return self.old.pool.ref

    @property
    def baseline_ref(self) -> PoolRef | None:
        if self.baseline is None:
            return None
        return PoolRef(self.old.pool.ref.group, self.new.namespace, self.baseline.pool_name)

    @property
    def new_ref(self) -> PoolRef:
        return PoolRef(self.old.pool.ref.group, self.new.namespace, self.new.pool_name)

    @property
    def steps(self) -> tuple[int, ...]:
        """The blue-green steps: the spec's, plus a step where both pools' replicas are about
        as busy when the spec has none (latency compares only there: `gates`)."""
        return with_comparable_step(self.spec.steps, self.old.model_server().replicas,
                                    self.new.replicas, self.spec.analysis.load_match)

    def describe(self) -> str:
        n = self.new
        routes = self.routes or (self.route,)
        named = f"HTTPRoute{'s' if len(routes) > 1 else ''} {', '.join(map(str, routes))}"
        lines = [f"pool       {self.old.pool.ref} -> {n.pool_name} ({named})",
                 f"version    {n.old_version.describe()}",
                 f"        -> {n.version.describe()}",
                 (f"workload   {n.workload_kind} {n.old_deployment} -> {n.deployment_name}, "
                  f"{n.replicas} replica(s) x {n.gpus_per_replica} GPU(s)"
                  + (f" (groups of {n.group_size} pods)" if n.group_size > 1 else "")),
                 f"mode       {self.mode} ({self.room.describe(n.gpus_per_replica)})"]
        if self.prewarm is not None:
            lines.append(f"           {self.prewarm.describe()}")
        if n.epp_name:
            lines.append(f"picker     {n.epp_name} (Service + Deployment, --pool-name "
                         f"{n.pool_name})")
        if self.mode == "blue-green":
            added = sorted(set(self.steps) - set(self.spec.steps))
            lines.append("steps      " + " -> ".join(f"{s} %" for s in self.steps) + (
                f" ({', '.join(f'{a} %' for a in added)} added: the first step where both "
                "pools' replicas are about as busy)" if added else ""))
        else:
            lines.append(f"steps      {self.spec.capacity_step} replica(s) at a time, weights "
                         "following ready replicas")
        lines.append(f"analysis   {self.spec.timing.window_s:g} s windows (extended up to "
                     f"{self.spec.timing.step_timeout_s:g} s), at least "
                     f"{self.spec.analysis.min_requests} requests on each side, "
                     f"{len(self.spec.analysis.gates)} gates against the old version")
        lines.append(f"baseline   {self.baseline_note}")
        if self.baseline is not None:
            b = self.baseline
            lines.append(f"           Deployment {b.deployment_name}, InferencePool "
                         f"{b.pool_name}" + (f", picker {b.epp_name}" if b.epp_name else ""))
        lines.append(f"approval   {self.spec.approve}")
        return "\n".join(lines)


def _pool_object(kube: Kube, apis: ServedApis, namespace: str, name: str) -> dict[str, Any]:
    api = apis.inference_pool
    obj = kube.get_custom(api.group, api.version, namespace, "inferencepools", name)
    return {**obj, "apiVersion": api.api_version, "kind": "InferencePool"}


def _epp(kube: Kube, view: PoolView) -> tuple[dict[str, Any] | None, Mapping[str, Any] | None]:
    picker = view.pool.endpoint_picker
    if picker is None:
        return None, None
    if picker.kind != "Service" or picker.group not in ("", "core"):
        raise ConfigError("pool", f"InferencePool {view.pool.ref}'s endpoint picker is a "
                          f"{picker.group or 'core'}/{picker.kind}; a rollout can copy a "
                          "Service-fronted picker only")
    try:
        service = kube.get_service(view.pool.namespace, picker.name)
    except KubeNotFound:
        return None, None
    deployments = [{**d, "apiVersion": "apps/v1", "kind": "Deployment"} for d in
                   kube.list_custom("apps", "v1", view.pool.namespace, "deployments")]
    return service, epp_deployment_of(service, deployments)


def _routes(view: PoolView) -> tuple[HTTPRoute, ...]:
    """Every route naming the pool, by name (`routes`: they move together)."""
    if not view.routes:
        raise ConfigError("pool", f"no HTTPRoute in namespace {view.pool.namespace} routes to "
                          f"InferencePool {view.pool.ref}: there is no traffic to move")
    return tuple(sorted(view.routes, key=str))


def _check_names(kube: Kube, new: NewVersion) -> None:
    """A derived name taken by an object no rollout made is refused: it would be adopted."""
    bodies = [b for b in (new.deployment, new.pool, new.epp_service, new.epp_deployment)
              if b is not None] + (new.baseline.bodies() if new.baseline else [])
    for body in bodies:
        meta = body["metadata"]
        try:
            found = get_object(kube, body["apiVersion"], body["kind"], meta["namespace"],
                               meta["name"])
        except KubeNotFound:
            continue
        if ROLLOUT_RUN not in ((found.get("metadata") or {}).get("annotations") or {}):
            raise ConfigError("image", f"{body['kind']} {meta['namespace']}/{meta['name']} "
                              "(the new version's name) exists and was not made by a gpuops "
                              "rollout; rename or remove it first")


def preflight(kube: Kube, spec: RolloutSpec, run_id: str) -> Plan:
    """Read and check everything (see the module docstring); changes nothing."""
    apis = read_served_apis(kube)
    namespace, name = spec.pool.namespace, spec.pool.name
    view = read_pool_view(kube, apis, namespace, name, field="pool")
    server = view.model_server("pool")
    routes = _routes(view)
    route = routes[0]
    record = routes_record(routes)
    if record is None:
        check_routes_agree(routes, view.pool.ref)
    deployment = read_workload(kube, server.kind, namespace, server.name)
    service, epp_deployment = _epp(kube, view)
    new = derive(pool=view.pool, pool_obj=_pool_object(kube, apis, namespace, name),
                 deployment=deployment, change=spec.change, run_id=run_id,
                 container=spec.container, epp_service=service, epp_deployment=epp_deployment,
                 baseline=spec.baseline in ("fresh-copy", "auto") or (
                     record is not None and record.baseline_pool is not None))
    new_ref = PoolRef(view.pool.ref.group, namespace, new.pool_name)
    ours = record is not None and record.old_pool == name and record.version == new.digest
    for each in routes:
        if record is None or ours:  # (another rollout's routes: checked once it is settled)
            weight_patch(each, view.pool.ref, new_ref, WeightSplit(100, 0))  # it can carry it
        if record is None and not any(old for old, _ in
                                      current_split(each, view.pool.ref, new_ref).values()):
            raise ConfigError("pool", f"InferencePool {view.pool.ref} gets no traffic on "
                              f"HTTPRoute {each} (weight 0): roll out from the pool that serves")
    _check_names(kube, new)
    room = room_for_replicas(new.deployment, kube.list_nodes(), kube.list_pods())
    mode: ChosenMode
    prewarm = None
    if ours:
        assert record is not None
        mode = "fixed-capacity" if record.mode == "fixed-capacity" else "blue-green"
    else:
        prewarm = choose_prewarm(spec.mode, spec.no_room, spec.prewarm_fallback,
                                 spec.prewarm_timeout_s, room, new.replicas,
                                 new.gpus_per_replica, spec.capacity_step)
        mode = "blue-green" if prewarm is not None else choose_mode(
            spec.mode, room, new.replicas, new.gpus_per_replica, spec.capacity_step)
    if ours:  # resumed: the baseline the record names, whatever this run asks
        assert record is not None
        with_baseline = record.baseline_pool is not None
        note = ("fresh-copy (resumed: the one the earlier run made)" if with_baseline else
                "none (resumed: the earlier run had none): judged against the old pool")
    else:
        with_baseline, note = choose_baseline(spec.baseline, mode, room, new.replicas,
                                              new.gpus_per_replica)
    return Plan(spec, apis, view, route, new, room, mode, record,
                new.baseline if with_baseline else None, note, prewarm, routes)
