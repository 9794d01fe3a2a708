"""Steps that adapt to traffic: a first step the pool's traffic can judge in time (pure).

A step is judged once the new version finished `min_requests` in its window (`gates`). At a
quiet pool's 1 % that takes long: on `make up`'s cluster (15 req/s) 1 % is 0.15 req/s, 200
requests in 22 minutes, and the window is extended until then or fails on its timeout.
Flagger and Argo Rollouts users set the first weight from their traffic by hand; here the
pool's request rate is measured over the window before the first step, and when the first
step's expected wait for `min_requests` exceeds the bound (two windows, and never beyond
`step_timeout_s`), that step is raised to the least weight that meets it, at most `cap` %
(below 50: a baseline carries as much again). Later steps at or below the raised weight are
dropped. Steps a person gave are kept as given (`RolloutSpec.adapt_steps` is off for them):
what they asked for is what runs, slow or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AdaptedSteps:
    steps: tuple[int, ...]
    note: str  # why the first step was changed; empty: unchanged


def expected_wait_s(rate_rps: float, weight: int, min_requests: int) -> float:
    """Seconds until the new version finished `min_requests` at `weight` % of `rate_rps`."""
    per_s = rate_rps * weight / 100.0
    return math.inf if per_s <= 0 else min_requests / per_s


def wait_bound_s(window_s: float, step_timeout_s: float) -> float:
    return min(2.0 * window_s, step_timeout_s)


def adapt_first_step(steps: tuple[int, ...], *, rate_rps: float | None, min_requests: int,
                     window_s: float, step_timeout_s: float, cap: int) -> AdaptedSteps:
    """`steps` with the first one raised when the traffic would keep it waiting (see the
    module docstring); unchanged when the rate is unknown or the first step is fine."""
    if not steps or steps[0] >= 100 or rate_rps is None:
        return AdaptedSteps(steps, "")
    first, bound = steps[0], wait_bound_s(window_s, step_timeout_s)
    wait = expected_wait_s(rate_rps, first, min_requests)
    if wait <= bound or first >= cap:
        return AdaptedSteps(steps, "")
    wanted = math.ceil(100.0 * min_requests / (max(rate_rps, 1e-9) * bound))
    raised = max(first + 1, min(cap, wanted))
    rest = tuple(s for s in steps[1:] if s > raised)
    new_wait = expected_wait_s(rate_rps, raised, min_requests)
    note = (f"first step raised from {first} % to {raised} %: the pool served "
            f"{rate_rps:.2f} req/s before it, so {first} % would wait about {wait:.0f} s for "
            f"{min_requests} requests (bound {bound:.0f} s); at {raised} % about "
            f"{new_wait:.0f} s" + (f" (capped at max_first_step {cap} %)"
                                   if raised == cap and wanted > cap else ""))
    return AdaptedSteps((raised, *rest), note)
