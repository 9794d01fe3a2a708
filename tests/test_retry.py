"""The retrier waits what a temporary error says, backs off when it says nothing, and never
retries a permanent error."""

from __future__ import annotations

import pytest

from gpuops.common.errors import (
    AwsThrottled,
    KubeConflict,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    KubeUnavailable,
)
from gpuops.common.retry import with_retries


def failing(*errors: Exception):
    """A call that raises `errors` in turn, then returns "done"; counts its calls."""
    pending = list(errors)
    calls = []

    def fn() -> str:
        calls.append(1)
        if pending:
            raise pending.pop(0)
        return "done"
    return fn, calls


def test_a_throttled_call_waits_the_delay_its_error_carries():
    slept: list[float] = []
    fn, _ = failing(KubeTooManyRequests("slow down", retry_after=3.0),
                    AwsThrottled("Rate exceeded", code="Throttling"))
    assert with_retries(fn, sleep=slept.append) == "done"
    assert slept == [3.0, 2.0]


def test_a_conflict_is_retried_at_once_by_re_reading():
    slept: list[float] = []
    fn, calls = failing(KubeConflict("the object has been modified"))
    assert with_retries(fn, sleep=slept.append) == "done"
    assert slept == [0.05] and len(calls) == 2


def test_errors_without_a_hint_back_off_doubling_up_to_the_cap():
    slept: list[float] = []
    fn, _ = failing(*[KubeServerError("500")] * 3, *[KubeUnavailable("refused")] * 3)
    assert with_retries(fn, attempts=7, max_delay=4.0, sleep=slept.append) == "done"
    assert slept == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_delay_above_the_cap_is_capped():
    slept: list[float] = []
    fn, _ = failing(KubeTooManyRequests("PDB", retry_after=120.0))
    with_retries(fn, max_delay=30.0, sleep=slept.append)
    assert slept == [30.0]


def test_a_permanent_error_is_raised_at_once_and_the_last_temporary_one_after_the_attempts():
    slept: list[float] = []
    fn, calls = failing(KubeNotFound("gone"))
    with pytest.raises(KubeNotFound):
        with_retries(fn, sleep=slept.append)
    assert len(calls) == 1 and slept == []
    fn, calls = failing(*[KubeServerError("500")] * 5)
    with pytest.raises(KubeServerError):
        with_retries(fn, attempts=3, sleep=slept.append)
    assert len(calls) == 3
