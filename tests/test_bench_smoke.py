"""A tiny run of every benchmark, so the benchmark code cannot rot (figures are not asserted)."""

from __future__ import annotations

import json

import pytest

from gpuops.bench import sim_scale


def test_sim_scale_bench_lists_every_pod_and_sees_every_update(capsys):
    result = sim_scale.main(json_output=True, nodes=20, pods=300, updates=400, page=100)
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last_line) == result
    assert result["pods_listed"] == 300
    assert result["watch_events"] == 400
    assert {"list_s", "watch_events_per_s", "server_rss_mb"} <= set(result)


def test_sim_scale_bench_pages_the_table_kubectl_reads_and_says_protobuf_is_answered_in_json(
        capsys):
    result = sim_scale.main(json_output=True, nodes=5, pods=250, updates=10, page=100)
    assert result["table_rows"] == 250  # three pages of Table rows, as kubectl get pods -A
    assert result["protobuf_accept_pods_listed"] == 250
    assert result["protobuf_accept_answered_as"] == "application/json"
    assert {"list_table_s", "list_protobuf_accept_s"} <= set(result)


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


def test_restart_storm_bench_reports_every_figure(prefect_server, capsys):
    from gpuops.bench import restart_storm

    # One workload per fault kind, the shortest storm that kills and restarts the watcher,
    # short quiet periods, and a cold-start crash past the storm's back-off: every phase
    # runs, in about 30 s instead of the 4 minutes of the full bench.
    result = restart_storm.main(json_output=True, workloads=len(restart_storm.FAULTS),
                                duration_s=restart_storm.MIN_DURATION_S + 1, speed=10,
                                prefect_api_url=prefect_server, drain_timeout_s=15,
                                settle_timeout_s=30, settle_quiet_s=1, drain_quiet_s=1,
                                cold_start_idle_s=660)
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last_line) == result
    assert {"restarts_injected", "restarts_reported", "reported_with_evidence",
            "missed_while_down", "logs_captured_pct", "cause_accuracy_pct", "detect_p50_s",
            "detect_p95_s", "slack_p95_s", "max_parent_messages_per_workload_cause",
            "flow_runs", "flow_runs_cancelled", "queue_high_water", "wall_s"} <= set(result)
    assert result["restarts_reported"] >= 1
    assert result["watcher_restarts"] == 1  # the storm killed the watcher and started another


def test_a_restart_storm_too_short_to_restart_the_watcher_is_refused_before_it_starts():
    from gpuops.bench import restart_storm

    with pytest.raises(ValueError, match=r"duration_s=4\.0: .*at least 5\.0 s"):
        restart_storm.run(duration_s=4.0)


def test_redaction_bench_reports_leaks_unit_and_end_to_end(prefect_server, capsys):
    from gpuops.bench import redaction

    result = redaction.main(json_output=True, formats=4, prefect_api_url=prefect_server,
                            timeout_s=120)
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last_line) == result
    assert {"formats", "leaked_unit", "leaked_end_to_end", "false_redaction_pct",
            "false_redaction_e2e_pct", "secret_reads", "cases_captured"} <= set(result)
    assert result["formats"] == 4 and result["cases_captured"] == 12


def _write_trace(tmp_path, *, with_spec: bool):
    import random

    rng = random.Random(7)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"node-{i:02},{rng.choice([32000, 64000])},262144,{rng.choice([2, 4, 8])},"
        f"{'T4' if i % 2 else 'V100'}\n" for i in range(12)))
    pods = tmp_path / "pods.csv"
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli" + (",gpu_spec" if with_spec else "")
    rows = []
    for i in range(120):
        num = rng.choice([0, 1, 1, 1, 2, 4])
        milli = rng.choice([250, 500, 1000]) if num == 1 else (1000 if num else 0)
        spec = (",V100|T4" if i % 3 else ",T4") if with_spec else ""
        rows.append(f"pod-{i:03},{rng.choice([2000, 4000, 8000])},8192,{num},{milli}{spec}")
    pods.write_text(header + "\n" + "\n".join(rows) + "\n")
    return nodes, pods


@pytest.mark.parametrize("with_spec", [False, True])
def test_packing_bench_reports_every_arm_at_every_arrival_point(tmp_path, capsys, with_spec):
    from gpuops.bench import packing

    nodes, pods = _write_trace(tmp_path, with_spec=with_spec)
    result = packing.main(json_output=True, nodes=str(nodes), pods=str(pods), seeds=2,
                          stress=with_spec, time_limit_s=2, chart=str(tmp_path / "c.png"),
                          churn_steps=2, churn_seeds=1)
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last_line) == result
    arms = set(packing.arm_names())
    assert {"default", "best_fit", "fgd", "default+gpuops-5", "best_fit+fragmultipod-1"} <= arms
    for key in ("unallocated_gpu_pct", "stranded_gpus", "pods_moved_pct"):
        assert set(result[key]) == arms
        assert all(set(row) == {"90", "95", "100", "110", "130"} for row in result[key].values())
    assert set(result["plan_s"]) == arms
    assert result["nodes"] == 12 and result["pods_in_list"] == 120
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    churn = result["synthetic_churn"]
    assert churn["label"].startswith("SYNTHETIC")
    assert {"default", "best_fit+gpuops-1", "default+fragmultipod-1"} <= set(
        churn["unallocated_gpu_pct_mean"])
    # a budget of 5 % never moves more than 5 % of the running pods
    assert all(result["pods_moved_pct"][f"{p}+{k}-5"]["100"] <= 5.0
               for p in ("default", "best_fit") for k in ("gpuops", "fragmultipod"))
