"""The pure side of the GPU sensor: when an episode is reported (once, after its debounce),
when it ends, what a restarted watcher keeps; and what counts as stranded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.rebalance.episodes import Debounce, Episode, advance, resume
from gpuops.tasks.rebalance.model import Cluster, Node, Pod
from gpuops.tasks.rebalance.stranded import assess_gpus, failed_for_gpus

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
D = Debounce(hold=timedelta(seconds=30), clear=timedelta(seconds=30))


def run(seen: list[tuple[int, bool]], debounce: Debounce = D) -> list[int]:
    """Feed (second, active) observations; the seconds at which a report is made."""
    episode, reports = None, []
    for second, active in seen:
        episode, report = advance(episode, subject="c", active=active, debounce=debounce,
                                  now=T0 + timedelta(seconds=second),
                                  members=frozenset({"p"}) if active else frozenset())
        if report:
            reports.append(second)
    return reports


def test_a_condition_is_reported_once_when_it_has_held_for_the_debounce():
    assert run([(s, True) for s in range(0, 120, 5)]) == [30]


def test_a_condition_gone_before_the_debounce_is_never_reported():
    assert run([(0, True), (20, True), (25, False), (40, True), (65, True)]) == []


def test_a_short_gap_is_the_same_episode_and_a_long_one_starts_a_new_one():
    same = [(0, True), (30, True), (40, False), (60, False), (65, True), (200, True)]
    assert run(same) == [30]
    new = [(0, True), (30, True), (40, False), (70, False), (80, True), (110, True)]
    assert run(new) == [30, 110]


def test_a_restarted_watcher_keeps_an_episode_whose_members_are_still_there():
    saved = Episode("c", T0, reported=True, members=frozenset({"a", "b"}))
    restored = Episode.from_json(saved.to_json())
    assert restored == saved
    kept = resume(restored, members=frozenset({"b", "c"}))
    assert kept is not None and kept.reported and kept.identity == saved.identity
    assert resume(restored, members=frozenset({"x"})) is None  # a new episode
    assert resume(restored, members=frozenset()) is None  # over meanwhile


def test_a_negative_debounce_is_refused_naming_it():
    with pytest.raises(ConfigError, match="hold"):
        Debounce(hold=timedelta(seconds=-1))


def h100(name: str, free_devices: int) -> tuple[Node, list[Pod]]:
    node = Node(name, cpu_milli=96_000, memory_mib=1 << 20, gpus=8, gpu_model="H100")
    used = 8 - free_devices
    pods = [Pod(f"fill-{name}", gpu_count=used, node=name, gpu_ids=tuple(range(used)))] \
        if used else []
    return node, pods


def cluster(free: list[int], pending: list[Pod]) -> Cluster:
    built = [h100(f"n{i}", f) for i, f in enumerate(free)]
    return Cluster(nodes=tuple(n for n, _ in built),
                   running=tuple(p for _, pods in built for p in pods), pending=tuple(pending))


def test_stranded_when_the_free_gpus_would_hold_the_pending_pods_in_total():
    big = Pod("big", gpu_count=8)
    a = assess_gpus(cluster([3, 3, 2], [big]), {"default/big"})
    assert a.stranded and a.stranded_pods == ("default/big",)
    assert a.stranded_by_shape == {"8-gpu": ["default/big"]}
    assert a.free_gpus_by_node == {"n0": 3.0, "n1": 3.0, "n2": 2.0}
    assert a.stranded_gpus == 8.0


def test_not_stranded_when_the_free_gpus_are_too_few_or_the_pod_fits_or_failed_otherwise():
    big, other = Pod("big", gpu_count=8), Pod("other", gpu_count=8)
    short = assess_gpus(cluster([3, 3, 2], [big, other]), {"default/big", "default/other"})
    assert not short.stranded and "capacity shortage" in short.why
    fits = assess_gpus(cluster([3, 8], [big]), {"default/big"})  # next cycle places it
    assert not fits.stranded and fits.stranded_pods == ()
    assert not assess_gpus(cluster([3, 3, 2], [big]), set()).stranded  # not for GPUs


def test_failed_for_gpus_reads_the_schedulers_condition():
    def pod(message: str) -> dict:
        return {"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                           "reason": "Unschedulable", "message": message}]}}

    assert failed_for_gpus(pod("0/4 nodes are available: 4 Insufficient nvidia.com/gpu."))
    assert failed_for_gpus(pod("0/4 nodes are available: 4 Insufficient gpuops.io/gpu-milli."))
    assert not failed_for_gpus(pod("0/4 nodes are available: 4 Insufficient cpu."))
    assert not failed_for_gpus({"status": {"phase": "Pending"}})
