"""capacity-replay: the baselines' figures do not depend on what the gpuops policy does."""

import json


def test_reactive_and_static_figures_stay_the_same_whatever_gpuops_plans(capsys):
    from gpuops.bench import capacity_replay

    common = {"json_output": True, "models": 3, "copies": 2, "eval_days": 1, "sizes": []}
    with_headroom = capacity_replay.main(headroom=True, **common)
    without = capacity_replay.main(headroom=False, **common)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == without
    # gpuops scales differently with and without headroom (other node starts, other draws
    # of the model load time) ...
    assert with_headroom["gpu_hours"]["gpuops"] != without["gpu_hours"]["gpuops"]
    # ... and the baselines it is compared with are replayed exactly as before
    for key in ("gpu_hours", "cost_usd", "cold_start_wait_pct", "any_wait_pct"):
        for policy in ("static_peak", "reactive"):
            assert with_headroom[key][policy] == without[key][policy], (key, policy)
