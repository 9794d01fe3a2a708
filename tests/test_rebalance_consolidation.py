"""Consolidation's choice on hand-made objects (pure): which GPU nodes go, where their pods
move, and why the others stay. Four l4 nodes (4 GPUs each) in one pool the capacity plan
holds at one node, so up to three may go; the end-to-end runs are in test_gpu_consolidate.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuops.tasks.rebalance.consolidation import PoolView, choose, spare_nodes
from gpuops.tasks.rebalance.from_kube import cluster_view

NOW = datetime(2026, 3, 15, 10, 30, tzinfo=UTC)


def node(name: str, gpus: int = 4, product: str = "NVIDIA-L4") -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "gpuops.io/pool": "l4"},
                         "creationTimestamp": f"2026-03-15T0{len(name) % 10}:00:00Z"},
            "spec": {}, "status": {"allocatable": {"cpu": "48", "memory": "192Gi",
                                                   "nvidia.com/gpu": str(gpus)},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, node_name: str | None, gpus: int = 0, *, owner: str | None = "ReplicaSet",
        labels=None, annotations=None, product: str | None = None, priority: int = 0) -> dict:
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}",
            "labels": labels or {"app": name}, "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": f"{name}-rs", "uid": f"rs-{name}",
                                    "controller": True}]
    spec: dict = {"priority": priority, "containers": [{"name": "c", "resources": {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def pdb(name: str, app: str, allowed: int) -> dict:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed}}


def decide(nodes: list[dict], pods: list[dict], pdbs: list[dict] = (), held: int = 1,
           idle_for: timedelta = timedelta(0)):
    view = cluster_view(nodes, pods, list(pdbs))
    pool = PoolView("l4", desired=len(nodes), floor=1, held=held, price_per_hour=4.6,
                    nodes=tuple(nodes))
    chosen, kept = choose([pool], pods, now=NOW, idle_for=idle_for, view=view)
    return {c.node: {m.pod: m.to_node for m in c.moves} for c in chosen}, \
        {k.node: k.why for k in kept}


def test_a_node_whose_gpu_pods_fit_on_a_node_that_stays_goes_and_says_where_they_move():
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("job-a", "a", 2, owner=None), pod("job-b", "b", 3, owner=None),
            pod("llama", "c", 2, product="NVIDIA-L4")]
    chosen, kept = decide(nodes, pods)
    assert chosen == {"c": {"default/llama": "a"}}  # b has 1 GPU left: only a holds it
    assert "default/job-a may not move: no controller would recreate it" in kept["a"]
    assert kept["a"].startswith("runs GPU pods (default/job-a)")


def test_placements_add_up_over_the_run_so_two_nodes_never_count_on_the_same_room():
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("job-a", "a", 2, owner=None), pod("llama-1", "b", 2), pod("llama-2", "c", 2)]
    chosen, kept = decide(nodes, pods)
    [(gone, moves)] = chosen.items()
    assert list(moves.values()) == ["a"]
    stays = ({"b", "c"} - {gone}).pop()
    # The node that stays can take nothing from the one that went: the room on a is taken,
    # and the node that went takes nothing.
    assert "fits on no node that stays" in kept[stays]


def test_a_node_that_takes_moved_pods_stays_in_the_same_run():
    nodes = [node("a"), node("b"), node("c"), node("d")]
    pods = [pod("job-a", "a", 4, owner=None), pod("one", "b", 1), pod("three", "c", 3),
            pod("job-d", "d", 4, owner=None)]
    chosen, kept = decide(nodes, pods)
    assert chosen == {"b": {"default/one": "c"}}
    assert kept["c"].endswith("takes pods moved from b in this run, so it stays")


def test_disruption_budgets_are_counted_over_every_node_the_run_removes():
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("job-a", "a", 0, owner=None),
            pod("web-1", "b", 1, labels={"app": "web"}),
            pod("web-2", "c", 1, labels={"app": "web"})]
    chosen, kept = decide(nodes, pods, [pdb("web", "web", 1)])
    assert len(chosen) == 1
    [other] = {"b", "c"} - set(chosen)
    assert "PodDisruptionBudget default/web allows 0 more disruption(s) in this run, the " \
        "drain needs 1" in kept[other]
    chosen, kept = decide(nodes, pods, [pdb("web", "web", 0)])
    assert chosen == {} and all("allows 0" in kept[n] for n in ("b", "c"))


def test_opt_outs_and_the_gpu_model_keep_a_node():
    nodes = [node("a"), node("b", product="NVIDIA-H100"), node("c"), node("d")]
    pods = [pod("job-a", "a", 4, owner=None), pod("job-c", "c", 4, owner=None),
            pod("pinned", "d", 1, annotations={"karpenter.sh/do-not-disrupt": "true"}),
            pod("l4-only", "d", 1, product="NVIDIA-L4")]
    chosen, kept = decide(nodes, pods, held=3)
    assert "default/pinned may not move: karpenter.sh/do-not-disrupt: true" in kept["d"]
    del pods[2]
    chosen, kept = decide(nodes, pods, held=2)  # b is an H100 node: l4-only may not go there
    assert chosen == {"b": {}}
    assert "default/l4-only fits on no node that stays" in kept["d"]


def test_a_node_a_pending_gpu_pod_would_land_on_stays_and_its_room_is_not_used():
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("job-b", "b", 4, owner=None), pod("llama", "c", 2),
            pod("waiting", None, 4, priority=100)]
    chosen, kept = decide(nodes, pods, held=0)
    # The empty node a is where the scheduler would put the pending pod: it is wanted, and
    # llama, which only a could take, fits nowhere once that room is spoken for.
    assert chosen == {}
    assert kept["a"] == "pending pod(s) default/waiting would be scheduled here"
    assert kept["c"].endswith("default/llama fits on no node that stays")


def test_the_idle_clock_runs_for_nodes_whose_gpu_pods_could_move_and_not_for_the_others():
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod("job-a", "a", 2, owner=None), pod("llama", "b", 2)]
    assert spare_nodes(cluster_view(nodes, pods), nodes, pods) == {"b", "c"}
    recent = {**nodes[1], "metadata": {**nodes[1]["metadata"], "annotations": {
        "gpuops.io/gpu-unused-since": (NOW - timedelta(minutes=5)).isoformat()}}}
    _, kept = decide([nodes[0], recent, nodes[2]], pods, idle_for=timedelta(minutes=30))
    assert kept["b"] == "spare for 300s, less than 1800s"
