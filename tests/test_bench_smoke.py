"""A tiny run of every benchmark, so the benchmark code cannot rot (figures are not asserted)."""

from __future__ import annotations

import json

from gpuops.bench import sim_scale


def test_sim_scale_bench_lists_every_pod_and_sees_every_update(capsys):
    result = sim_scale.main(json_output=True, nodes=20, pods=300, updates=400, page=100)
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last_line) == result
    assert result["pods_listed"] == 300
    assert result["watch_events"] == 400
    assert {"list_s", "watch_events_per_s", "server_rss_mb"} <= set(result)


def test_capacity_replay_bench_reports_every_policy_and_solve_size(capsys):
    from gpuops.bench import capacity_replay

    result = capacity_replay.main(json_output=True, models=2, copies=2, eval_days=1,
                                  sizes=[[4, 4, 12]], solve_time_limit=10)
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last_line) == result
    policies = {"static_peak", "reactive", "gpuops"}
    for key in ("gpu_hours", "cold_start_wait_pct", "p95_wait_s"):
        assert set(result[key]) == policies
    assert set(result["solve_s"]) == set(result["solve_gap"]) == {"4x4x12"}
