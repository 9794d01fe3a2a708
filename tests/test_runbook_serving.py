"""restart-pool-replicas' pure parts: the disruption check and the batches it restarts."""

from __future__ import annotations

from gpuops.runbooks.bindings.serving import batches, disruption_refusal


def test_a_batch_that_would_leave_fewer_than_min_ready_is_refused_saying_why():
    assert disruption_refusal(ready=3, batch=1, min_ready=2) == ""
    assert disruption_refusal(ready=2, batch=1, min_ready=2) == (
        "restarting 1 pod(s) would leave 1 Ready, below min_ready 2 (2 Ready now)")
    assert disruption_refusal(ready=1, batch=1, min_ready=0) == ""


def test_pods_are_restarted_max_unavailable_at_a_time_in_order():
    assert batches(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    assert batches(["a"], 3) == [["a"]] and batches([], 1) == []
