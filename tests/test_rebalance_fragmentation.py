"""The rebalance measures on small clusters computed by hand: FGD fragmentation and stranded GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rebalance.fragmentation import (
    node_fragmentation,
    state_fragmentation,
    stranded_gpus,
    typical_shapes,
)
from gpuops.tasks.rebalance.model import Cluster, Node, Pod
from gpuops.tasks.rebalance.state import PackState

ANY = frozenset()


def one_node_state(gpu_free, cpu_free=8000, model="A"):
    state = PackState(node_names=["n"], cpu=np.array([cpu_free]), memory=np.array([10**6]),
                      gpus=np.array([len(gpu_free)]), model=np.array([0]), models=[model],
                      admit=np.ones((1, 1), bool), pod_cpu=np.zeros(0), pod_mem=np.zeros(0),
                      pod_num=np.zeros(0), pod_milli=np.zeros(0), pod_sig=np.zeros(0))
    state.gpu_free[0, :] = gpu_free
    return state


def shapes_of(*weighted):
    keys = [key for key, count in weighted for _ in range(count)]
    return typical_shapes(keys, threshold=1.0)


def test_a_fitting_shape_counts_only_the_devices_too_small_for_it_others_count_all_free_gpu():
    # devices free 1000, 500, 200, 0 (1700 milli); CPU free 8000
    shapes = shapes_of(((2000, 1, 500, ANY), 2),    # fits: 200 + 0 too small for it
                       ((4000, 2, 1000, ANY), 1),   # one whole device free, needs two: 1700
                       ((1000, 0, 0, ANY), 1))      # asks no GPU: all free GPU is fragment
    state = one_node_state([1000, 500, 200, 0])
    assert state_fragmentation(state, shapes)[0] == pytest.approx(0.5 * 200 + 0.25 * 1700
                                                                  + 0.25 * 1700)


def test_a_shape_short_of_cpu_or_of_its_gpu_model_counts_the_whole_free_gpu():
    state = one_node_state([1000, 500, 200, 0], cpu_free=1000)
    cpu_short = shapes_of(((2000, 1, 500, ANY), 1))
    assert state_fragmentation(state, cpu_short)[0] == pytest.approx(1700)
    state = one_node_state([1000, 500, 200, 0], model="A")
    other_model = shapes_of(((2000, 1, 500, frozenset({"B"})), 1))
    assert state_fragmentation(state, other_model)[0] == pytest.approx(1700)
    this_model = shapes_of(((2000, 1, 500, frozenset({"A"})), 1))
    assert state_fragmentation(state, this_model)[0] == pytest.approx(200)


def test_an_empty_node_that_every_gpu_shape_fits_has_no_fragmentation():
    shapes = shapes_of(((2000, 1, 500, ANY), 3), ((4000, 8, 1000, ANY), 1))
    frag = node_fragmentation(np.array([96000]), np.full((1, 8), 1000), np.array([0]), shapes,
                              shapes.access(["A"]))
    assert frag[0] == 0


def test_typical_shapes_keep_the_most_popular_until_the_threshold_and_renormalise():
    a, b, c = (1000, 1, 500, ANY), (2000, 1, 1000, ANY), (500, 0, 0, ANY)
    shapes = typical_shapes([a] * 5 + [b] * 3 + [c] * 2, threshold=0.7)
    assert list(zip(shapes.cpu, shapes.num, shapes.milli)) == [(1000, 1, 500), (2000, 1, 1000)]
    assert shapes.weight.tolist() == pytest.approx([5 / 8, 3 / 8])
    without_cpu = typical_shapes([a] * 5 + [c] * 6, include_cpu_only=False)
    assert without_cpu.num.tolist() == [1]


def test_stranded_gpus_are_the_free_gpus_of_nodes_no_pending_gpu_pod_fits():
    nodes = (Node("a", 32000, 10**5, gpus=2), Node("b", 32000, 10**5, gpus=2))
    running = (Pod("half", cpu_milli=1000, gpu_count=1, gpu_milli=500, node="b", gpu_ids=(0,)),)
    two_gpus = Pod("two", cpu_milli=1000, gpu_count=2)
    cpu_only = Pod("cpu", cpu_milli=1000)
    state, _ = PackState.from_cluster(Cluster(nodes, running, (two_gpus, cpu_only)))
    assert stranded_gpus(state, [1, 2]) == 1.5  # b's 1500 milli: the 2-GPU pod fits only a
    assert stranded_gpus(state, [2]) == 0.0  # only a CPU pod is pending
    assert stranded_gpus(state, []) == 0.0


def test_a_running_pod_on_a_device_the_node_does_not_have_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"pod 'default/p': gpu_ids: device 2"):
        Cluster((Node("a", 1000, 1000, gpus=2),),
                (Pod("p", gpu_count=1, node="a", gpu_ids=(2,)),))
    with pytest.raises(ConfigError, match=r"gpu_milli: is per GPU"):
        Pod("p", gpu_count=1, gpu_milli=1500)


def test_cluster_measures_give_the_sensor_stranded_gpus_fragmentation_and_pending_shapes():
    from gpuops.tasks.rebalance.fragmentation import cluster_measures

    nodes = (Node("a", 32000, 10**5, gpus=2), Node("b", 32000, 10**5, gpus=2))
    running = (Pod("r", cpu_milli=1000, gpu_count=1, node="a", gpu_ids=(0,)),
               Pod("s", cpu_milli=1000, gpu_count=1, node="b", gpu_ids=(1,)))
    pending = (Pod("w1", cpu_milli=2000, gpu_count=2), Pod("w2", cpu_milli=2000, gpu_count=2))
    shapes = typical_shapes([(2000, 2, 1000, ANY)])
    m = cluster_measures(Cluster(nodes, running, pending), shapes)
    assert m.stranded_gpus == 2.0  # one free GPU on each node, the 2-GPU pods fit neither
    assert m.fragmentation_gpus == 2.0 and m.fragmentation_by_node == {"a": 1.0, "b": 1.0}
    assert m.free_gpus_by_node == {"a": 1.0, "b": 1.0}
    assert m.pending_gpu_pods_by_shape == {"2x1000m cpu=2000m": 2}
