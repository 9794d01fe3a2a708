"""How a repack plan is carried out, and how to tell it worked or reality went another way (pure).

The mechanism (issue 17, "Execute"), chosen because it leaves the binding to kube-scheduler
and every step is something Kubernetes lets an outside component do:

1. the nodes the plan frees (the nodes moved pods leave) get a temporary taint
   `gpuops.io/rebalance=<flow run id>:NoSchedule`: the moved pods' replacements, and any
   other new pod, cannot land back there;
2. the pending pods the plan lands there get the matching toleration (`Equal`, the run's
   id: it tolerates this run's taint only) — adding a toleration is an allowed pod update;
3. each pending pod gets `status.nominatedNodeName` = its planned node (KEP-5278): the
   scheduler tries that node first and holds its room against pods of equal or lower
   priority while the moved pods terminate;
4. the moved pods are evicted through the Eviction API (PodDisruptionBudgets honoured);
   their controllers create replacements, which the scheduler places on untainted nodes.

Then the run waits until every pending pod is bound where the plan says and every moved
pod's replacement is bound and not back on the node it left, and removes the taints and
nominations (`leftovers.py` finds them again after a crash). A node that is both left by a
moved pod and the destination of another is not tainted (the taint would keep that
destination's pod out): there the nomination alone holds the room, and the wait checks
that no replacement went back.

`check_before_acting` re-reads the plan against the cluster as it is after approval (the
approval is for that plan: anything changed means stop, not improvise); `check_progress`
judges the cluster while waiting: done, still waiting (and on what), or diverged (and why).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpuops.tasks.rebalance.from_kube import ClusterView
from gpuops.tasks.rebalance.model import MILLI
from gpuops.tasks.rebalance.placement import tightest_device, whole_devices
from gpuops.tasks.rebalance.repack import RepackPlan
from gpuops.tasks.rebalance.state import PackState


@dataclass(frozen=True)
class PodStep:
    """One pod the execution acts on: its instance and the node the step is about."""

    key: str  # namespace/name
    uid: str
    node: str  # pending pod: where it lands; moved pod: the node it leaves
    to_node: str = ""  # moved pod: where the plan expects its replacement
    owner: str = ""  # moved pod: "Kind/namespace/name" of its controller

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


@dataclass(frozen=True)
class Steps:
    """What the execution changes, in order: taints, tolerations and nominations, evictions."""

    taint_nodes: tuple[str, ...]
    land: tuple[PodStep, ...]  # pending pods: tolerate (if their node is tainted), nominate
    evict: tuple[PodStep, ...]
    nodes: tuple[str, ...]  # every node involved: the slots the run holds

    @property
    def empty(self) -> bool:
        return not self.land and not self.evict


def execution_steps(plan: RepackPlan, view: ClusterView) -> Steps:
    sources = {m.from_node for m in plan.moves}
    destinations = {m.to_node for m in plan.moves}
    taint = tuple(sorted(sources - destinations))
    land = tuple(PodStep(lnd.pod, view.pods[lnd.pod].uid, lnd.node)
                 for lnd in sorted(plan.landings, key=lambda x: x.pod))
    evict = []
    for m in sorted(plan.moves, key=lambda x: x.pod):
        ref = view.pods[m.pod]
        evict.append(PodStep(m.pod, ref.uid, m.from_node, m.to_node, _owner(ref.key,
                                                                            ref.owner_kind,
                                                                            ref.owner_name)))
    nodes = tuple(sorted(sources | destinations | {s.node for s in land}))
    return Steps(taint, land, tuple(evict), nodes)


def _owner(key: str, kind: str | None, name: str | None) -> str:
    return f"{kind}/{key.split('/', 1)[0]}/{name}" if kind and name else ""


# --- before acting: does the approved plan still hold? --------------------------------------

def check_before_acting(plan: RepackPlan, planned: ClusterView, now: ClusterView) -> list[str]:
    """Why the plan no longer fits the cluster `now` (empty: it still does). `planned` is
    the view the plan was made (and approved) on: pods on a node that were not there then
    are named as newcomers."""
    problems: list[str] = []
    running = {p.key: p for p in now.cluster.running}
    pending = {p.key: p for p in now.cluster.pending}
    for m in plan.moves:
        pod = running.get(m.pod)
        if pod is None or pod.node != m.from_node or \
                now.pods[m.pod].uid != planned.pods[m.pod].uid:
            problems.append(f"pod {m.pod} is no longer running on node {m.from_node}")
    for lnd in plan.landings:
        if lnd.pod not in pending or now.pods[lnd.pod].uid != planned.pods[lnd.pod].uid:
            problems.append(f"pod {lnd.pod} is no longer pending")
    if problems:
        return problems
    state, pods = PackState.from_cluster(now.cluster)
    row = {p.key: i for i, p in enumerate(pods)}
    node_index = {name: i for i, name in enumerate(state.node_names)}
    for m in plan.moves:
        state.unbind(row[m.pod])
    was_on = _pods_by_node(planned)
    for lnd in plan.landings:
        p, n = row[lnd.pod], node_index[lnd.node]
        if not state.feasible(p, np.array([n]))[0]:
            newcomers = sorted(k for k in _pods_by_node(now).get(lnd.node, ())
                               if k not in was_on.get(lnd.node, set()))
            who = f": a new pod took the space ({', '.join(newcomers)})" if newcomers else ""
            problems.append(f"pod {lnd.pod} no longer fits on node {lnd.node} once the moves "
                            f"are made{who}")
            continue
        state.bind(p, n, _devices(state, p, n))
    for m in plan.moves:
        p, n = row[m.pod], node_index[m.to_node]
        if not state.feasible(p, np.array([n]))[0]:
            problems.append(f"pod {m.pod} no longer fits where the plan moves it "
                            f"(node {m.to_node})")
            continue
        state.bind(p, n, _devices(state, p, n))
    return problems


def _devices(state: PackState, p: int, n: int) -> tuple[int, ...]:
    num, milli = int(state.pod_num[p]), int(state.pod_milli[p])
    if not num:
        return ()
    if milli >= MILLI:
        return whole_devices(state.gpu_free[n], num)
    return (tightest_device(state.gpu_free[n], milli),)


def _pods_by_node(view: ClusterView) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pod in view.cluster.running:
        out.setdefault(pod.node or "", set()).add(pod.key)
    return out


# --- while waiting ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Progress:
    done: bool
    waiting: tuple[str, ...]  # what has not happened yet
    diverged: tuple[str, ...]  # what happened otherwise than planned (stop and report)
    landed: tuple[tuple[str, str], ...] = ()  # (pending pod, node) bound as planned
    replaced: tuple[tuple[str, str, str], ...] = ()  # (moved pod, replacement, its node)
    blocked: tuple[str, ...] = ()  # why acting stopped early (a PDB refused an eviction)
    refused: tuple[str, ...] = ()  # the pods whose eviction a PodDisruptionBudget refused


@dataclass(frozen=True)
class LivePod:
    """A pod as the wait reads it (from `ClusterView` or straight from the API)."""

    key: str
    uid: str
    node: str | None  # None: pending
    owner: str  # "Kind/namespace/name" or ""
    gpus_milli: int
    terminating: bool = False


def live_pods(view: ClusterView) -> list[LivePod]:
    return [LivePod(ref.key, ref.uid, ref.node, _owner(ref.key, ref.owner_kind,
                                                       ref.owner_name),
                    ref.gpus_milli, ref.key in view.terminating)
            for ref in view.pods.values()]


def check_progress(steps: Steps, before: Iterable[LivePod], now: Iterable[LivePod]
                   ) -> Progress:
    """Where the execution stands: `before` are the pods when the run started acting."""
    before = list(before)
    now = list(now)
    by_uid = {p.uid: p for p in now}
    before_uids = {p.uid for p in before}
    waiting: list[str] = []
    diverged: list[str] = []
    landed: list[tuple[str, str]] = []
    replaced: list[tuple[str, str, str]] = []
    landing_uids = {s.uid for s in steps.land}
    for step in steps.land:
        pod = by_uid.get(step.uid)
        if pod is None or pod.terminating:
            diverged.append(f"pending pod {step.key} was deleted")
        elif pod.node == step.node:
            landed.append((step.key, step.node))
        elif pod.node is not None:
            diverged.append(f"pod {step.key} was scheduled on node {pod.node}, not on "
                            f"{step.node} as planned")
        else:
            newcomers = sorted(p.key for p in now if p.node == step.node and p.gpus_milli
                               and p.uid not in before_uids and p.uid not in landing_uids)
            if newcomers:
                diverged.append(f"a new pod took the space on node {step.node} planned for "
                                f"{step.key}: {', '.join(newcomers)}")
            else:
                waiting.append(f"pod {step.key} to be scheduled on node {step.node}")
    by_owner: dict[str, list[PodStep]] = {}
    for step in steps.evict:
        gone = by_uid.get(step.uid)
        if gone is not None and not gone.terminating:
            waiting.append(f"pod {step.key} to be evicted from node {step.node}")
        by_owner.setdefault(step.owner, []).append(step)
    for owner, moved in sorted(by_owner.items()):
        if not owner:
            continue
        news = sorted((p for p in now if p.owner == owner and p.uid not in before_uids
                       and not p.terminating), key=lambda p: p.key)
        left = {s.node for s in moved}
        back = [p for p in news if p.node in left]
        for p in back:
            diverged.append(f"{p.key}, a replacement of a moved pod of {owner}, was scheduled "
                            f"back on node {p.node}")
        bound = [p for p in news if p.node is not None and p.node not in left]
        for step, p in zip(moved, bound, strict=False):
            replaced.append((step.key, p.key, p.node or ""))
        missing = len(moved) - len(bound) - len(back)
        if missing > 0:
            unbound = [p.key for p in news if p.node is None]
            what = f" ({', '.join(unbound)} pending)" if unbound else ""
            waiting.append(f"{missing} replacement(s) of the moved pods of {owner} to be "
                           f"scheduled{what}")
    return Progress(done=not waiting and not diverged, waiting=tuple(waiting),
                    diverged=tuple(diverged), landed=tuple(landed), replaced=tuple(replaced))
