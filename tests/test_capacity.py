"""The capacity plan on problems small enough to solve by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuops.tasks.capacity.plan import (
    GpuQuota,
    ModelProfile,
    NodePoolSpec,
    PlanOptions,
    fit_whole_replicas,
    node_bounds,
    plan_capacity,
    round_replicas,
)


def pool(name: str = "a100", *, gpus: int = 8, price: float = 10.0, family: str = "P",
         min_size: int = 0, max_size: int = 10, lead: int = 0, current: int = 0,
         ramp: int | None = None) -> NodePoolSpec:
    return NodePoolSpec(name=name, instance_type=f"{name}.xlarge", gpus_per_node=gpus,
                        gpu_product=name.upper(), price_per_hour=price, min_size=min_size,
                        max_size=max_size, lead_time_hours=lead, gpu_family=family,
                        current_size=current, max_nodes_added_per_hour=ramp)


def model(name: str = "llm", *, gpus: int = 1, pools: tuple[str, ...] = ("a100",),
          throughput: float = 100.0, min_replicas: int = 0) -> ModelProfile:
    return ModelProfile(name=name, gpus_per_replica=gpus, allowed_pools=pools,
                        throughput_per_replica=throughput, load_time_s=30.0,
                        min_replicas=min_replicas)


def test_demand_of_seven_and_a_half_replicas_takes_eight_replicas_on_one_node():
    plan = plan_capacity([pool()], [model()], {"llm": [750.0]})
    assert plan.nodes == {"a100": (1,)}
    assert plan.replicas == {"llm": {"a100": (8,)}}
    assert plan.cost == pytest.approx(10.0)
    assert plan.total_shortfall == 0
    assert plan.status == "optimal" and plan.gap == pytest.approx(0.0, abs=0.01)
    assert plan.pool_targets(0) == {"a100": 1}


def test_continuous_replicas_are_rounded_to_the_same_optimum():
    plan = plan_capacity([pool()], [model()], {"llm": [750.0]},
                         options=PlanOptions(integer_replicas=False))
    assert not plan.integer_replicas
    assert plan.nodes == {"a100": (1,)} and plan.replicas == {"llm": {"a100": (8,)}}


def test_the_cheaper_whole_node_wins_not_the_cheaper_gpu():
    big = pool("big", gpus=8, price=16.0)  # $2 per GPU
    small = pool("small", gpus=4, price=10.0)  # $2.5 per GPU
    m = model(pools=("big", "small"))
    eight = plan_capacity([big, small], [m], {"llm": [800.0]})
    assert eight.nodes == {"big": (1,), "small": (0,)}  # $16 < 2 x $10
    four = plan_capacity([big, small], [m], {"llm": [400.0]})
    assert four.nodes == {"big": (0,), "small": (1,)}  # $10 < $16


def test_lead_time_forces_current_nodes_until_the_cheap_pool_can_grow():
    cheap = pool("cheap", price=10.0, lead=2, current=0)
    dear = pool("dear", price=30.0, lead=0, current=1)
    plan = plan_capacity([cheap, dear], [model(pools=("cheap", "dear"))],
                         {"llm": [800.0] * 4})
    assert plan.nodes == {"cheap": (0, 0, 1, 1), "dear": (1, 1, 0, 0)}
    assert plan.total_shortfall == 0


def test_demand_before_the_lead_time_is_short_by_what_current_nodes_cannot_serve():
    slow = pool(lead=1, current=1)
    plan = plan_capacity([slow], [model()], {"llm": [1600.0, 1600.0]})
    assert plan.nodes == {"a100": (1, 2)}
    assert plan.shortfall == {"llm": (800.0, 0.0)}


def test_a_binding_quota_pushes_the_rest_to_the_dearer_pool():
    cheap = pool("l4", gpus=4, price=4.0, family="G")  # $1 per GPU
    dear = pool("a100", gpus=8, price=16.0, family="P")  # $2 per GPU
    m = model(pools=("l4", "a100"))
    free = plan_capacity([cheap, dear], [m], {"llm": [1600.0]})
    assert free.nodes == {"l4": (4,), "a100": (0,)}
    capped = plan_capacity([cheap, dear], [m], {"llm": [1600.0]},
                           quotas=[GpuQuota("G", max_gpus=8)])
    assert capped.nodes == {"l4": (2,), "a100": (1,)}
    assert capped.cost == pytest.approx(24.0)


def test_demand_above_max_size_is_reported_as_exact_shortfall_not_infeasible():
    plan = plan_capacity([pool(max_size=2)], [model()], {"llm": [1000.0, 2000.0]})
    assert plan.nodes == {"a100": (2, 2)}
    assert plan.shortfall == {"llm": (0.0, 400.0)}
    report = plan.shortfall_report()
    assert "'llm'" in report and "h1: 400" in report and "400 demand units" in report


def test_a_plan_without_shortfall_says_so():
    plan = plan_capacity([pool()], [model()], {"llm": [100.0, 0.0]})
    assert plan.shortfall_report().startswith("No shortfall")


def test_min_replicas_are_kept_without_demand():
    plan = plan_capacity([pool()], [model(gpus=2, min_replicas=2)], {"llm": [0.0, 0.0]})
    assert plan.replicas["llm"]["a100"] == (2, 2)
    assert plan.nodes == {"a100": (1, 1)}


def test_ramp_limit_adds_one_node_per_hour():
    plan = plan_capacity([pool(ramp=1)], [model()], {"llm": [2400.0] * 3})
    assert plan.nodes == {"a100": (1, 2, 3)}
    assert plan.shortfall == {"llm": (1600.0, 800.0, 0.0)}


def test_node_bounds_follow_lead_time_ramp_and_unreachable_min_size():
    lower, upper = node_bounds(pool(min_size=3, max_size=5, lead=1, current=1, ramp=1), 4)
    assert list(upper) == [1, 2, 3, 4]
    assert list(lower) == [1, 2, 3, 3]


def test_rounding_keeps_each_models_total_at_the_next_whole_replica():
    edges = ((0, 0), (0, 1), (1, 0))
    values = np.array([[1.2, 0.5], [0.7, 0.5], [2.0, 0.0]])
    rounded = round_replicas(values, edges, n_models=2)
    # model 0: 1.9 -> 2 (the larger fraction gets the extra), 1.0 -> 1; model 1 unchanged
    np.testing.assert_array_equal(rounded, [[1, 1], [1, 0], [2, 0]])


def test_whole_replicas_that_overflow_a_node_get_another_node():
    pools, models = [pool()], [model("x", gpus=4), model("y", gpus=4)]
    nodes, replicas = np.array([[1]]), np.array([[1.0], [2.0]])  # 12 GPUs on one 8-GPU node
    notes = fit_whole_replicas(nodes, replicas, pools, models, [], ((0, 0), (1, 0)),
                               upper=np.array([[10.0]]))
    assert nodes.tolist() == [[2]] and replicas.tolist() == [[1.0], [2.0]]
    assert notes == ["pool 'a100' h0: +1 node(s) to fit whole replicas"]


def test_whole_replicas_without_room_for_another_node_are_dropped():
    pools, models = [pool()], [model("x", gpus=4), model("y", gpus=4)]
    nodes, replicas = np.array([[1]]), np.array([[1.0], [2.0]])
    notes = fit_whole_replicas(nodes, replicas, pools, models, [GpuQuota("P", 8)],
                               ((0, 0), (1, 0)), upper=np.array([[10.0]]))
    assert nodes.tolist() == [[1]] and replicas.sum() == 2
    assert notes == ["pool 'a100' h0: dropped 1 replica of 'x' (no room for whole replicas)"]


def test_continuous_replicas_give_a_plan_whose_replicas_fit_their_nodes():
    pools = [pool("a", gpus=8, price=16.0), pool("b", gpus=4, price=9.0)]
    models = [model("x", gpus=4, pools=("a", "b")), model("y", gpus=1, pools=("a", "b")),
              model("z", gpus=2, pools=("a",))]
    demand = {"x": [130.0, 20.0, 310.0], "y": [450.0, 90.0, 120.0], "z": [60.0, 260.0, 10.0]}
    plan = plan_capacity(pools, models, demand, options=PlanOptions(integer_replicas=False))
    gpus = {"x": 4, "y": 1, "z": 2}
    for p in pools:
        for t in range(3):
            used = sum(plan.replicas[m][p.name][t] * gpus[m] for m in gpus
                       if p.name in plan.replicas[m])
            assert used <= plan.nodes[p.name][t] * p.gpus_per_node
    assert plan.total_shortfall == 0


@pytest.mark.parametrize("pools, models, demand, quotas, field", [
    ([pool(min_size=4, max_size=2)], [model()], {"llm": [1.0]}, [], r"pools\['a100'\]\.max_size"),
    ([pool(price=-1.0)], [model()], {"llm": [1.0]}, [], r"pools\['a100'\]\.price_per_hour"),
    ([pool()], [model(pools=("h100",))], {"llm": [1.0]}, [],
     r"models\['llm'\]\.allowed_pools: unknown pool 'h100'"),
    ([pool()], [model(throughput=0.0)], {"llm": [1.0]}, [],
     r"models\['llm'\]\.throughput_per_replica"),
    ([pool()], [model("a"), model("b")], {"a": [1.0, 2.0], "b": [1.0]}, [],
     r"demand\['b'\]: has 1 hours, expected 2"),
    ([pool()], [model()], {}, [], r"demand\['llm'\]: missing"),
    ([pool()], [model()], {"llm": [1.0], "ghost": [1.0]}, [], r"demand\['ghost'\]"),
    ([pool()], [model()], {"llm": [-1.0]}, [], r"demand\['llm'\]: values must be"),
    ([pool(gpus=4)], [model(gpus=8)], {"llm": [1.0]}, [], r"models\['llm'\]\.allowed_pools"),
    ([pool(min_size=2)], [model()], {"llm": [1.0]}, [GpuQuota("P", 8)],
     r"quotas\['P'\]\.max_gpus"),
    ([pool()], [model()], {"llm": [1.0]}, [GpuQuota("X", 8)], r"quotas\['X'\]\.family"),
    ([pool(), pool()], [model()], {"llm": [1.0]}, [], r"pools\[1\]\.name: duplicate"),
])
def test_bad_input_raises_value_error_naming_the_field(pools, models, demand, quotas, field):
    with pytest.raises(ValueError, match=field):
        plan_capacity(pools, models, demand, quotas)


def test_bad_options_are_refused_before_solving():
    with pytest.raises(ValueError, match=r"options\.mip_rel_gap"):
        plan_capacity([pool()], [model()], {"llm": [1.0]},
                      options=dataclasses.replace(PlanOptions(), mip_rel_gap=1.5))
