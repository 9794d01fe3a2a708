"""The placement policies the rebalance bench compares and the planner predicts with."""

from __future__ import annotations

import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rebalance.fragmentation import typical_shapes
from gpuops.tasks.rebalance.model import Cluster, Node, Pod, Taint
from gpuops.tasks.rebalance.placement import Placer
from gpuops.tasks.rebalance.state import PackState


def two_nodes(pending, running=()):
    nodes = (Node("a", 64000, 256000, gpus=4, gpu_model="T4"),
             Node("b", 64000, 256000, gpus=4, gpu_model="T4"))
    busy = (Pod("busy", cpu_milli=32000, memory_mib=128000, gpu_count=2, node="b",
                gpu_ids=(0, 1)),)
    return PackState.from_cluster(Cluster(nodes, busy + tuple(running), tuple(pending)))


def test_default_spreads_to_the_emptier_node_best_fit_packs_onto_the_fuller_one():
    state, _ = two_nodes([Pod("new", cpu_milli=4000, memory_mib=8000, gpu_count=1)])
    assert Placer(state, "default").choose(1) == (0, (0,))  # a: least allocated
    assert Placer(state, "best_fit").choose(1) == (1, (2,))  # b: least left after it


def test_a_shared_pod_takes_the_tightest_device_and_fgd_the_one_that_fragments_least():
    running = [Pod("q1", cpu_milli=1000, gpu_count=1, gpu_milli=300, node="a", gpu_ids=(1,)),
               Pod("q2", cpu_milli=1000, gpu_count=1, gpu_milli=600, node="a", gpu_ids=(2,))]
    state, _ = two_nodes([Pod("s", cpu_milli=1000, gpu_count=1, gpu_milli=400)], running)
    placer = Placer(state, "best_fit")
    assert placer.devices(3, 0) == (2,)  # 400 free on device 2 is the tightest fit
    # typical shapes want 700 milli: device 1 (700 free) must stay whole for them
    shapes = typical_shapes([(1000, 1, 700, frozenset())] * 3)
    node, devices = Placer(state, "fgd", shapes=shapes).choose(3)
    assert devices == (2,) and node == 0


def test_whole_gpu_pods_take_the_lowest_numbered_free_devices():
    state, _ = two_nodes([Pod("w", cpu_milli=1000, gpu_count=2)])
    placer = Placer(state, "best_fit")
    assert placer.devices(1, 1) == (2, 3)
    assert placer.place(1) and state.pod_node[1] == 1 and state.pod_gpus[1] == (2, 3)
    assert state.gpu_free[1].tolist() == [0, 0, 0, 0]


def test_ties_go_to_the_node_whose_name_sorts_first_and_nothing_fits_returns_none():
    nodes = (Node("z", 8000, 8000, gpus=1), Node("m", 8000, 8000, gpus=1))
    state, _ = PackState.from_cluster(Cluster(nodes, (), (Pod("p", gpu_count=1),
                                                          Pod("big", gpu_count=2))))
    assert Placer(state, "best_fit").choose(0) == (1, (0,))
    assert Placer(state, "default").choose(1) is None


def test_placement_respects_taints_selectors_and_gpu_models():
    nodes = (Node("tainted", 8000, 8000, gpus=1, gpu_model="A100",
                  taints=(Taint("gpu", "yes"),)),
             Node("t4", 8000, 8000, gpus=1, gpu_model="T4", labels={"zone": "x"}))
    pending = (Pod("wants-a100", gpu_count=1, gpu_models=frozenset({"A100"})),
               Pod("wants-zone-y", gpu_count=1, node_selector={"zone": "y"}),
               Pod("any", gpu_count=1))
    state, _ = PackState.from_cluster(Cluster(nodes, (), pending))
    placer = Placer(state, "best_fit")
    assert placer.choose(0) is None  # the A100 node's taint is not tolerated
    assert placer.choose(1) is None
    assert placer.choose(2) == (1, (0,))


def test_an_unknown_policy_is_refused_naming_the_field():
    state, _ = two_nodes([])
    with pytest.raises(ConfigError, match="policy: 'spread' is not one of"):
        Placer(state, "spread")
