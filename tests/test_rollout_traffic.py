"""Steps that adapt to traffic (pure): a first step the pool's request rate can judge in time,
raised only as far as needed and never beyond the cap, the reason said."""

from __future__ import annotations

import math

from gpuops.tasks.rollout.traffic import adapt_first_step, expected_wait_s

DEFAULT = (1, 5, 25, 50, 100)


def adapt(rate: float | None, steps: tuple[int, ...] = DEFAULT, cap: int = 10):
    return adapt_first_step(steps, rate_rps=rate, min_requests=200, window_s=300,
                            step_timeout_s=1800, cap=cap)


def test_a_quiet_pools_first_step_is_raised_to_the_least_weight_judged_within_two_windows():
    # make up's cluster: 15 req/s; 1 % waits 200 / 0.15 = 1333 s, beyond 2 x 300 s
    adapted = adapt(15.0)
    assert adapted.steps == (3, 5, 25, 50, 100)
    assert expected_wait_s(15.0, 3, 200) <= 600 < expected_wait_s(15.0, 2, 200)
    assert adapted.note.startswith("first step raised from 1 % to 3 %: the pool served "
                                   "15.00 req/s before it, so 1 % would wait about 1333 s")


def test_a_busy_pool_keeps_its_steps_and_no_note_is_made():
    assert adapt(95.0) == adapt_first_step(DEFAULT, rate_rps=95.0, min_requests=200,
                                           window_s=300, step_timeout_s=1800, cap=10)
    assert adapt(95.0).steps == DEFAULT and adapt(95.0).note == ""


def test_the_raise_stops_at_the_cap_and_later_steps_below_it_are_dropped():
    adapted = adapt(0.5, cap=10)
    assert adapted.steps == (10, 25, 50, 100)
    assert "(capped at max_first_step 10 %)" in adapted.note
    assert adapt(0.5, steps=(10, 50, 100), cap=10).steps == (10, 50, 100)  # at the cap


def test_an_unknown_rate_changes_nothing():
    assert adapt(None).steps == DEFAULT and adapt(None).note == ""
    assert math.isinf(expected_wait_s(0.0, 1, 200))
