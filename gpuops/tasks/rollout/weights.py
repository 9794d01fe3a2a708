"""Moving an HTTPRoute's traffic split between the old and the new InferencePool (pure).

A split is integer percentages (old, new, and the baseline's when there is one) that sum to
100. A baseline is a fresh copy of the old version as large as the new one
(`--baseline fresh-copy`): below 50 % it gets the new version's weight (`step_split`), so the
two are judged at equal loads per replica; from 50 % on it gets 0 and the old the rest. Every rule of the route that
names either pool gets both backendRefs with those weights: a missing one is added (the first
step adds the new pool), a pool at 0 keeps its backendRef (a rollback only moves weights back).
A rule that also sends traffic elsewhere (another backend with weight > 0) is refused: the
weights would then not be the percentages the rollout judges by.

The patch is a JSON patch whose `test` operations pin each backendRef it changes (name, and
weight when set), so a route someone edited meanwhile is refused by the API server (422)
instead of overwritten; the rollout's state annotations ride in the same patch, so weights and
the record of them change together or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.objects import POOL_KIND, HTTPRoute, PoolRef, RouteRule

Patch = list[dict[str, Any]]


# Below this share the baseline carries as much as the new version; from it on, the old
# version's replicas are about as busy as the new ones and the old pool is the comparison.
BASELINE_UNTIL = 50


@dataclass(frozen=True)
class WeightSplit:
    old: int
    new: int
    baseline: int = 0

    def __str__(self) -> str:
        return f"{self.old}/{self.new}" + (f"/{self.baseline}" if self.baseline else "")


def step_split(weight: int, *, baseline: bool) -> WeightSplit:
    """The split at a step giving the new version `weight` %: with a baseline and below
    `BASELINE_UNTIL`, the baseline gets as much and the old one the rest (98/1/1 at 1 %)."""
    weight = _percentage(weight, "weight")
    if baseline and 0 < weight < BASELINE_UNTIL:
        return WeightSplit(100 - 2 * weight, weight, weight)
    return WeightSplit(100 - weight, weight, 0)


def judged_against_baseline(split: WeightSplit) -> bool:
    """Is the new version compared with the baseline (it carries traffic) at this split?"""
    return split.baseline > 0


def _percentage(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, f"must be an integer percentage, got {value!r}")
    if not 0 <= value <= 100:
        raise ConfigError(field, f"must be within 0..100, got {value}")
    return value


def parse_split(old: object, new: object, *, field: str = "weights") -> WeightSplit:
    """A validated split: integers (not bools, not 12.5), each in 0..100, summing to 100."""
    split = WeightSplit(_percentage(old, f"{field}.old"), _percentage(new, f"{field}.new"))
    if split.old + split.new != 100:
        raise ConfigError(field, f"old + new must be 100, got {split.old} + {split.new} = "
                          f"{split.old + split.new}")
    return split


def check_split(split: WeightSplit, *, field: str = "weights") -> WeightSplit:
    """`split` itself when its shares are percentages summing to 100, else a `ConfigError`."""
    for name, value in (("old", split.old), ("new", split.new), ("baseline", split.baseline)):
        _percentage(value, f"{field}.{name}")
    total = split.old + split.new + split.baseline
    if total != 100:
        raise ConfigError(field, f"old + new + baseline must be 100, got {split.old} + "
                          f"{split.new} + {split.baseline} = {total}")
    return split


def _pools(old: PoolRef, new: PoolRef, baseline: PoolRef | None) -> tuple[PoolRef, ...]:
    return (old, new) if baseline is None else (old, new, baseline)


def current_split(route: HTTPRoute, old: PoolRef, new: PoolRef,
                  baseline: PoolRef | None = None) -> dict[int, tuple[int, ...]]:
    """(old, new[, baseline]) weights per rule index, for every rule naming any of them."""
    pools = _pools(old, new, baseline)
    return {r.index: tuple(route.weight_of(r, p) for p in pools)
            for r in route.rules_for(*pools)}


def split_applied(route: HTTPRoute, old: PoolRef, new: PoolRef, split: WeightSplit,
                  baseline: PoolRef | None = None) -> bool:
    """Does every rule naming the pools carry `split` already (the postcondition)?"""
    weights = current_split(route, old, new, baseline)
    wanted = (split.old, split.new) if baseline is None else (split.old, split.new,
                                                              split.baseline)
    return bool(weights) and all(w == wanted for w in weights.values())


def _check_rule(route: HTTPRoute, rule: RouteRule, pools: tuple[PoolRef, ...]) -> None:
    where = f"HTTPRoute {route}.spec.rules[{rule.index}]"
    for pool in pools:
        if len(rule.backends_of(pool)) > 1:
            raise ConfigError(f"{where}.backendRefs", f"names InferencePool {pool} more than "
                              "once; merge those backendRefs first")
    for b in rule.backends:
        if b.weight > 0 and not any(b.names(p) for p in pools):
            raise ConfigError(f"{where}.backendRefs[{b.index}]",
                              f"also sends traffic to {b.kind} {b.namespace}/{b.name} "
                              f"(weight {b.weight}); a rollout needs a rule that routes to the "
                              "old and the new pool only (set that weight to 0 or split the rule)")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")  # RFC 6901


def _annotation_ops(route: HTTPRoute, annotations: Mapping[str, str | None]) -> Patch:
    if not route.annotations:
        values = {k: v for k, v in annotations.items() if v is not None}
        return [{"op": "add", "path": "/metadata/annotations", "value": values}] if values else []
    ops: Patch = []
    for key, value in annotations.items():
        path = f"/metadata/annotations/{_escape(key)}"
        if value is None:
            if key in route.annotations:
                ops.append({"op": "remove", "path": path})
        elif route.annotations.get(key) != value:
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def weight_patch(route: HTTPRoute, old: PoolRef, new: PoolRef, split: WeightSplit, *,
                 annotations: Mapping[str, str | None] | None = None,
                 baseline: PoolRef | None = None) -> Patch:
    """The JSON patch that gives every rule naming `old` or `new` the weights `split`.

    `baseline`: the baseline pool, given `split.baseline` (a baseline at 0 the rule does not
    name is not added: there is nothing to send it). `annotations`: set (a string) or removed
    (None) in the same patch. Empty when the route already carries the split and the
    annotations: nothing to do."""
    if old == new:
        raise ConfigError("new_pool", f"is the old pool itself ({old})")
    if baseline is not None and baseline in (old, new):
        raise ConfigError("baseline", f"is the old or the new pool itself ({baseline})")
    check_split(split)
    if split.baseline and baseline is None:
        raise ConfigError("baseline", f"split {split} gives a baseline traffic but names no "
                          "baseline pool")
    pools = _pools(old, new, baseline)
    shares = ((old, split.old), (new, split.new)) + (
        () if baseline is None else ((baseline, split.baseline),))
    rules = route.rules_for(old, new)
    if not rules:
        routed = sorted({f"{b.namespace}/{b.name}" for r in route.rules for b in r.backends
                         if b.kind == POOL_KIND})
        raise ConfigError("old_pool", f"HTTPRoute {route} routes to neither InferencePool "
                          f"{old} nor {new}; it routes to: {', '.join(routed) or 'no pool'}")
    ops: Patch = []
    for rule in rules:
        _check_rule(route, rule, pools)
        base = f"/spec/rules/{rule.index}/backendRefs"
        for pool, weight in shares:
            found = rule.backends_of(pool)
            if not found and pool == baseline and weight == 0:
                continue
            if not found:
                ref: dict[str, Any] = {"group": pool.group, "kind": POOL_KIND, "name": pool.name,
                                       "weight": weight}
                if pool.namespace != route.namespace:
                    ref["namespace"] = pool.namespace
                ops.append({"op": "add", "path": f"{base}/-", "value": ref})
                continue
            b = found[0]
            if b.weight == weight and b.weight_set:
                continue
            ops.append({"op": "test", "path": f"{base}/{b.index}/name", "value": b.name})
            if b.weight_set:
                ops.append({"op": "test", "path": f"{base}/{b.index}/weight", "value": b.weight})
            ops.append({"op": "add", "path": f"{base}/{b.index}/weight", "value": weight})
    return ops + _annotation_ops(route, annotations or {})


def annotation_patch(route: HTTPRoute, annotations: Mapping[str, str | None]) -> Patch:
    """A JSON patch of the route's annotations only, pinned to the route as read (a test of
    its resourceVersion: a route changed since is refused, 422). Empty: nothing to change."""
    ops = _annotation_ops(route, annotations)
    if not ops:
        return []
    pin: Patch = ([{"op": "test", "path": "/metadata/resourceVersion",
                    "value": route.resource_version}] if route.resource_version else [])
    return pin + ops


def remove_backend_patch(route: HTTPRoute, pool: PoolRef, *,
                         annotations: Mapping[str, str | None] | None = None) -> Patch:
    """Take a pool's backendRefs (weight 0 only: removing one that carries traffic would
    move it elsewhere unasked) out of every rule; a rule left with no backendRef is refused."""
    ops: Patch = []
    for rule in route.rules_for(pool):
        found = rule.backends_of(pool)
        if any(b.weight > 0 for b in found):
            raise ConfigError(f"HTTPRoute {route}.spec.rules[{rule.index}]",
                              f"still sends InferencePool {pool} traffic; move its weight first")
        if len(found) == len(rule.backends):
            raise ConfigError(f"HTTPRoute {route}.spec.rules[{rule.index}]",
                              f"routes to InferencePool {pool} only; it cannot be removed")
        base = f"/spec/rules/{rule.index}/backendRefs"
        for b in sorted(found, key=lambda b: b.index, reverse=True):
            ops.append({"op": "test", "path": f"{base}/{b.index}/name", "value": b.name})
            ops.append({"op": "remove", "path": f"{base}/{b.index}"})
    return ops + _annotation_ops(route, annotations or {})
