"""A tiny run of `gpuops bench rollout`, so the benchmark cannot rot: every figure is there
and the figures agree with each other (values are not asserted)."""

from __future__ import annotations

import json

import pytest

from gpuops.bench import rollout


def test_rollout_bench_reports_every_figure_for_every_gate_set(capsys):
    result = rollout.main(json_output=True, seeds=1, versions="good,bad,slow",
                          window_s=120, min_requests=50)
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last_line) == result
    figures = {"good_time_to_full_s", "bad_windows_to_rollback", "bad_request_share_pct",
               "bad_rolled_back", "false_rollbacks", "missed_bad"}
    assert figures <= set(result)
    for gate_set in rollout.GATE_SETS:
        assert figures <= set(result[gate_set])
        found = result[gate_set]
        assert set(found["bad_windows_to_rollback"]) == {"bad", "slow"}
        # every bad rollout is either rolled back or missed
        assert sum(found["bad_rolled_back"].values()) + found["missed_bad"] == 2
    gpuops = result["gpuops"]
    # A version failing 5 % of its requests is rolled back at its first judged window,
    # having served no more than that step's share of the traffic.
    assert gpuops["bad_rolled_back"]["bad"] == 1
    assert gpuops["bad_windows_to_rollback"]["bad"] == 1
    assert gpuops["bad_request_share_pct"]["bad"] <= result["steps"][0] + 0.5
    assert gpuops["good_time_to_full_s"]["good"] > 0


def test_an_unknown_version_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="versions: unknown nope"):
        rollout.run(seeds=1, versions=("nope",))
