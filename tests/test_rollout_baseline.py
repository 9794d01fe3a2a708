"""The fresh-copy baseline, the pure part: the splits it is given at each step, the route
patches that carry them, its objects derived from the old version's, the record that names it
and the choice to run without it when its GPUs are not there."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import jsonpatch
import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.capacity import Room, choose_baseline
from gpuops.tasks.rollout.derive import version_of
from gpuops.tasks.rollout.objects import PoolRef, parse_route
from gpuops.tasks.rollout.params import DEFAULT_STEPS, VersionChange, parse_spec
from gpuops.tasks.rollout.state import RolloutRecord, read_record, record_annotations
from gpuops.tasks.rollout.weights import (
    WeightSplit,
    check_split,
    current_split,
    remove_backend_patch,
    split_applied,
    step_split,
    weight_patch,
)
from tests.test_rollout_plan import DEPLOYMENT, LABELS, derived

NS = "inference"
G = "inference.networking.k8s.io"
OLD, NEW, BASE = (PoolRef(G, NS, "llama"), PoolRef(G, NS, "llama-1a2b3c"),
                  PoolRef(G, NS, "llama-baseline-9f8e7d"))


def _route(*refs: tuple[str, int]) -> dict:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "llama", "namespace": NS, "resourceVersion": "3"},
            "spec": {"rules": [{"backendRefs": [
                {"group": G, "kind": "InferencePool", "name": n, "weight": w}
                for n, w in refs]}]}}


def _weights(obj: dict) -> dict[str, int]:
    return {b["name"]: b["weight"] for b in obj["spec"]["rules"][0]["backendRefs"]}


def test_below_half_the_baseline_gets_the_new_versions_weight_and_the_old_the_rest():
    splits = [step_split(w, baseline=True) for w in DEFAULT_STEPS]
    assert splits == [WeightSplit(98, 1, 1), WeightSplit(90, 5, 5), WeightSplit(50, 25, 25),
                      WeightSplit(50, 50, 0), WeightSplit(0, 100, 0)]
    assert all(s.old + s.new + s.baseline == 100 for s in splits)
    assert step_split(0, baseline=True) == WeightSplit(100, 0, 0)  # a rollback
    # without a baseline: as before
    assert [step_split(w, baseline=False) for w in (1, 25, 100)] == [
        WeightSplit(99, 1), WeightSplit(75, 25), WeightSplit(0, 100)]
    for bad in (101, -1, True):
        with pytest.raises(ConfigError, match="weight"):
            step_split(bad, baseline=True)
    with pytest.raises(ConfigError, match="must be 100"):
        check_split(WeightSplit(98, 1, 2))


def test_the_route_carries_three_pools_and_the_baseline_leaves_it_at_zero():
    obj = _route(("llama", 100))
    first = jsonpatch.apply_patch(copy.deepcopy(obj), weight_patch(
        parse_route(obj), OLD, NEW, step_split(1, baseline=True), baseline=BASE))
    assert _weights(first) == {"llama": 98, "llama-1a2b3c": 1, "llama-baseline-9f8e7d": 1}
    route = parse_route(first)
    assert split_applied(route, OLD, NEW, WeightSplit(98, 1, 1), BASE)
    assert not split_applied(route, OLD, NEW, WeightSplit(99, 1, 0), BASE)
    assert current_split(route, OLD, NEW, BASE) == {0: (98, 1, 1)}
    half = jsonpatch.apply_patch(first, weight_patch(
        route, OLD, NEW, step_split(50, baseline=True), baseline=BASE))
    assert _weights(half) == {"llama": 50, "llama-1a2b3c": 50, "llama-baseline-9f8e7d": 0}
    # at 0 it can go (a baseline still carrying traffic cannot)
    with pytest.raises(ConfigError, match="still sends"):
        remove_backend_patch(route, BASE)
    gone = jsonpatch.apply_patch(half, remove_backend_patch(parse_route(half), BASE))
    assert _weights(gone) == {"llama": 50, "llama-1a2b3c": 50}


def test_a_baseline_at_zero_is_not_added_and_a_bad_split_changes_nothing():
    obj = _route(("llama", 100))
    back = weight_patch(parse_route(obj), OLD, NEW, WeightSplit(100, 0), baseline=BASE)
    assert _weights(jsonpatch.apply_patch(copy.deepcopy(obj), back)) == {
        "llama": 100, "llama-1a2b3c": 0}
    with pytest.raises(ConfigError) as err:
        weight_patch(parse_route(obj), OLD, NEW, WeightSplit(98, 1, 1))  # no baseline pool
    assert err.value.field == "baseline"
    with pytest.raises(ConfigError) as err:
        weight_patch(parse_route(obj), OLD, NEW, WeightSplit(97, 1, 1), baseline=BASE)
    assert err.value.field == "weights"
    with pytest.raises(ConfigError) as err:
        weight_patch(parse_route(obj), OLD, NEW, WeightSplit(98, 1, 1), baseline=OLD)
    assert err.value.field == "baseline"


def test_the_baseline_is_the_old_pod_template_under_its_own_name_pool_and_picker():
    new = derived(VersionChange(image="vllm/vllm-openai:v0.12.0"), baseline=True)
    base = new.baseline
    assert base is not None
    digest = new.old_version.digest()
    assert base.pool_name == f"llama-baseline-{digest}" != new.pool_name
    assert base.deployment_name == f"llama-baseline-{digest}"
    assert base.epp_name == f"llama-baseline-{digest}-epp"
    spec = base.deployment["spec"]
    assert spec["replicas"] == new.replicas == 3
    # the old version's container as it is, the rest of the pod too
    assert version_of(spec["template"]["spec"]["containers"][1]) == new.old_version
    assert spec["template"]["spec"]["containers"] == DEPLOYMENT["spec"]["template"]["spec"][
        "containers"]
    # selected by its own pool only: neither the old pool nor the old Deployment takes them
    labels = spec["template"]["metadata"]["labels"]
    assert labels == {**LABELS, "app": base.pool_name}
    assert spec["selector"] == {"matchLabels": {"app": base.pool_name}}
    assert base.pool["spec"]["selector"]["matchLabels"] == {"app": base.pool_name}
    assert base.pool["spec"]["endpointPickerRef"]["name"] == base.epp_name
    assert base.epp_deployment is not None
    assert base.epp_deployment["spec"]["template"]["spec"]["containers"][0]["args"][:2] == [
        "--pool-name", base.pool_name]
    assert [b["kind"] for b in base.bodies()] == ["Service", "Deployment", "InferencePool",
                                                   "Deployment"]
    assert derived(VersionChange(image="vllm/vllm-openai:v0.12.0")).baseline is None


def test_the_record_names_the_baseline_so_a_later_run_removes_it():
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    record = RolloutRecord("run-1", "llama", "llama-1a2b3c", "llama", "llama-1a2b3c", None,
                           "1a2b3c", "blue-green", "shifting", 1, 2, now,
                           baseline_pool="llama-baseline-9f8e7d",
                           baseline_deployment="llama-baseline-9f8e7d",
                           baseline_epp="llama-baseline-9f8e7d-epp")
    stored = {k: v for k, v in record_annotations(record).items() if v is not None}
    assert read_record(stored, "HTTPRoute inference/llama") == record
    plain = RolloutRecord("run-1", "llama", "llama-1a2b3c", "llama", "llama-1a2b3c", None,
                          "1a2b3c", "blue-green", "shifting", 1, 2, now)
    text = plain.for_storage()
    assert "baseline" not in text  # a record without one reads as before
    assert read_record({"gpuops.io/rollout": text}, "r") == plain
    with pytest.raises(ConfigError) as err:
        read_record({"gpuops.io/rollout": text[:-1] + ',"baseline_pool":7}'}, "r")
    assert err.value.field.endswith(".baseline_pool")


@pytest.mark.parametrize(("requested", "mode", "fits", "used", "words"), [
    ("fresh-copy", "blue-green", 4, True, "fresh-copy: 2 replica(s) x 1 GPU(s)"),
    ("fresh-copy", "blue-green", 3, False, "needs room for 4 replica(s)"),
    ("fresh-copy", "fixed-capacity", 0, False, "blue-green copy only"),
    ("none", "blue-green", 8, False, "none: "),
    # the default: a fresh copy where there is room for it, the old pool elsewhere
    ("auto", "blue-green", 4, True, "fresh-copy (auto: there is room): 2 replica(s)"),
    ("auto", "blue-green", 3, False, "none (auto, but a fresh copy needs room for 4"),
    ("auto", "fixed-capacity", 0, False, "none (auto, but a fresh copy runs beside"),
])
def test_the_baseline_runs_only_with_room_for_it_and_the_plan_says_why_not(
        requested, mode, fits, used, words):
    with_baseline, note = choose_baseline(requested, mode, Room(fits, fits, 1), 2, 1)
    assert with_baseline is used
    assert words in note


def test_the_baseline_option_is_checked_naming_it():
    spec = parse_spec(pool="inference/llama", image="vllm/vllm-openai:v0.12.0",
                      baseline="fresh-copy")
    assert spec.baseline == "fresh-copy"
    assert parse_spec(pool="llama", image="x:1").baseline == "auto"
    with pytest.raises(ConfigError) as err:
        parse_spec(pool="llama", image="x:1", baseline="kayenta")
    assert err.value.field == "baseline"


def test_the_bench_default_baseline_catches_the_slow_version_sooner_than_the_old_pool():
    from gpuops.bench import rollout

    found = rollout.run(seeds=1, versions=("good", "slow"),
                        gate_sets=("gpuops", "gpuops_old_pool"))
    fresh, plain = found["gpuops"], found["gpuops_old_pool"]
    assert fresh["bad_rolled_back"]["slow"] == 1 and fresh["false_rollbacks"] == 0
    assert fresh["bad_windows_to_rollback"]["slow"] < plain["bad_windows_to_rollback"]["slow"]
    assert fresh["bad_request_share_pct"]["slow"] < plain["bad_request_share_pct"]["slow"]


def test_a_prewarm_is_planned_only_without_room_and_when_chosen_and_its_fallback_is_checked():
    from gpuops.tasks.rollout.capacity import choose_prewarm

    none = Room(0, 0, 1)
    assert choose_prewarm("auto", "fixed-capacity", "fixed-capacity", 60, none, 4, 1, 1) is None
    assert choose_prewarm("auto", "prewarm", "fixed-capacity", 60, Room(4, 4, 1), 4, 1, 1) is None
    assert choose_prewarm("fixed-capacity", "prewarm", "fail", 60, none, 4, 1, 1) is None
    warm = choose_prewarm("auto", "prewarm", "fixed-capacity", 60, Room(1, 1, 1), 4, 1, 1)
    assert warm is not None and warm.replicas == 3 and warm.fallback == "fixed-capacity"
    # blue-green asked for: a pre-warm that times out fails rather than go fixed-capacity
    asked = choose_prewarm("blue-green", "prewarm", "fixed-capacity", 60, none, 4, 1, 1)
    assert asked is not None and asked.fallback == "fail"
    with pytest.raises(ConfigError) as err:  # 1 replica, 1 at a time: nothing would serve
        choose_prewarm("auto", "prewarm", "fixed-capacity", 60, none, 1, 1, 1)
    assert err.value.field == "prewarm_fallback"
    with pytest.raises(ConfigError) as err:
        parse_spec(pool="llama", image="x:1", no_room="wait")
    assert err.value.field == "no_room"
