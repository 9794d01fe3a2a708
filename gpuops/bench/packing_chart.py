"""The allocation-curve chart of `gpuops bench packing`: unallocated GPU % against arrived
workload, one panel per starting placement (default, Best-fit), FGD placement as reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARRIVED = ("90", "95", "100", "110", "130")


def allocation_chart(result: dict[str, Any], path: str | Path) -> Path:
    """Write the chart as a PNG at `path` and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["unallocated_gpu_pct"]
    x = [int(a) for a in ARRIVED]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, start in zip(axes, ("default", "best_fit")):
        def line(arm: str, ax: Any = ax, **style: Any) -> None:
            if arm in rows:
                ax.plot(x, [rows[arm][a] for a in ARRIVED], marker="o", label=arm, **style)

        line(start, color="black", linewidth=2)
        line("fgd", color="grey", linestyle="--")
        for budget, shade in (("1", 0.45), ("2", 0.7), ("5", 1.0)):
            line(f"{start}+fragmultipod-{budget}", color=(0.85, 0.45, 0.1, shade))
            line(f"{start}+gpuops-{budget}", color=(0.1, 0.35, 0.8, shade))
        ax.set_title(f"from {start} placement")
        ax.set_xlabel("workload arrived (% of GPU capacity)")
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("unallocated GPU (% of capacity)")
    seeds = result.get("seeds")
    fig.suptitle(f"Alibaba openb trace, {result.get('gpus')} GPUs, median of {seeds} seeds "
                 "(lower is better)", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
