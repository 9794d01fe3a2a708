"""The scheduler's pure decisions on plain data: effective requests, messages, victims."""

from __future__ import annotations

from gpuops.simcluster.core.selectors import selector_from_spec
from gpuops.simcluster.scheduler.cycle import Bind, ClusterView, Preempt, schedule_one
from gpuops.simcluster.scheduler.filters import (
    UNRESOLVABLE,
    UNSCHEDULABLE,
    NodeInfo,
    PodInfo,
    filter_node,
    fit_error_message,
    num_feasible_nodes_to_find,
    pod_requests,
)
from gpuops.simcluster.scheduler.preemption import (
    Budget,
    Candidate,
    pick_one_node,
    select_victims_on_node,
    split_by_budget,
)


def container(name: str, restart: str | None = None, **requests: str) -> dict:
    c: dict = {"name": name, "image": "x", "resources": {"requests": {
        k.replace("_", "-").replace("nvidia-com-gpu", "nvidia.com/gpu"): v
        for k, v in requests.items()}}}
    if restart:
        c["restartPolicy"] = restart
    return c


def pod(name: str, *, priority: int = 0, gpus: int = 0, labels: dict | None = None,
        start: str = "2026-01-01T00:00:00Z", node: str | None = None, **spec: object) -> PodInfo:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    body = {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "labels": labels or {}, "creationTimestamp": start},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}],
                     "priority": priority, **({"nodeName": node} if node else {}), **spec},
            "status": {"startTime": start}}
    return PodInfo.from_pod(body)


def node(name: str, gpus: int = 8, **spec: object) -> NodeInfo:
    allocatable = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    info = NodeInfo(name)
    info.set_node({"metadata": {"name": name, "labels": {}}, "spec": spec,
                   "status": {"allocatable": allocatable,
                              "conditions": [{"type": "Ready", "status": "True"}]}})
    return info


def test_effective_requests_take_the_larger_of_init_and_app_containers_plus_overhead():
    spec = {"initContainers": [container("download", cpu="4", memory="1Gi")],
            "containers": [container("a", cpu="500m", memory="2Gi"),
                           container("b", cpu="1", nvidia_com_gpu="1")],
            "overhead": {"cpu": "250m"}}
    assert pod_requests(spec) == {"cpu": 4250, "memory": 2 * 2**30, "nvidia.com/gpu": 1}


def test_sidecars_add_to_app_containers_and_to_later_init_containers():
    spec = {"initContainers": [container("proxy", restart="Always", cpu="1"),
                               container("warmup", cpu="3")],
            "containers": [container("main", cpu="2")]}
    # app + sidecar = 3 cpu; warmup runs beside the sidecar = 4 cpu: the larger wins.
    assert pod_requests(spec) == {"cpu": 4000}


def test_requests_default_to_limits():
    spec = {"containers": [{"name": "m", "image": "x",
                            "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}]}
    assert pod_requests(spec) == {"cpu": 2000, "nvidia.com/gpu": 1}


def test_fit_error_sorts_reason_strings_as_kube_scheduler_does():
    statuses = [(UNRESOLVABLE, ("node(s) were unschedulable",))] * 12 + [
        (UNSCHEDULABLE, ("Insufficient cpu", "Insufficient nvidia.com/gpu"))] * 2
    assert fit_error_message(14, statuses, "preemption: x.") == (
        "0/14 nodes are available: 12 node(s) were unschedulable, 2 Insufficient cpu, "
        "2 Insufficient nvidia.com/gpu. preemption: x.")


def test_a_pod_larger_than_the_node_is_unresolvable_a_full_node_is_not():
    n = node("n", gpus=8)
    n.add_pod(pod("resident", gpus=6))
    assert filter_node(pod("p", gpus=4), n) == (UNSCHEDULABLE, ("Insufficient nvidia.com/gpu",))
    assert filter_node(pod("p", gpus=9), n) == (UNRESOLVABLE, ("Insufficient nvidia.com/gpu",))


def test_pods_nominated_with_higher_priority_keep_their_room():
    n = node("n", gpus=8)
    waiting = pod("waiting", priority=100, gpus=8)
    assert filter_node(pod("low", gpus=1), n, {waiting.key: waiting}) is not None
    assert filter_node(pod("higher", priority=200, gpus=1), n, {waiting.key: waiting}) is None


def test_large_clusters_filter_only_part_of_the_nodes():
    assert num_feasible_nodes_to_find(50) == 50
    assert num_feasible_nodes_to_find(1000) == 420  # 42 %
    assert num_feasible_nodes_to_find(5000) == 500  # 10 %
    assert num_feasible_nodes_to_find(50000) == 2500  # floor of 5 %


def test_victims_are_the_least_important_pods_and_pdb_violations_are_reprieved_first():
    n = node("n", gpus=8)
    for p in (pod("old", gpus=4, start="2026-01-01T00:00:00Z", labels={"app": "db"}),
              pod("new", gpus=4, start="2026-01-02T00:00:00Z"),
              pod("vip", priority=500, gpus=0)):
        n.add_pod(p)
    budget = Budget("ml", tuple(selector_from_spec({"matchLabels": {"app": "db"}})), 0)
    result = select_victims_on_node(pod("urgent", priority=100, gpus=4), n, None, [budget])
    assert isinstance(result, Candidate)
    assert [v.name for v in result.victims] == ["new"]  # "old" is protected by its budget
    assert result.pdb_violations == 0


def test_budgets_are_spent_one_pod_at_a_time():
    budget = Budget("ml", tuple(selector_from_spec({"matchLabels": {"app": "db"}})), 1)
    pods = [pod(f"db-{i}", labels={"app": "db"}) for i in range(3)]
    violating, fine = split_by_budget(pods, [budget])
    assert [p.name for p in fine] == ["db-0"]
    assert [p.name for p in violating] == ["db-1", "db-2"]


def test_pick_one_node_prefers_fewer_violations_then_lower_priorities_then_fewer_victims():
    low, mid = pod("low", priority=1), pod("mid", priority=5)
    assert pick_one_node([Candidate("a", (low,), 1), Candidate("b", (mid,), 0)]).node == "b"
    assert pick_one_node([Candidate("a", (mid,), 0), Candidate("b", (low, low), 0)]).node == "b"
    assert pick_one_node([Candidate("a", (low, low), 0), Candidate("b", (low,), 0)]).node == "b"


def test_schedule_one_binds_or_preempts_on_a_view():
    view = ClusterView()
    for name in ("n1", "n2"):
        view.set_node({"metadata": {"name": name}, "status": {
            "allocatable": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}]}})
    view.bind("n1", pod("filler-1", gpus=8))
    view.bind("n2", pod("filler-2", gpus=4, start="2026-01-03T00:00:00Z"))
    assert schedule_one(view, pod("fits", gpus=4)) == Bind("n2")
    # One victim either way: the node whose victim started last loses the least work.
    outcome = schedule_one(view, pod("urgent", priority=10, gpus=8))
    assert isinstance(outcome, Preempt) and outcome.node == "n2"
    assert [v.name for v in outcome.victims] == ["filler-2"]
