"""The rebalance's pure parts on hand-made objects: Kubernetes dicts into the planner's model,
judging progress while a plan is carried out, and finding what earlier runs left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuops.common.annotations import (
    DO_NOT_MOVE,
    GPU_INDEX,
    REBALANCE_EXPIRES,
    REBALANCE_NOMINATED,
    REBALANCE_RUN,
    REBALANCE_TAINT,
)
from gpuops.tasks.rebalance.execution import LivePod, PodStep, Steps, check_progress
from gpuops.tasks.rebalance.from_kube import ConversionPolicy, cluster_view
from gpuops.tasks.rebalance.leftovers import find_leftovers
from gpuops.tasks.rebalance.repack import RepackOptions, plan_repack


def node(name: str, gpus: int = 8, **spec) -> dict:
    alloc = {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": spec, "status": {"allocatable": alloc,
                                     "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, *, node_name: str | None = None, gpus: int = 0, milli: int = 0,
        owner: str | None = "ReplicaSet", index: str | None = None, labels=None,
        annotations=None) -> dict:
    limits = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if milli:
        limits["gpuops.io/gpu-milli"] = str(milli)
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}",
            "labels": labels or {}, "annotations": dict(annotations or {})}
    if index is not None:
        meta["annotations"][GPU_INDEX] = index
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": f"{name}-owner", "controller": True}]
    spec = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def test_kube_objects_become_the_model_with_devices_shares_and_the_tightest_budget():
    nodes = [node("a"), node("b")]
    pods = [pod("whole", node_name="a", gpus=2, index="3,4", labels={"app": "w"}),
            pod("shared", node_name="a", milli=500, index="0"),
            pod("unrecorded", node_name="b", gpus=3),  # no scheduler record: lowest free
            pod("bare", node_name="b", gpus=1, owner=None, index="6"),
            pod("optout", node_name="b", gpus=1, index="7",
                annotations={"example.com/keep": "true"}),
            pod("waiting", gpus=8, owner="Job"),
            pod("cpu-only-waiting")]
    pdbs = [{"metadata": {"name": n, "namespace": "default"},
             "spec": {"selector": {"matchLabels": {"app": "w"}}},
             "status": {"disruptionsAllowed": allowed}} for n, allowed in (("loose", 3),
                                                                          ("tight", 1))]
    view = cluster_view(nodes, pods, pdbs, policy=ConversionPolicy(
        opt_out_annotation="example.com/keep", move_cost_by_owner_kind={"Job": 7.0}))
    running = {p.key: p for p in view.cluster.running}
    assert running["default/whole"].gpu_ids == (3, 4)
    assert running["default/whole"].pdb == "default/tight"
    assert (running["default/shared"].gpu_count, running["default/shared"].gpu_milli) == (1, 500)
    assert running["default/unrecorded"].gpu_ids == (0, 1, 2)
    assert running["default/bare"].owner_kind is None
    assert running["default/optout"].annotations[DO_NOT_MOVE] == "true"
    [waiting] = view.cluster.pending  # the CPU-only pending pod is no GPU repack's concern
    assert (waiting.key, waiting.gpu_count, waiting.move_cost) == ("default/waiting", 8, 7.0)
    assert view.pods["default/waiting"].uid == "uid-waiting"


def test_a_bare_pod_blocks_the_only_repack_and_the_planner_says_why():
    view = cluster_view([node("a"), node("b")], [
        pod("bare-a", node_name="a", gpus=5, owner=None),
        pod("bare-b", node_name="b", gpus=3, owner=None), pod("big", gpus=8)])
    plan = plan_repack(view.cluster, RepackOptions(time_limit_s=5))
    assert not plan.moves
    assert plan.reason == "no candidate may move"


STEPS = Steps(taint_nodes=("a",), land=(PodStep("default/big", "uid-big", "a"),),
              evict=(PodStep("default/small", "uid-small", "a", "b", "ReplicaSet/default/rs"),),
              nodes=("a", "b"))
BEFORE = [LivePod("default/big", "uid-big", None, "Job/default/big", 8000),
          LivePod("default/small", "uid-small", "a", "ReplicaSet/default/rs", 3000)]


def test_progress_is_done_when_the_pending_pod_lands_as_planned_and_the_replacement_elsewhere():
    now = [LivePod("default/big", "uid-big", "a", "Job/default/big", 8000),
           LivePod("default/small-2", "uid-new", "b", "ReplicaSet/default/rs", 3000)]
    progress = check_progress(STEPS, BEFORE, now)
    assert progress.done and not progress.diverged
    assert progress.replaced == (("default/small", "default/small-2", "b"),)


def test_progress_waits_while_the_evicted_pod_terminates_and_its_replacement_is_pending():
    now = [BEFORE[0], LivePod("default/small", "uid-small", "a", "ReplicaSet/default/rs", 3000,
                              terminating=True),
           LivePod("default/small-2", "uid-new", None, "ReplicaSet/default/rs", 3000)]
    progress = check_progress(STEPS, BEFORE, now)
    assert not progress.done and not progress.diverged
    assert any("default/small-2 pending" in w for w in progress.waiting)


def test_a_new_pod_on_the_freed_node_is_divergence():
    now = [BEFORE[0], LivePod("default/intruder", "uid-x", "a", "", 2000),
           LivePod("default/small-2", "uid-new", "b", "ReplicaSet/default/rs", 3000)]
    progress = check_progress(STEPS, BEFORE, now)
    assert progress.diverged == (("a new pod took the space on node a planned for default/big: "
                                 "default/intruder"),)


def test_a_replacement_back_on_its_node_or_a_pending_pod_elsewhere_is_divergence():
    now = [LivePod("default/big", "uid-big", "c", "Job/default/big", 8000),
           LivePod("default/small-2", "uid-new", "a", "ReplicaSet/default/rs", 3000)]
    progress = check_progress(STEPS, BEFORE, now)
    assert "pod default/big was scheduled on node c, not on a as planned" in progress.diverged
    assert any("scheduled back on node a" in d for d in progress.diverged)


def test_leftovers_are_grouped_by_run_with_their_latest_expiry():
    later = datetime.now(UTC) + timedelta(minutes=5)
    stamp = later.strftime("%Y-%m-%dT%H:%M:%SZ")
    nodes = [node("a", taints=[{"key": REBALANCE_TAINT, "value": "run-1",
                                "effect": "NoSchedule"}]),
             node("b", taints=[{"key": "other", "value": "x", "effect": "NoSchedule"}])]
    nodes[0]["metadata"]["annotations"] = {REBALANCE_RUN: "run-1", REBALANCE_EXPIRES: stamp}
    pods = [pod("big", annotations={REBALANCE_RUN: "run-1", REBALANCE_NOMINATED: "a",
                                    REBALANCE_EXPIRES: stamp}),
            pod("other", annotations={REBALANCE_RUN: "run-2"})]
    found = find_leftovers(nodes, pods)
    assert sorted(found) == ["run-1", "run-2"]
    assert found["run-1"].nodes == ["a"]
    assert [(p.key, p.nominated_to) for p in found["run-1"].pods] == [("default/big", "a")]
    assert not found["run-1"].expired(datetime.now(UTC))
    assert found["run-1"].expired(later + timedelta(seconds=1))
    assert found["run-2"].expires is None and not found["run-2"].expired(later)
