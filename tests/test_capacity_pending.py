"""Which pool capacity raises for Pending GPU pods that fit no node (pure): the pool whose
new nodes would take them, the nodes they need packed, nodes already coming, limits."""

from __future__ import annotations

import pytest

from gpuops.common.errors import ConfigError
from gpuops.flows.capacity_for_pending import parse_pods
from gpuops.tasks.capacity.pending import pending_pod, plan_raises, pool_offer

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(pool: str, gpus: int, *, ready: bool = True, taints=(), product: str = "") -> dict:
    labels = {"gpuops.io/pool": pool, **({"nvidia.com/gpu.product": product} if product
                                          else {})}
    return {"metadata": {"name": f"{pool}-node", "labels": labels},
            "spec": {"taints": list(taints)},
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


def offer(name: str, gpus: int, price: float, *, nodes=(), desired: int | None = None,
          max_size: int = 4, product: str = "", quota: int | None = None):
    return pool_offer(name=name, gpus_per_node=gpus, gpu_product=product,
                      instance_type=f"{name}.xl", selector=f"gpuops.io/pool={name}",
                      price_per_hour=price, desired=len(nodes) if desired is None else desired,
                      max_size=max_size, nodes=list(nodes), quota_gpus_left=quota)


def pod(name: str, gpus: int, *, selector=None, tolerations=(), milli: int = 0,
        node_name: str | None = None) -> dict:
    limits = {"gpuops.io/gpu-milli": str(milli)} if milli else {"nvidia.com/gpu": str(gpus)}
    spec = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "8", "memory": "64Gi"}, "limits": limits}}],
        "nodeSelector": selector or {}, "tolerations": list(tolerations)}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec,
            "status": {"phase": "Pending"}}


def pending(*pods: dict) -> list:
    return [pending_pod(p) for p in pods]


def test_the_cheapest_pool_per_gpu_whose_new_nodes_take_the_pods_is_raised_by_the_nodes_needed():
    offers = [offer("h100", 8, 55.0, nodes=[node("h100", 8, taints=[TAINT])]),
              offer("a100", 8, 22.0), offer("a10", 8, 30.0), offer("l4", 4, 4.6)]
    raises, unserved = plan_raises(pending(pod("train", 8), pod("eval-1", 4),
                                           pod("eval-2", 4), pod("eval-3", 4)), offers)
    # h100 is tainted and l4 too small for train; a100 is cheaper per GPU than a10. The
    # 4-GPU pods go to l4, cheaper still per GPU: one node each.
    by_pool = {r.pool: r for r in raises}
    assert set(by_pool) == {"a100", "l4"} and unserved == {}
    assert (by_pool["a100"].pods, by_pool["a100"].target) == (("default/train",), 1)
    assert (by_pool["l4"].current, by_pool["l4"].target) == (0, 3)
    assert sum(r.cost_change_per_hour for r in raises) == pytest.approx(22.0 + 3 * 4.6)
    # Without l4, two 4-GPU pods share one a100 node: two nodes for train and two evals.
    [r], _ = plan_raises(pending(pod("train", 8), pod("eval-1", 4), pod("eval-2", 4)),
                         offers[:3])
    assert (r.pool, r.current, r.target, r.nodes_for_pods) == ("a100", 0, 2, 2)


def test_a_pool_without_nodes_is_known_by_its_configuration_and_an_existing_node_by_its_labels():
    offers = [offer("h100", 8, 55.0, product="NVIDIA-H100"),
              offer("a100", 8, 22.0, nodes=[node("a100", 8, product="NVIDIA-A100")])]
    raises, _ = plan_raises(pending(pod("h", 8, selector={
        "nvidia.com/gpu.product": "NVIDIA-H100"})), offers)
    assert [(r.pool, r.target) for r in raises] == [("h100", 1)]
    raises, unserved = plan_raises(pending(pod("h", 8, selector={
        "nvidia.com/gpu.product": "NVIDIA-V100"})), offers)
    assert raises == []
    assert "a100: node selector nvidia.com/gpu.product=NVIDIA-V100 does not match" in \
        unserved["default/h"]
    tolerant = pod("t", 8, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    tainted = [offer("h100", 8, 5.0, nodes=[node("h100", 8, taints=[TAINT])])]
    assert plan_raises(pending(tolerant), tainted)[0][0].pool == "h100"
    assert "taint nvidia.com/gpu=present:NoSchedule is not tolerated" in \
        plan_raises(pending(pod("p", 8)), tainted)[1]["default/p"]


def test_nodes_already_requested_count_so_a_repeated_run_raises_nothing_more():
    joining = node("a100", 0, ready=False, taints=[
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    booting = offer("a100", 8, 22.0, nodes=[joining], desired=1)
    [r], unserved = plan_raises(pending(pod("train", 8)), [booting])
    assert (r.current, r.target, r.coming) == (1, 1, 1) and r.change == 0
    assert "1 node(s) already requested, not Ready yet" in r.notes and unserved == {}


def test_the_pool_maximum_and_the_gpu_quota_clip_the_raise_and_name_the_pods_left():
    raises, unserved = plan_raises(pending(pod("a", 8), pod("b", 8), pod("c", 8)),
                                   [offer("a100", 8, 22.0, max_size=2)])
    assert [(r.target, r.change) for r in raises] == [(2, 2)]
    assert list(unserved.values()) == ["pool a100 is at its limit"]
    raises, unserved = plan_raises(pending(pod("a", 8), pod("b", 8)),
                                   [offer("h100", 8, 55.0, quota=8)])
    assert raises[0].target == 1 and "the GPU quota leaves room for 1 more node(s)" in \
        raises[0].notes and len(unserved) == 1


def test_only_pending_gpu_pods_count_and_a_shared_gpu_pod_needs_one_gpu():
    assert pending_pod(pod("bound", 8, node_name="n")) is None
    assert pending_pod(pod("cpu", 0)) is None
    shared = pending_pod(pod("shared", 0, milli=500))
    assert shared is not None and shared.gpus == 1 and shared.cpu_milli == 8000


def test_bad_pod_names_are_refused_naming_the_entry():
    assert parse_pods(["default/a", "ns/b"]) == [("default", "a"), ("ns", "b")]
    with pytest.raises(ConfigError, match=r"pods\[1\]"):
        parse_pods(["default/a", "no-namespace"])
