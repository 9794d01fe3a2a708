"""A pool served by a LeaderWorkerSet or routed by several HTTPRoutes, in the rollout's pure
logic: a group's GPUs and room, the new version derived as a LeaderWorkerSet, a group as one
pool member Ready only as a whole, the record naming the kind; the record several routes
resume from, and routes that disagree. Plain data in, plain data out."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime

import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.derive import derive
from gpuops.tasks.rollout.objects import HTTPRoute, parse_pool, parse_route, pool_view
from gpuops.tasks.rollout.params import VersionChange
from gpuops.tasks.rollout.routes import check_routes_agree, routes_record
from gpuops.tasks.rollout.state import RolloutRecord, read_record, record_annotations
from gpuops.tasks.rollout.workloads import gpus_per_replica, room_for_replicas

P = "leaderworkerset.sigs.k8s.io/"
POOL = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "big", "namespace": "inference"},
        "spec": {"selector": {"matchLabels": {"app": "big", "role": "leader"}},
                 "targetPorts": [{"number": 8000}]}}


def container(args: list[str], gpus: int = 8) -> dict:
    return {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "args": args,
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}


LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
       "metadata": {"name": "big", "namespace": "inference"},
       "spec": {"replicas": 2, "leaderWorkerTemplate": {
           "size": 4,
           "leaderTemplate": {"metadata": {"labels": {"app": "big", "role": "leader"}},
                              "spec": {"containers": [container(
                                  ["vllm", "serve", "meta-llama/Llama-3.1-405B",
                                   "--tensor-parallel-size", "8",
                                   "--pipeline-parallel-size", "4"])]}},
           "workerTemplate": {"metadata": {"labels": {"app": "big", "role": "worker"}},
                              "spec": {"containers": [{
                                  **container([]), "command": ["ray", "start", "--block",
                                                               "--address=$(LWS_LEADER_ADDRESS):6380"]}]}}}}}


def node(name: str, gpus: int) -> dict:
    return {"metadata": {"name": name}, "status": {
        "allocatable": {"nvidia.com/gpu": str(gpus)},
        "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_group_needs_its_leaders_and_workers_gpus_and_fits_only_whole():
    assert gpus_per_replica(LWS) == 32  # 4 pods x 8 GPUs
    nodes = [node(f"n{i}", 8) for i in range(6)]
    room = room_for_replicas(LWS, nodes, [])
    assert (room.fits, room.free_gpus) == (1, 48)  # 6 pods fit: one group of 4, not 1.5


def test_the_new_version_of_a_leaderworkerset_is_a_leaderworkerset_with_both_templates_changed():
    new = derive(pool=parse_pool(POOL), pool_obj=POOL, deployment=LWS,
                 change=VersionChange(image="vllm/vllm-openai:v0.12.0",
                                      args=("--max-num-seqs=128",)), run_id="run-1")
    body = new.deployment
    assert body["kind"] == "LeaderWorkerSet" and new.workload_kind == "LeaderWorkerSet"
    assert "selector" not in body["spec"]  # the lws controller selects by its own label
    assert (new.replicas, new.gpus_per_replica, new.group_size) == (2, 32, 4)
    lwt = body["spec"]["leaderWorkerTemplate"]
    leader, worker = lwt["leaderTemplate"], lwt["workerTemplate"]
    assert leader["metadata"]["labels"] == {"app": new.pool_name, "role": "leader"}
    assert worker["metadata"]["labels"]["app"] == new.pool_name
    [lc], [wc] = leader["spec"]["containers"], worker["spec"]["containers"]
    assert lc["image"] == wc["image"] == "vllm/vllm-openai:v0.12.0"
    assert lc["args"][-2:] == ["--max-num-seqs", "128"]
    # The workers join the leader's engine (ray): they get the image, not vLLM's flags.
    assert wc["command"][:2] == ["ray", "start"] and wc.get("args") == []
    assert new.pool["spec"]["selector"]["matchLabels"] == {"app": new.pool_name,
                                                           "role": "leader"}


def test_a_pool_selecting_only_by_the_lws_controllers_labels_is_refused():
    pool = copy.deepcopy(POOL)
    pool["spec"]["selector"]["matchLabels"] = {P + "name": "big", P + "worker-index": "0"}
    with pytest.raises(ConfigError, match="labels the LeaderWorkerSet controller sets"):
        derive(pool=parse_pool(pool), pool_obj=pool, deployment=LWS,
               change=VersionChange(image="vllm/vllm-openai:v0.12.0"), run_id="run-1")


def pod(name: str, group: str, worker: str, ready: bool, labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "inference", "labels": {
                **(labels or {"app": "big"}), P + "name": "big", P + "group-index": group,
                P + "worker-index": worker}},
            "spec": {"containers": [{"image": "vllm"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_a_group_is_one_pool_member_ready_only_when_every_pod_of_it_is():
    pool = parse_pool({**POOL, "spec": {**POOL["spec"],
                                        "selector": {"matchLabels": {"app": "big"}}}})
    group0 = [pod("big-0", "0", "0", True)] + [pod(f"big-0-{w}", "0", str(w), True)
                                                for w in (1, 2, 3)]
    group1 = [pod("big-1", "1", "0", True), pod("big-1-1", "1", "1", True),
              pod("big-1-2", "1", "2", False)]  # one worker not Ready, one not made yet
    pods = group0 + group1
    view = pool_view(pool, [LWS], pods, [], lws_pods=pods)
    assert [(p.name, p.ready) for p in view.pods] == [("big-0", True), ("big-1", False)]
    assert view.replicas_present == 2
    # Leader gone, a worker still terminating: the group still holds GPUs.
    left = pool_view(pool, [LWS], group0, [], lws_pods=group0 + [group1[2]])
    assert left.replicas_present == 2


def test_the_record_names_a_leaderworkerset_and_reads_back_the_same():
    record = RolloutRecord("run-1", "big", "big-1a2b3c", "big", "big-1a2b3c", None, "1a2b3c",
                           "blue-green", "shifting", 5, 2, datetime(2026, 1, 1, tzinfo=UTC),
                           workload="LeaderWorkerSet")
    back = read_record({k: v for k, v in record_annotations(record).items() if v},
                       "HTTPRoute inference/big")
    assert back == record
    plain = RolloutRecord("run-1", "a", "b", "a", "b", None, "x", "blue-green", "shifting", 5,
                          2, datetime(2026, 1, 1, tzinfo=UTC))
    assert "workload" not in plain.for_storage()  # a Deployment's record is as before


# --- several routes (`routes`) --------------------------------------------------------------------

def _route(name: str, backends: list[dict], record: RolloutRecord | None = None) -> HTTPRoute:
    annotations = {k: v for k, v in record_annotations(record).items() if v} if record else {}
    return parse_route({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                        "metadata": {"name": name, "namespace": "inference",
                                     "annotations": annotations},
                        "spec": {"rules": [{"backendRefs": backends}]}})


def _ref(name: str, weight: int) -> dict:
    return {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": name,
            "weight": weight}


def _record(weight: int, second: int, **changes: object) -> RolloutRecord:
    base = RolloutRecord("run-1", "big", "big-1a2b3c", "big", "big-1a2b3c", None, "1a2b3c",
                         "blue-green", "shifting", weight, 2,
                         datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_routes_record_is_the_one_written_last():
    a = _route("a", [_ref("big", 75), _ref("big-1a2b3c", 25)], _record(25, 30))
    b = _route("b", [_ref("big", 95), _ref("big-1a2b3c", 5)], _record(5, 10, passed=True))
    c = _route("c", [_ref("big", 100)])  # a route the crashed run never reached
    assert routes_record([b, c, a]) == _record(25, 30)
    # a rollback begun on one route wins over the step the other still records
    back = _route("a", [_ref("big", 100)], _record(0, 10, phase="rolling-back"))
    assert routes_record([b, back]).phase == "rolling-back"  # type: ignore[union-attr]
    assert routes_record([c]) is None


def test_routes_recording_different_rollouts_are_refused():
    a = _route("a", [_ref("big", 100)], _record(5, 1))
    b = _route("b", [_ref("big", 100)], _record(5, 1, run="run-2"))
    with pytest.raises(ConfigError, match="record different rollouts"):
        routes_record([a, b])


def test_routes_sending_the_pool_s_traffic_to_different_pools_are_refused():
    pool = parse_pool(POOL).ref
    same = [_route("a", [_ref("big", 100)]), _route("b", [_ref("big", 1)])]
    check_routes_agree(same, pool)  # weights may differ; the pools named may not
    split = [_route("a", [_ref("big", 100)]), _route("b", [_ref("big", 90), _ref("canary", 10)])]
    with pytest.raises(ConfigError, match="inference/b sends to inference/big, inference/canary"):
        check_routes_agree(split, pool)
