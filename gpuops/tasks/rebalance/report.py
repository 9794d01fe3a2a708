"""What a rebalance run shows people (pure): the moves table, the measures, the GPU map, the
approval text.

The GPU map is the picture the issue asks for: one row per GPU node, one cell per GPU, each
cell coloured by the workload holding it (a share of a GPU shows each sharer), free GPUs
white; pods the plan moves are marked ↗ in the picture before, pods that land ★ in the
picture after. Rendered as a markdown table of coloured squares, which the Prefect UI shows
as a grid: stranded GPUs read at a glance as white cells scattered over many rows, and a
good repack as one row turned from mixed to solid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuops.tasks.rebalance.from_kube import ClusterView
from gpuops.tasks.rebalance.model import MILLI, Pod
from gpuops.tasks.rebalance.repack import RepackPlan

COLOURS = ("🟦", "🟩", "🟧", "🟪", "🟨", "🟥", "🟫", "⬛")
FREE = "⬜"
MOVED_MARK = "↗"
LANDED_MARK = "★"
MAX_NODES = 40  # rows in the map: the plan's nodes first, then the others by name


@dataclass(frozen=True)
class Holder:
    pod: str
    workload: str
    milli: int
    mark: str = ""


GpuMap = dict[str, list[list[Holder]]]  # node -> per GPU, who holds it


def gpu_map_before(view: ClusterView, plan: RepackPlan | None = None) -> GpuMap:
    moving = {m.pod for m in plan.moves} if plan else set()
    grid = _empty(view)
    for pod in view.cluster.running:
        for gid in pod.gpu_ids:
            grid[pod.node or ""][gid].append(Holder(pod.key, workload_of(view, pod), pod.gpu_milli,
                                                    MOVED_MARK if pod.key in moving else ""))
    return grid


def gpu_map_planned(view: ClusterView, plan: RepackPlan) -> GpuMap:
    """The map once the plan is carried out (moved pods where the plan expects them)."""
    moves = {m.pod: m for m in plan.moves}
    pods = {p.key: p for p in view.cluster.running + view.cluster.pending}
    grid = _empty(view)
    for pod in view.cluster.running:
        node, ids = pod.node or "", pod.gpu_ids
        if pod.key in moves:
            node, ids = moves[pod.key].to_node, moves[pod.key].gpu_ids
        for gid in ids:
            grid[node][gid].append(Holder(pod.key, workload_of(view, pod), pod.gpu_milli))
    for lnd in plan.landings:
        pod = pods[lnd.pod]
        for gid in lnd.gpu_ids:
            grid[lnd.node][gid].append(Holder(pod.key, workload_of(view, pod), pod.gpu_milli,
                                              LANDED_MARK))
    return grid


def gpu_map_now(view: ClusterView, landed: Iterable[str] = ()) -> GpuMap:
    """The map as the cluster is (after the run): `landed` pods marked ★."""
    marked = set(landed)
    grid = _empty(view)
    for pod in view.cluster.running:
        for gid in pod.gpu_ids:
            grid[pod.node or ""][gid].append(Holder(pod.key, workload_of(view, pod),
                                                    pod.gpu_milli,
                                                    LANDED_MARK if pod.key in marked else ""))
    return grid


def _empty(view: ClusterView) -> GpuMap:
    return {n.name: [[] for _ in range(n.gpus)] for n in view.cluster.nodes if n.gpus}


def workload_of(view: ClusterView, pod: Pod) -> str:
    ref = view.pods.get(pod.key)
    if ref is None or not ref.owner_name:
        return pod.key
    name = ref.owner_name
    if ref.owner_kind == "ReplicaSet" and "-" in name:
        name = name.rsplit("-", 1)[0]  # the Deployment's name, as people know it
    return f"{pod.namespace}/{name}"


def render_maps(maps: Mapping[str, GpuMap], focus: Iterable[str] = ()) -> str:
    """Several maps (title -> map) side by side in one legend; `focus` nodes first."""
    workloads: list[str] = []
    for grid in maps.values():
        for per_gpu in grid.values():
            for holders in per_gpu:
                for h in holders:
                    if h.workload not in workloads:
                        workloads.append(h.workload)
    colour = {w: COLOURS[i % len(COLOURS)] for i, w in enumerate(workloads)}
    first = list(dict.fromkeys(focus))
    out = []
    for title, grid in maps.items():
        nodes = [n for n in first if n in grid] + sorted(n for n in grid if n not in first)
        shown = nodes[:MAX_NODES]
        width = max((len(grid[n]) for n in shown), default=0)
        out.append(f"### {title}\n")
        out.append("| node | " + " | ".join(f"GPU {g}" for g in range(width)) + " | free |")
        out.append("|---|" + "---|" * width + "---|")
        for node in shown:
            cells = [_cell(holders, colour) for holders in grid[node]]
            cells += [""] * (width - len(cells))
            free = sum(1 for holders in grid[node] if not holders)
            out.append(f"| `{node}` | " + " | ".join(cells) + f" | {free} |")
        if len(nodes) > len(shown):
            out.append(f"\n… and {len(nodes) - len(shown)} more GPU node(s)")
        out.append("")
    legend = [f"{colour[w]} `{w}`" for w in workloads]
    out.append("**Legend:** " + " · ".join(legend + [f"{FREE} free",
                                                     f"{MOVED_MARK} moves",
                                                     f"{LANDED_MARK} lands (was pending)"]))
    return "\n".join(out)


def _cell(holders: list[Holder], colour: Mapping[str, str]) -> str:
    if not holders:
        return FREE
    parts = []
    for h in holders:
        share = "" if h.milli >= MILLI else f"{h.milli / MILLI:.2g}"
        parts.append(f"{colour[h.workload]}{share}{h.mark}")
    return " ".join(parts)


# --- tables and text ------------------------------------------------------------------------

def move_rows(plan: RepackPlan, view: ClusterView) -> list[dict[str, object]]:
    pods = {p.key: p for p in view.cluster.running + view.cluster.pending}
    rows: list[dict[str, object]] = [
        {"step": "move", "pod": m.pod, "workload": workload_of(view, pods[m.pod]),
         "gpus": _gpus(pods[m.pod]), "from": m.from_node, "to": m.to_node,
         "cost": m.cost} for m in plan.moves]
    rows += [{"step": "land", "pod": lnd.pod, "workload": workload_of(view, pods[lnd.pod]),
              "gpus": _gpus(pods[lnd.pod]), "from": "(pending)", "to": lnd.node, "cost": 0.0}
             for lnd in plan.landings]
    return rows


def _gpus(pod: Pod) -> float:
    return pod.gpu_total_milli / MILLI


def landed_gpus(plan: RepackPlan, view: ClusterView) -> float:
    pods = {p.key: p for p in view.cluster.pending}
    return sum(pods[lnd.pod].gpu_total_milli for lnd in plan.landings) / MILLI


def measure_rows(plan: RepackPlan, view: ClusterView, expected_wait_hours: float
                 ) -> list[dict[str, object]]:
    landed = landed_gpus(plan, view)
    return [
        {"measure": "stranded GPUs", "before": plan.stranded_gpus_before,
         "after": plan.stranded_gpus_after},
        {"measure": "FGD fragmentation (GPUs)", "before": round(plan.fragmentation_gpus_before, 2),
         "after": round(plan.fragmentation_gpus_after, 2)},
        {"measure": "pending GPU pods", "before": len(view.cluster.pending),
         "after": len(plan.unplaced)},
        {"measure": "GPUs put to work", "before": 0, "after": landed},
        {"measure": "expected GPU-hours saved", "before": 0,
         "after": round(landed * expected_wait_hours, 1)},
    ]


def plan_text(plan: RepackPlan) -> str:
    lines = [f"move {m.pod}: {m.from_node} -> {m.to_node}" for m in plan.moves]
    lines += [f"then {lnd.pod} lands on {lnd.node}" for lnd in plan.landings]
    return "\n".join(lines)


def approval_summary(plan: RepackPlan, view: ClusterView, expected_wait_hours: float) -> str:
    landed = landed_gpus(plan, view)
    moved = ", ".join(f"`{m.pod}` ({m.from_node} → {m.to_node})" for m in plan.moves)
    lands = ", ".join(f"`{lnd.pod}` on {lnd.node}" for lnd in plan.landings)
    return (f"Evict {len(plan.moves)} pod(s) (their controllers recreate them elsewhere): "
            f"{moved}.\nThen scheduled: {lands}.\n"
            f"GPUs freed and put to work: {landed:g}; stranded GPUs "
            f"{plan.stranded_gpus_before:g} → {plan.stranded_gpus_after:g}; expected "
            "GPU-hours saved ≈ "
            f"{landed * expected_wait_hours:g} ({landed:g} GPUs × {expected_wait_hours:g} h "
            "the pending pods would otherwise wait).")
