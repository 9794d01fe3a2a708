"""A pool routed by several HTTPRoutes (one per Gateway or hostname, say): what the rollout
moves together, and the one record it resumes from (pure).

Every route that names the old pool gets the same weights, each through its own `perform()`
with the rollout's record in the same patch, one route after the other. A crash between two
routes leaves them at different steps, each saying so in its record: the next run takes the
record written last (the one furthest along, or the rollback begun) and brings every route
to it, or rolls them all back.

At the start, with no record anywhere, the routes must agree: the rules naming the old pool
send to the same InferencePools on every route. Otherwise (one route already splits to a
pool another does not) a rollout cannot tell which split to move from, and refuses.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.objects import POOL_KIND, HTTPRoute, PoolRef
from gpuops.tasks.rollout.state import PHASES, RolloutRecord, read_record


def pools_routed_with(route: HTTPRoute, pool: PoolRef) -> frozenset[str]:
    """The InferencePools the route's rules naming `pool` send to (`pool` included)."""
    return frozenset(f"{b.namespace}/{b.name}" for rule in route.rules_for(pool)
                     for b in rule.backends if b.kind == POOL_KIND)


def check_routes_agree(routes: Sequence[HTTPRoute], pool: PoolRef) -> None:
    """A `ConfigError` on `pool` when the routes send the pool's traffic to different pools."""
    seen = {str(r): pools_routed_with(r, pool) for r in routes}
    if len(set(seen.values())) > 1:
        raise ConfigError("pool", f"the HTTPRoutes routing InferencePool {pool} disagree: "
                          + "; ".join(f"{name} sends to {', '.join(sorted(pools))}"
                                      for name, pools in sorted(seen.items()))
                          + ". Make every route name the same pools first")


def routes_record(routes: Sequence[HTTPRoute]) -> RolloutRecord | None:
    """The rollout recorded on the routes: the record written last (None: no route has one).
    Records of different rollouts (another run or version) are refused: someone or
    something mixed them up, and no one split can be resumed."""
    records = [(r, rec) for r in routes
               if (rec := read_record(dict(r.annotations), f"HTTPRoute {r}")) is not None]
    if not records:
        return None
    first_route, first = records[0]
    for route, record in records[1:]:
        if (record.run, record.old_pool, record.new_pool, record.version) != (
                first.run, first.old_pool, first.new_pool, first.version):
            raise ConfigError("pool", f"HTTPRoutes {first_route} and {route} record different "
                              f"rollouts ({first.old_pool} -> {first.new_pool} by run "
                              f"{first.run}; {record.old_pool} -> {record.new_pool} by run "
                              f"{record.run}); check their weights and remove the "
                              "gpuops.io/rollout annotations by hand")
    # (times are stamped to the second: on a tie the later phase, then the higher weight)
    return max((rec for _, rec in records),
               key=lambda rec: (rec.updated, PHASES.index(rec.phase), rec.weight))
