"""What `gpuops rollout status POOL` shows: the pool's route, its weights, the rollout recorded
on it and how the last one ended (a read, and its text).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuops.common.annotations import ROLLOUT_ABORT, ROLLOUT_LAST
from gpuops.common.errors import ConfigError
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.rollout.objects import POOL_KIND, HTTPRoute
from gpuops.tasks.rollout.read_objects import read_pool_view, read_served_apis
from gpuops.tasks.rollout.routes import routes_record
from gpuops.tasks.rollout.state import RolloutRecord


@dataclass(frozen=True)
class RolloutStatus:
    pool: str  # namespace/name
    route: HTTPRoute
    weights: tuple[tuple[str, int], ...]  # (pool, weight) in the rules naming the pool
    record: RolloutRecord | None
    last: str | None
    abort: str | None
    routes: tuple[HTTPRoute, ...] = ()  # every route naming the pool (`route` first)


def read_status(kube: Kube, namespace: str, name: str) -> RolloutStatus:
    view = read_pool_view(kube, read_served_apis(kube), namespace, name, field="pool")
    if not view.routes:
        raise ConfigError("pool", f"no HTTPRoute in namespace {view.pool.namespace} routes to "
                          f"InferencePool {view.pool.ref}")
    routes = tuple(sorted(view.routes, key=str))  # moved together (`routes`)
    route = routes[0]
    weights = tuple((b.name, b.weight) for rule in route.rules_for(view.pool.ref)
                    for b in rule.backends if b.kind == POOL_KIND)
    abort = next((r.annotations[ROLLOUT_ABORT] for r in routes if ROLLOUT_ABORT in r.annotations),
                 None)
    return RolloutStatus(str(view.pool.ref), route, weights, routes_record(routes),
                         route.annotations.get(ROLLOUT_LAST), abort, routes)


def status_text(status: RolloutStatus, run_state: str | None = None) -> str:
    lines = [f"HTTPRoute {status.route}: " + ", ".join(f"{pool} {weight} %" for pool, weight
                                                       in status.weights)]
    record = status.record
    if record is None:
        lines.append("rollout: none in progress")
    else:
        at = f"{record.weight} %" + (" (judged, passed)" if record.passed else "")
        lines.append(f"rollout: {record.old_pool} -> {record.new_pool} ({record.mode}), "
                     f"{record.phase} at {at}, updated {record.updated:%Y-%m-%d %H:%M:%S}Z")
        lines.append(f"run: {record.run}" + (f" ({run_state})" if run_state else ""))
        if record.baseline_pool:
            share = dict(status.weights).get(record.baseline_pool, 0)
            lines.append(f"baseline: {record.baseline_pool} (a fresh copy of the old version, "
                         f"Deployment {record.baseline_deployment or '-'}) at {share} %, "
                         "judged against below 50 %, removed from 50 % on")
        if record.keep_old_until is not None:
            lines.append(f"old version kept warm until {record.keep_old_until:%H:%M:%S}Z")
    if status.abort:
        lines.append(f"abort requested: {status.abort}")
    if status.last:
        lines.append(f"last: {status.last}")
    return "\n".join(lines)
