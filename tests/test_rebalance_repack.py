"""The rebalance planner on small clusters whose minimal repack is known by hand, each rule on
its own, and its two methods (exact MILP, heuristic) against each other."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuops.common.annotations import (
    CA_SAFE_TO_EVICT,
    DO_NOT_MOVE,
    KARPENTER_DO_NOT_DISRUPT,
    MOVE_COST,
)
from gpuops.common.errors import ConfigError
from gpuops.tasks.rebalance.model import Cluster, Node, Pdb, Pod, Taint, Toleration
from gpuops.tasks.rebalance.repack import (
    CANNOT_HELP,
    CAPACITY,
    NO_MOVES_NEEDED,
    OPTIMAL,
    TIME_LIMIT,
    RepackOptions,
    plan_repack,
)

METHODS = ("milp", "heuristic")


def applied(cluster: Cluster, plan) -> Cluster:
    """The cluster after the plan; building it re-checks every device, and CPU is checked."""
    by_key = {p.key: p for p in cluster.running + cluster.pending}
    moved = {m.pod: m for m in plan.moves}
    landed = {landing.pod: landing for landing in plan.landings}
    running = []
    for pod in cluster.running:
        m = moved.get(pod.key)
        running.append(pod if m is None else replace(pod, node=m.to_node, gpu_ids=m.gpu_ids))
    for key, landing in landed.items():
        running.append(replace(by_key[key], node=landing.node, gpu_ids=landing.gpu_ids))
    after = Cluster(cluster.nodes, tuple(running), (), cluster.pdbs)
    for node in cluster.nodes:
        on = [p for p in running if p.node == node.name]
        assert sum(p.cpu_milli for p in on) <= node.cpu_milli
        assert sum(p.memory_mib for p in on) <= node.memory_mib
    return after


def gpu_pod(name, node=None, gpus=1, devices=(), **kw):
    return Pod(name, cpu_milli=1000, memory_mib=1000, gpu_count=gpus, node=node,
               gpu_ids=tuple(devices), **kw)


def two_by_two(s1=None, s2=None, pending=None, nodes=None, pdbs=()):
    """Two 2-GPU nodes, one 1-GPU pod on each; a 2-GPU pod waits: one move frees a node."""
    nodes = nodes or (Node("a", 16000, 64000, gpus=2, gpu_model="T4"),
                      Node("b", 16000, 64000, gpus=2, gpu_model="T4"))
    s1 = s1 or gpu_pod("s1", "a", devices=(0,), move_cost=5)
    s2 = s2 or gpu_pod("s2", "b", devices=(0,))
    pending = pending or gpu_pod("big", gpus=2)
    return Cluster(nodes, (s1, s2), (pending,), pdbs)


@pytest.mark.parametrize("method", METHODS)
def test_the_cheapest_single_move_frees_a_whole_node_for_the_pending_pod(method):
    cluster = two_by_two()
    plan = plan_repack(cluster, RepackOptions(method=method))
    assert [(m.pod, m.from_node, m.to_node) for m in plan.moves] == [("default/s2", "b", "a")]
    assert [(x.pod, x.node, x.gpu_ids) for x in plan.landings] == [("default/big", "b", (0, 1))]
    assert plan.cost == 1 and plan.unplaced == () and plan.gpus_placed == 2
    assert plan.stranded_gpus_before == 2 and plan.stranded_gpus_after == 0
    applied(cluster, plan)


@pytest.mark.parametrize("method", METHODS)
def test_a_four_gpu_pod_clears_the_node_with_one_pod_not_the_one_with_two(method):
    nodes = (Node("a", 32000, 64000, gpus=4), Node("b", 32000, 64000, gpus=4))
    running = (gpu_pod("x1", "a", devices=(0,)), gpu_pod("x2", "a", devices=(1,)),
               gpu_pod("y1", "b", devices=(2,)))
    cluster = Cluster(nodes, running, (gpu_pod("four", gpus=4),))
    plan = plan_repack(cluster, RepackOptions(method=method))
    assert [(m.pod, m.to_node) for m in plan.moves] == [("default/y1", "a")]
    assert plan.landings[0].node == "b" and plan.landings[0].gpu_ids == (0, 1, 2, 3)
    applied(cluster, plan)


@pytest.mark.parametrize("method", METHODS)
def test_shared_gpu_fractions_are_consolidated_onto_one_device(method):
    nodes = (Node("a", 16000, 64000, gpus=1), Node("b", 16000, 64000, gpus=1))
    running = (Pod("f1", cpu_milli=1000, gpu_count=1, gpu_milli=300, node="a", gpu_ids=(0,)),
               Pod("f2", cpu_milli=1000, gpu_count=1, gpu_milli=300, node="b", gpu_ids=(0,)))
    pending = Pod("f800", cpu_milli=1000, gpu_count=1, gpu_milli=800)
    cluster = Cluster(nodes, running, (pending,))
    plan = plan_repack(cluster, RepackOptions(method=method))
    assert len(plan.moves) == 1 and plan.landings[0].node == plan.moves[0].from_node
    where = {p.name: p.node for p in applied(cluster, plan).running}
    assert where["f1"] == where["f2"] != where["f800"]  # the two 300s share one device


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("blocked", [
    {"pdb": "web"},
    {"priority": 10},
    {"annotations": {DO_NOT_MOVE: "true"}},
    {"annotations": {KARPENTER_DO_NOT_DISRUPT: "true"}},
    {"annotations": {CA_SAFE_TO_EVICT: "false"}},
    {"owner_kind": None},
    {"owner_kind": "DaemonSet"},
    {"local_storage": True},
    {"node_selector": {"kubernetes.io/hostname": "b"}},
], ids=["pdb", "priority", "do-not-move", "karpenter", "safe-to-evict", "no-controller",
        "daemonset", "local-storage", "selector"])
def test_each_rule_alone_keeps_the_cheap_pod_in_place_and_the_dear_one_moves(method, blocked):
    """s2 is the cheap move; with the rule it may not move (or not go to a): s1 moves."""
    nodes = (Node("a", 16000, 64000, gpus=2, labels={"kubernetes.io/hostname": "a"}),
             Node("b", 16000, 64000, gpus=2, labels={"kubernetes.io/hostname": "b"}))
    s2 = gpu_pod("s2", "b", devices=(0,), **blocked)
    cluster = two_by_two(s2=s2, pending=gpu_pod("big", gpus=2, priority=5), nodes=nodes,
                         pdbs=(Pdb("web", 0),))
    plan = plan_repack(cluster, RepackOptions(method=method))
    assert [(m.pod, m.to_node) for m in plan.moves] == [("default/s1", "b")]
    assert plan.landings[0].node == "a" and plan.cost == 5
    applied(cluster, plan)


@pytest.mark.parametrize("method", METHODS)
def test_a_high_priority_pending_pod_never_licenses_moving_a_pod_for_a_low_priority_one(method):
    nodes = (Node("a", 16000, 64000, gpus=2), Node("b", 16000, 64000, gpus=2),
             Node("c", 16000, 64000, gpus=1))
    q = gpu_pod("q", "a", devices=(0,), priority=5)  # the cheap move, but above "low"
    r = gpu_pod("r", "b", devices=(0,), priority=0, move_cost=5)
    pending = (gpu_pod("urgent", priority=10), gpu_pod("low", gpus=2, priority=0))
    cluster = Cluster(nodes, (q, r), pending)
    plan = plan_repack(cluster, RepackOptions(method=method))
    assert [m.pod for m in plan.moves] == ["default/r"]
    assert {x.pod: x.node for x in plan.landings}["default/low"] == "b"
    assert len(plan.landings) == 2
    applied(cluster, plan)


@pytest.mark.parametrize("method", METHODS)
def test_local_storage_may_move_when_allowed(method):
    cluster = two_by_two(s2=gpu_pod("s2", "b", devices=(0,), local_storage=True))
    plan = plan_repack(cluster, RepackOptions(method=method, allow_local_storage=True))
    assert [m.pod for m in plan.moves] == ["default/s2"]


@pytest.mark.parametrize("method", METHODS)
def test_a_pdb_with_one_disruption_left_lets_one_of_its_pods_move_not_two(method):
    nodes = (Node("a", 32000, 64000, gpus=4), Node("b", 32000, 64000, gpus=4))
    running = (gpu_pod("w1", "a", devices=(0,), pdb="web"),
               gpu_pod("w2", "a", devices=(1,), pdb="web"),
               gpu_pod("w3", "b", devices=(0,), pdb="web"),
               gpu_pod("w4", "b", devices=(1,), pdb="web"))
    cluster = Cluster(nodes, running, (gpu_pod("four", gpus=4),), (Pdb("web", 1),))
    plan = plan_repack(cluster, RepackOptions(method=method))
    assert plan.moves == () and plan.status == CANNOT_HELP and plan.reason
    roomy = Cluster(nodes, running, (gpu_pod("three", gpus=3),), (Pdb("web", 1),))
    plan = plan_repack(roomy, RepackOptions(method=method))
    assert len(plan.moves) == 1 and plan.landings
    applied(roomy, plan)


@pytest.mark.parametrize("method", METHODS)
def test_taints_and_gpu_models_bind_moved_and_pending_pods(method):
    nodes = (Node("a", 16000, 64000, gpus=2, gpu_model="T4", taints=(Taint("team", "x"),)),
             Node("b", 16000, 64000, gpus=2, gpu_model="A100"))
    # s2 may not go to a (taint); s1 may go to b (any model): s1 moves, big lands on a only
    # because it tolerates the taint and allows T4
    s1 = gpu_pod("s1", "a", devices=(0,), move_cost=5)
    s2 = gpu_pod("s2", "b", devices=(0,))
    big = gpu_pod("big", gpus=2, tolerations=(Toleration("team", "Equal", "x"),),
                  gpu_models=frozenset({"T4"}))
    cluster = Cluster(nodes, (s1, s2), (big,))
    plan = plan_repack(cluster, RepackOptions(method=method))
    assert [(m.pod, m.to_node) for m in plan.moves] == [("default/s1", "b")]
    assert plan.landings[0].node == "a"
    a100_only = replace(big, gpu_models=frozenset({"A100"}))
    plan = plan_repack(Cluster(nodes, (s1, s2), (a100_only,)), RepackOptions(method=method))
    assert plan.moves == () and plan.status == CANNOT_HELP  # s2 cannot go to the tainted a


@pytest.mark.parametrize("method", METHODS)
def test_a_budget_of_zero_moves_or_nothing_movable_says_why(method):
    plan = plan_repack(two_by_two(), RepackOptions(method=method, max_moves=0))
    assert plan.status == CANNOT_HELP and plan.moves == () and "budget" in plan.reason
    frozen = two_by_two(s1=gpu_pod("s1", "a", devices=(0,), owner_kind=None),
                        s2=gpu_pod("s2", "b", devices=(0,), owner_kind=None))
    plan = plan_repack(frozen, RepackOptions(method=method))
    assert plan.status == CANNOT_HELP and plan.reason == "no candidate may move"
    assert plan.unmovable == {"default/s1": "no controller would recreate it",
                              "default/s2": "no controller would recreate it"}


def test_a_pending_shape_no_node_could_hold_even_empty_is_a_capacity_problem():
    plan = plan_repack(two_by_two(pending=gpu_pod("eight", gpus=8)))
    assert plan.status == CAPACITY and "capacity" in plan.reason and plan.moves == ()


def test_pending_pods_that_fit_as_the_cluster_is_need_no_move():
    plan = plan_repack(two_by_two(pending=gpu_pod("one", gpus=1)),
                       RepackOptions(method="heuristic"))
    assert plan.status == NO_MOVES_NEEDED and plan.moves == () and len(plan.landings) == 1


def test_the_milp_and_the_heuristic_agree_on_a_small_fragmented_cluster():
    nodes = tuple(Node(f"n{i}", 32000, 128000, gpus=4) for i in range(4))
    running = (gpu_pod("a0", "n0", devices=(0,)), gpu_pod("a1", "n0", devices=(1,)),
               gpu_pod("b0", "n1", devices=(0,)), gpu_pod("c0", "n2", devices=(3,)),
               gpu_pod("c1", "n2", gpus=2, devices=(0, 1)), gpu_pod("d0", "n3", devices=(2,)))
    pending = (gpu_pod("four-1", gpus=4), gpu_pod("four-2", gpus=4))
    cluster = Cluster(nodes, running, pending)
    exact = plan_repack(cluster, RepackOptions(method="milp"))
    greedy = plan_repack(cluster, RepackOptions(method="heuristic"))
    assert exact.status == OPTIMAL
    assert len(exact.landings) == len(greedy.landings) == 2
    assert exact.cost == greedy.cost == 2  # b0 and d0 move; n1 and n3 take the 4-GPU pods
    applied(cluster, exact)
    applied(cluster, greedy)


def test_a_time_bounded_run_returns_its_best_plan_so_far_with_its_status():
    nodes = tuple(Node(f"n{i:03}", 64000, 256000, gpus=8) for i in range(120))
    running = tuple(gpu_pod(f"p{i:03}-{g}", f"n{i:03}", devices=(g,))
                    for i in range(120) for g in range(0, 8, 3))
    pending = tuple(gpu_pod(f"eight-{i}", gpus=8) for i in range(60))
    cluster = Cluster(nodes, running, pending)
    plan = plan_repack(cluster, RepackOptions(method="heuristic", time_limit_s=0.05))
    assert plan.status == TIME_LIMIT and "time limit" in plan.reason
    assert len(plan.unplaced) + len(plan.landings) == 60
    applied(cluster, plan)


def test_a_move_cost_annotation_that_is_not_a_number_is_refused_naming_it():
    s2 = gpu_pod("s2", "b", devices=(0,), annotations={MOVE_COST: "cheap"})
    with pytest.raises(ConfigError, match=r"pod 'default/s2': annotation gpuops.io/move-cost"):
        plan_repack(two_by_two(s2=s2))
    s2 = gpu_pod("s2", "b", devices=(0,), annotations={MOVE_COST: "0.5"})
    assert plan_repack(two_by_two(s2=s2)).cost == 0.5
