"""The Auto Scaling default termination policy simcluster's node pools follow, on plain data:
zone balance first, protection respected, then outdated launch templates, then the instance
closest to its next billing hour. What runs on an instance never counts."""

from __future__ import annotations

from gpuops.simcluster.cloud.termination import Instance, termination_order

NOW = 1_800_000_000.0


def inst(name: str, zone: str, age_s: float = 600.0, **kw: object) -> Instance:
    return Instance(name, f"i-{name}", zone, NOW - age_s, **kw)  # type: ignore[arg-type]


def test_the_zone_with_the_most_instances_loses_one_first_and_balance_is_kept():
    fleet = [inst("a1", "a"), inst("a2", "a"), inst("a3", "a"), inst("b1", "b"),
             inst("c1", "c")]
    first, second, third = termination_order(fleet, 3, NOW)
    assert first.startswith("a") and second.startswith("a")  # 3-1-1, then 2-1-1
    assert third not in (first, second)  # 1-1-1: any zone


def test_protected_instances_are_never_picked_and_their_zone_only_counts_if_one_is_not():
    fleet = [inst("a1", "a", protected=True), inst("a2", "a", protected=True),
             inst("b1", "b")]
    assert termination_order(fleet, 3, NOW) == ["b1"]  # nothing else may go


def test_an_outdated_launch_template_goes_before_the_billing_hour_is_looked_at():
    fleet = [inst("new", "a", age_s=3599), inst("old", "a", age_s=60, config_age=1)]
    assert termination_order(fleet, 1, NOW) == ["old"]


def test_then_the_instance_closest_to_its_next_billing_hour():
    fleet = [inst("fresh", "a", age_s=120), inst("due", "a", age_s=3 * 3600 + 3500),
             inst("mid", "a", age_s=1800)]
    assert termination_order(fleet, 3, NOW) == ["due", "mid", "fresh"]
