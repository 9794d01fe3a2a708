"""Which pods a drain evicts (pure): what `kubectl drain` would, and why it skips the rest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuops.common.podfacts import is_daemonset_pod, is_mirror_pod


@dataclass(frozen=True)
class DrainPlan:
    node: str
    evict: tuple[tuple[str, str, str], ...]  # (namespace, name, uid)
    skipped: tuple[tuple[str, str], ...]  # ("ns/name", why)

    def describe(self) -> str:
        lines = [f"cordon {self.node}"]
        lines += [f"evict {ns}/{name}" for ns, name, _ in self.evict]
        lines += [f"skip  {pod} ({why})" for pod, why in self.skipped]
        return "\n".join(lines)


def plan_drain(node: str, pods: list[dict[str, Any]]) -> DrainPlan:
    evict, skipped = [], []
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        meta = pod["metadata"]
        ref = f"{meta['namespace']}/{meta['name']}"
        phase = (pod.get("status") or {}).get("phase")
        if is_daemonset_pod(pod):
            skipped.append((ref, "DaemonSet pod: it would come straight back"))
        elif is_mirror_pod(pod):
            skipped.append((ref, "static (mirror) pod: managed by the kubelet"))
        elif phase in ("Succeeded", "Failed"):
            skipped.append((ref, f"already {phase}"))
        elif meta.get("deletionTimestamp"):
            skipped.append((ref, "already terminating"))
        else:
            evict.append((meta["namespace"], meta["name"], meta["uid"]))
    return DrainPlan(node, tuple(evict), tuple(skipped))
