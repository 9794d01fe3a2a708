"""Which pods a drain evicts (pure): what `kubectl drain` would, and why it skips the rest;
and whether the evicted pods' controllers have put replacements on other nodes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuops.common.annotations import PLACEHOLDER_LABEL
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


def _controller_uid(pod: dict[str, Any]) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("uid") for r in refs if r.get("controller")), None)


def unreplaced(evicted: list[dict[str, Any]], before: list[dict[str, Any]],
               now: list[dict[str, Any]], node: str) -> list[str]:
    """What the drain of `node` still waits for before the node may go: per controller of the
    `evicted` pods, a new pod (not in `before`, not terminating) bound to another node for
    each pod it lost. Pods without a controller and capacity placeholders have nothing to
    wait for. Empty: every evicted pod has its replacement running elsewhere."""
    lost: dict[str, list[str]] = {}
    for pod in evicted:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        owner = _controller_uid(pod)
        if owner and PLACEHOLDER_LABEL not in labels:
            meta = pod["metadata"]
            lost.setdefault(owner, []).append(f"{meta['namespace']}/{meta['name']}")
    known = {p["metadata"].get("uid") for p in before}
    bound: dict[str, int] = {}
    for pod in now:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        owner = _controller_uid(pod)
        if owner in lost and meta.get("uid") not in known and not meta.get(
                "deletionTimestamp") and spec.get("nodeName") not in (None, node):
            bound[owner] = bound.get(owner, 0) + 1
    return [f"a replacement for {', '.join(pods[bound.get(owner, 0):])} scheduled on "
            f"another node" for owner, pods in sorted(lost.items(), key=lambda kv: kv[1])
            if bound.get(owner, 0) < len(pods)]
