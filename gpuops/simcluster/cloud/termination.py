"""Which instance an Auto Scaling group terminates when its desired capacity drops: the
default termination policy, as AWS documents it ("Configure termination policies for Amazon
EC2 Auto Scaling", default policy), on plain data.

For each instance to terminate, in turn (the balance changes after each):
1. the Availability Zones with the most instances that still have at least one instance not
   protected from scale in (zone balance comes before any policy); only their unprotected
   instances are candidates;
2. instances with an outdated configuration first: launched from a launch configuration, then
   from another launch template than the group's, then from the oldest version of its
   template (`config_age`: 0 for the current template version, higher for older ones);
3. then the instance closest to its next billing hour (the longest time since the last full
   hour of running), then one at random: here a hash of the instance id, so a run is
   reproducible.
Nothing here looks at what runs on the instance: AWS does not know, which is why scaling in
by lowering the desired capacity can terminate a busy GPU node (cluster-autoscaler and
gpuops pick the node themselves and call `TerminateInstanceInAutoScalingGroup`).
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass

BILLING_PERIOD_S = 3600.0


@dataclass(frozen=True)
class Instance:
    name: str  # what the caller calls it (the node's name)
    instance_id: str
    zone: str
    launched_at: float  # epoch seconds
    protected: bool = False  # ProtectedFromScaleIn
    config_age: int = 0  # 0: the group's current launch template version


def termination_order(instances: list[Instance], count: int, now: float) -> list[str]:
    """The names of the `count` instances the default policy terminates, in order (fewer if
    protection leaves fewer candidates)."""
    left = list(instances)
    chosen: list[str] = []
    while len(chosen) < count:
        pick = _next(left, now)
        if pick is None:
            break
        chosen.append(pick.name)
        left.remove(pick)
    return chosen


def _next(instances: list[Instance], now: float) -> Instance | None:
    per_zone = Counter(i.zone for i in instances)
    eligible = {i.zone for i in instances if not i.protected}
    if not eligible:
        return None
    most = max(per_zone[z] for z in eligible)
    candidates = [i for i in instances if not i.protected and per_zone[i.zone] == most]
    oldest = max(i.config_age for i in candidates)
    candidates = [i for i in candidates if i.config_age == oldest]
    return max(candidates, key=lambda i: (
        round((now - i.launched_at) % BILLING_PERIOD_S, 3),
        zlib.crc32(i.instance_id.encode())))
