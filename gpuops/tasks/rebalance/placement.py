"""Where a scheduler would put a pod: the bench's placement arms and the planner's prediction.

Three policies, each a filter (the pod fits: `PackState.feasible`) then a node score, the
highest winning; ties go to the node whose name sorts first, as in the FGD simulator (its
patched `selectHost`, for reproducible runs), or at random as kube-scheduler does
(`tie_break="random"`):
- `default`: kube-scheduler's default scoring, NodeResourcesFit `LeastAllocated` plus
  `NodeResourcesBalancedAllocation`, both on CPU and memory (the default resources; GPUs are
  an extended resource these plugins do not score unless configured) — it spreads pods;
- `best_fit`: the FGD simulator's Best-fit (`pkg/simulator/plugin/best_fit_score.go`):
  the least CPU and GPU left after placing, each normalised by the largest node (128 cores,
  8 GPUs), weighed 1/2 each;
- `fgd`: Fragmentation Gradient Descent (Weng et al., ATC'23; the simulator's
  `fgd_score.go`): the node (and, for a shared pod, the device) whose FGD fragmentation
  grows least, scored `sigmoid(-increase / 1000) * 100` truncated, as the simulator does.

GPU devices within the node, as the simulator assigns them (Open-Gpu-Share): a shared pod
takes the device with the least free milli-GPU that still fits it ("best"; FGD: the device
that fragments least); a whole-GPU pod takes the lowest-numbered fully free devices.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from gpuops.common.errors import ConfigError
from gpuops.tasks.rebalance.fragmentation import Shapes, node_fragmentation
from gpuops.tasks.rebalance.model import MILLI
from gpuops.tasks.rebalance.state import PackState

POLICIES = ("default", "best_fit", "fgd")
MAX_SPEC_CPU = 128_000  # the simulator's normalisers for Best-fit
MAX_SPEC_GPU = 8_000
MAX_NODE_SCORE = 100


def tightest_device(free: np.ndarray, milli: int) -> int:
    """The device with the least free milli-GPU that still fits `milli` (first on ties)."""
    fits = free >= milli
    return int(np.argmin(np.where(fits, free, np.iinfo(np.int64).max)))


def whole_devices(free: np.ndarray, num: int) -> tuple[int, ...]:
    """The lowest-numbered `num` fully free devices."""
    return tuple(int(g) for g in np.flatnonzero(free >= MILLI)[:num])


class Placer:
    """Chooses nodes and devices for pods of one `PackState` under one policy."""

    def __init__(self, state: PackState, policy: str, *, shapes: Shapes | None = None,
                 rng: np.random.Generator | None = None, tie_break: str = "name") -> None:
        if policy not in POLICIES:
            raise ConfigError("policy", f"{policy!r} is not one of {list(POLICIES)}")
        if policy == "fgd" and shapes is None:
            raise ConfigError("shapes", "the fgd policy needs the workload's typical shapes")
        self.state = state
        self.policy = policy
        self.shapes = shapes
        if tie_break not in ("name", "random"):
            raise ConfigError("tie_break", f"{tie_break!r} is not 'name' or 'random'")
        self.tie_break = tie_break
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.name_rank = np.argsort(np.argsort(np.array(state.node_names, dtype=object)))
        if shapes is not None:
            self.access = shapes.access(state.models)
            self._frag_now = np.zeros(state.n)
            self._frag_version = np.full(state.n, -1, dtype=np.int64)
        # per (cpu, num, milli): FGD scores, chosen device and the node versions they are for
        self._fgd_cache: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    # --- the policy -----------------------------------------------------------------------

    def choose(self, p: int, mask: np.ndarray | None = None) -> tuple[int, tuple[int, ...]] | None:
        """Node and devices for pod `p` (optionally only among `mask`), or None if none fits."""
        ok = self.state.feasible(p)
        if mask is not None:
            ok &= mask
        nodes = np.flatnonzero(ok)
        if not len(nodes):
            return None
        scores, devices = self.scores(p, nodes)
        best = np.flatnonzero(scores == scores.max())
        if len(best) == 1:
            pick = best[0]
        elif self.tie_break == "name":
            pick = best[np.argmin(self.name_rank[nodes[best]])]
        else:
            pick = best[self.rng.integers(len(best))]
        node = int(nodes[pick])
        return node, self.devices(p, node, None if devices is None else int(devices[pick]))

    def place(self, p: int, mask: np.ndarray | None = None) -> bool:
        choice = self.choose(p, mask)
        if choice is None:
            return False
        self.state.bind(p, *choice)
        return True

    def scores(self, p: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Integer scores of pod `p` on `nodes` (all feasible), and the FGD device choice."""
        s = self.state
        if self.policy == "default":
            cpu_after = s.cpu_cap[nodes] - s.cpu_free[nodes] + s.pod_cpu[p]
            mem_after = s.mem_cap[nodes] - s.mem_free[nodes] + s.pod_mem[p]
            cpu_cap = np.maximum(s.cpu_cap[nodes], 1)
            mem_cap = np.maximum(s.mem_cap[nodes], 1)
            least = ((cpu_cap - cpu_after) * MAX_NODE_SCORE // cpu_cap
                     + (mem_cap - mem_after) * MAX_NODE_SCORE // mem_cap) // 2
            spread = np.abs(cpu_after / cpu_cap - mem_after / mem_cap) / 2
            balanced = ((1 - spread) * MAX_NODE_SCORE).astype(np.int64)
            return least + balanced, None
        if self.policy == "best_fit":
            left = (0.5 * (s.cpu_free[nodes] - s.pod_cpu[p]) / MAX_SPEC_CPU
                    + 0.5 * (s.gpu_free[nodes].sum(axis=1) - s.pod_num[p] * s.pod_milli[p])
                    / MAX_SPEC_GPU)
            return ((1 - left) * MAX_NODE_SCORE).astype(np.int64), None
        return self.fgd_scores(p, nodes)

    def devices(self, p: int, node: int, fgd_device: int | None = None) -> tuple[int, ...]:
        s = self.state
        num, milli = int(s.pod_num[p]), int(s.pod_milli[p])
        if not num:
            return ()
        if milli < MILLI:
            if fgd_device is not None:
                return (fgd_device,)
            return (tightest_device(s.gpu_free[node], milli),)
        return whole_devices(s.gpu_free[node], num)

    # --- FGD ------------------------------------------------------------------------------

    def fragmentation_now(self, nodes: np.ndarray) -> np.ndarray:
        """Current FGD fragmentation of `nodes`, recomputed only where they changed."""
        s = self.state
        stale = nodes[self._frag_version[nodes] != s.version[nodes]]
        if len(stale):
            assert self.shapes is not None  # FGD state (_frag_version above) exists only with shapes
            self._frag_now[stale] = node_fragmentation(s.cpu_free[stale], s.gpu_free[stale],
                                                       s.model[stale], self.shapes, self.access)
            self._frag_version[stale] = s.version[stale]
        return cast(np.ndarray, self._frag_now[nodes])

    def fgd_scores(self, p: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = self.state
        cpu, num, milli = int(s.pod_cpu[p]), int(s.pod_num[p]), int(s.pod_milli[p])
        key = (cpu, num, milli)
        cached = self._fgd_cache.get(key)
        if cached is None:
            cached = (np.zeros(s.n, dtype=np.int64), np.zeros(s.n, dtype=np.int64),
                      np.full(s.n, -1, dtype=np.int64))
            self._fgd_cache[key] = cached
        scores, device, seen = cached
        stale = nodes[seen[nodes] != s.version[nodes]]
        if len(stale):
            sc, dev = self._fgd_compute(stale, cpu, num, milli)
            scores[stale], device[stale], seen[stale] = sc, dev, s.version[stale]
        return scores[nodes], device[nodes]

    def _fgd_compute(self, nodes: np.ndarray, cpu: int, num: int,
                     milli: int) -> tuple[np.ndarray, np.ndarray]:
        s = self.state
        before = self.fragmentation_now(nodes)
        assert self.shapes is not None  # as fragmentation_now's
        gpu = s.gpu_free[nodes]
        cpu_after = s.cpu_free[nodes] - cpu
        if num == 1 and milli < MILLI:  # shared: try every device that fits
            m, width = gpu.shape
            trial = np.repeat(gpu[:, None, :], width, axis=1)  # (m, device tried, devices)
            idx = np.arange(width)
            trial[:, idx, idx] -= milli
            fits = gpu >= milli
            after = node_fragmentation(np.repeat(cpu_after, width), trial.reshape(m * width, width),
                                       np.repeat(s.model[nodes], width), self.shapes, self.access)
            score = _fgd_score(np.repeat(before, width) - after).reshape(m, width)
            score = np.where(fits, score, -1)
            dev = np.argmax(score, axis=1)
            return score[np.arange(m), dev], dev
        trial = gpu.copy()
        if num:
            full = gpu >= MILLI
            take = full & (np.cumsum(full, axis=1) <= num)
            trial[take] = 0
        after = node_fragmentation(cpu_after, trial, s.model[nodes], self.shapes, self.access)
        return _fgd_score(before - after), np.zeros(len(nodes), dtype=np.int64)


def _fgd_score(decrease: np.ndarray) -> np.ndarray:
    """The simulator's `int64(sigmoid(decrease / 1000) * 100)`."""
    return (MAX_NODE_SCORE / (1 + np.exp(-decrease / 1000.0))).astype(np.int64)
