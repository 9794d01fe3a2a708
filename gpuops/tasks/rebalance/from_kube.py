"""Kubernetes objects (the API's JSON as plain dicts) into the planner's model (pure).

Why a converter of its own: the planner reads frozen, validated dataclasses (`model.py`);
the cluster answers with nodes, pods and PodDisruptionBudgets in the API's shape. Reading
them one way here keeps the flow, the sensor and the tests from disagreeing on a corner:

- GPUs: whole GPUs are `nvidia.com/gpu`, a share of one GPU `gpuops.io/gpu-milli` (the
  design of simcluster and gpuops, `simcluster/core/gpus.py`); a container's limit counts,
  else its request; init containers run one at a time, so a pod asks the larger of its
  containers' sum and its largest init container (kube-scheduler's rule).
- Which devices a running pod holds: the scheduler's record `gpuops.io/gpu-index`; a pod
  without one (a cluster with no GPU-sharing scheduler) is given the lowest free devices,
  as the device plugin would, after every recorded one.
- A pod still terminating holds its node's resources (kube-scheduler counts it) but can
  not be moved: it is kept as a running pod the planner must leave where it is.
- Pending pods: GPU pods without a node that are not terminating; CPU-only pending pods
  are no concern of a GPU repack.
- A pod's PodDisruptionBudget: of the PDBs of its namespace whose selector matches it, the
  one with the fewest disruptions allowed (the Eviction API refuses when any says no).
- Required node affinity may select by field (`matchFields: metadata.name`, which
  DaemonSet pods use): the model's nodes carry their name as the label `metadata.name` so
  one requirement type serves both.
- Policy from the RebalancePolicy Block arrives as plain values: a custom opt-out
  annotation is read as `gpuops.io/do-not-move`, per-owner-kind move costs apply where the
  pod has no `gpuops.io/move-cost` annotation.
- A node that is not Ready counts as cordoned: nothing should be planned onto it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuops.common.annotations import DO_NOT_MOVE, GPU_INDEX, MOVE_COST
from gpuops.common.quantity import parse_quantity
from gpuops.tasks.rebalance.model import (
    MILLI,
    Cluster,
    Node,
    Pdb,
    Pod,
    Requirement,
    Taint,
    Toleration,
)

Obj = Mapping[str, Any]
GPU = "nvidia.com/gpu"
GPU_MILLI = "gpuops.io/gpu-milli"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's node label
NAME_FIELD = "metadata.name"


@dataclass(frozen=True)
class PodRef:
    """What acting on a planned pod needs and the model does not carry."""

    key: str  # namespace/name
    uid: str
    node: str | None
    owner_kind: str | None
    owner_name: str | None
    gpus_milli: int  # total milli-GPU asked


@dataclass(frozen=True)
class ClusterView:
    """The planner's model of the cluster and, per pod key, what acting on it needs."""

    cluster: Cluster
    pods: dict[str, PodRef]
    skipped: dict[str, str] = field(default_factory=dict)  # pod key -> why left out
    terminating: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ConversionPolicy:
    """The RebalancePolicy values the conversion applies (plain, so this module stays pure)."""

    opt_out_annotation: str = DO_NOT_MOVE
    move_cost_by_owner_kind: Mapping[str, float] = field(default_factory=dict)


def cluster_view(nodes: Sequence[Obj], pods: Sequence[Obj], pdbs: Sequence[Obj] = (), *,
                 policy: ConversionPolicy | None = None) -> ClusterView:
    """The model of `nodes`, `pods` and `pdbs` as listed from the API (see the module
    docstring). Pods that cannot be placed in the model (on an unknown node, asking for a
    malformed quantity) are left out and listed in `skipped` with why."""
    policy = policy or ConversionPolicy()
    model_nodes = [node_model(n) for n in nodes]
    by_name = {n.name: n for n in model_nodes}
    budgets = [(b, _pdb_name(b)) for b in pdbs]
    running: list[Pod] = []
    pending: list[Pod] = []
    refs: dict[str, PodRef] = {}
    skipped: dict[str, str] = {}
    terminating: set[str] = set()
    used: dict[str, dict[int, int]] = {}  # node -> device -> milli used
    unrecorded: list[tuple[Obj, str]] = []
    for pod in sorted(pods, key=_pod_key):
        key = _pod_key(pod)
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        node_name = (pod.get("spec") or {}).get("nodeName")
        try:
            whole, milli = pod_gpu_request(pod)
        except ValueError as e:
            skipped[key] = str(e)
            continue
        if node_name is None:
            if (whole or milli) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                pending.append(_pod(pod, policy, budgets, node=None, gpu_ids=()))
                refs[key] = _ref(pod, None, whole, milli)
            continue
        if node_name not in by_name:
            skipped[key] = f"node {node_name!r} is not listed"
            continue
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            terminating.add(key)
        count = whole or (1 if milli else 0)
        share = MILLI if whole else milli
        ids = _recorded_ids(pod, by_name[node_name].gpus, count)
        if ids is None:
            unrecorded.append((pod, node_name))
            continue
        for gid in ids:
            used.setdefault(node_name, {})[gid] = used.get(node_name, {}).get(gid, 0) + share
        running.append(_pod(pod, policy, budgets, node=node_name, gpu_ids=ids,
                            terminating=key in terminating))
        refs[key] = _ref(pod, node_name, whole, milli)
    for pod, node_name in unrecorded:
        key = _pod_key(pod)
        whole, milli = pod_gpu_request(pod)
        ids = _assign_devices(used.setdefault(node_name, {}), by_name[node_name].gpus,
                              whole, milli)
        if ids is None:
            skipped[key] = f"node {node_name!r} has no free GPU left for it"
            continue
        running.append(_pod(pod, policy, budgets, node=node_name, gpu_ids=ids,
                            terminating=key in terminating))
        refs[key] = _ref(pod, node_name, whole, milli)
    model_pdbs = tuple(Pdb(name, max(0, int((b.get("status") or {}).get(
        "disruptionsAllowed") or 0))) for b, name in budgets)
    cluster = Cluster(nodes=tuple(model_nodes), running=tuple(running),
                      pending=tuple(pending), pdbs=model_pdbs)
    return ClusterView(cluster, refs, skipped, frozenset(terminating))


# --- nodes -----------------------------------------------------------------------------------

def node_model(node: Obj) -> Node:
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    alloc = status.get("allocatable") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or [])
    labels = {**(meta.get("labels") or {}), NAME_FIELD: meta["name"]}
    return Node(name=meta["name"], cpu_milli=_milli(alloc.get("cpu", 0)),
                memory_mib=_mib(alloc.get("memory", 0)), gpus=int(_quantity(alloc.get(GPU, 0))),
                gpu_model=labels.get(PRODUCT_LABEL, ""), labels=labels,
                taints=tuple(Taint(t.get("key", ""), t.get("value") or "",
                                   t.get("effect") or "NoSchedule")
                             for t in spec.get("taints") or []),
                cordoned=bool(spec.get("unschedulable")) or not ready)


# --- pods ------------------------------------------------------------------------------------

def pod_gpu_request(pod: Obj) -> tuple[int, int]:
    """(whole GPUs, milli of one shared GPU) a pod asks for; ValueError names a bad field."""
    spec = pod.get("spec") or {}
    whole = _container_max(spec, GPU)
    milli = _container_max(spec, GPU_MILLI)
    if whole and milli:
        raise ValueError(f"asks for both {GPU} and {GPU_MILLI}")
    if milli >= MILLI:
        raise ValueError(f"{GPU_MILLI}: {milli} is a whole GPU or more; ask {GPU}")
    return whole, milli


def _container_max(spec: Obj, resource: str) -> int:
    def asked(container: Obj) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(resource) or \
            (resources.get("requests") or {}).get(resource) or 0
        number = _quantity(value)
        if number != int(number):
            raise ValueError(f"{resource}: {value!r} is not a whole number")
        return int(number)

    main = sum(asked(c) for c in spec.get("containers") or [])
    init = max((asked(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _requests(spec: Obj, resource: str, convert: Any) -> int:
    def asked(container: Obj) -> int:
        value = ((container.get("resources") or {}).get("requests") or {}).get(resource)
        return convert(value) if value is not None else 0

    main = sum(asked(c) for c in spec.get("containers") or [])
    init = max((asked(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _pod(pod: Obj, policy: ConversionPolicy, budgets: list[tuple[Obj, str]], *,
         node: str | None, gpu_ids: tuple[int, ...], terminating: bool = False) -> Pod:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    whole, milli = pod_gpu_request(pod)
    annotations = dict(meta.get("annotations") or {})
    if policy.opt_out_annotation != DO_NOT_MOVE and \
            annotations.get(policy.opt_out_annotation, "").lower() == "true":
        annotations[DO_NOT_MOVE] = "true"
    owner = _controller(meta)
    owner_kind = owner.get("kind") if owner else None
    move_cost = None
    if MOVE_COST not in annotations and owner_kind is not None and \
            owner_kind in policy.move_cost_by_owner_kind:
        move_cost = float(policy.move_cost_by_owner_kind[owner_kind])
    volumes = spec.get("volumes") or []
    gpu_models: frozenset[str] = frozenset()
    selector = dict(spec.get("nodeSelector") or {})
    if PRODUCT_LABEL in selector:
        gpu_models = frozenset({selector[PRODUCT_LABEL]})
    return Pod(
        name=meta["name"], namespace=meta.get("namespace") or "default",
        cpu_milli=_requests(spec, "cpu", _milli), memory_mib=_requests(spec, "memory", _mib),
        gpu_count=whole or (1 if milli else 0), gpu_milli=MILLI if whole else milli,
        gpu_models=gpu_models, priority=int(spec.get("priority") or 0),
        owner_kind=None if terminating else owner_kind,
        pdb=_pdb_of(pod, budgets), node=node, gpu_ids=gpu_ids, node_selector=selector,
        affinity=_required_affinity(spec), tolerations=tuple(
            Toleration(t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "",
                       t.get("effect") or "") for t in spec.get("tolerations") or []),
        annotations=annotations, move_cost=move_cost,
        local_storage=any("emptyDir" in v or "hostPath" in v for v in volumes))


def _ref(pod: Obj, node: str | None, whole: int, milli: int) -> PodRef:
    owner = _controller(pod["metadata"])
    return PodRef(key=_pod_key(pod), uid=pod["metadata"].get("uid", ""), node=node,
                  owner_kind=owner.get("kind") if owner else None,
                  owner_name=owner.get("name") if owner else None,
                  gpus_milli=whole * MILLI + milli)


def _controller(meta: Obj) -> Obj | None:
    return next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)


def _required_affinity(spec: Obj) -> tuple[tuple[Requirement, ...], ...]:
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = []
    for term in required.get("nodeSelectorTerms") or []:
        reqs = [Requirement(e["key"], e["operator"], tuple(e.get("values") or ()))
                for e in term.get("matchExpressions") or []]
        reqs += [Requirement(NAME_FIELD if e["key"] == NAME_FIELD else e["key"], e["operator"],
                             tuple(e.get("values") or ()))
                 for e in term.get("matchFields") or []]
        terms.append(tuple(reqs))
    return tuple(terms)


def _recorded_ids(pod: Obj, gpus: int, count: int) -> tuple[int, ...] | None:
    """The devices the scheduler recorded, if they make sense for the node; () for none."""
    if not count:
        return ()
    raw = ((pod["metadata"].get("annotations") or {}).get(GPU_INDEX) or "").strip()
    try:
        ids = tuple(int(x) for x in raw.split(",")) if raw else ()
    except ValueError:
        ids = ()
    if len(ids) != count or len(set(ids)) != count or not all(0 <= i < gpus for i in ids):
        return None
    return ids


def _assign_devices(used: dict[int, int], gpus: int, whole: int, milli: int
                    ) -> tuple[int, ...] | None:
    if whole:
        free = [g for g in range(gpus) if not used.get(g)]
        if len(free) < whole:
            return None
        ids = tuple(free[:whole])
        for g in ids:
            used[g] = MILLI
        return ids
    fits = [g for g in range(gpus) if used.get(g, 0) + milli <= MILLI]
    if not fits:
        return None
    g = max(fits, key=lambda d: (used.get(d, 0), -d))  # best fit, as a sharing scheduler
    used[g] = used.get(g, 0) + milli
    return (g,)


# --- PodDisruptionBudgets --------------------------------------------------------------------

def _pdb_name(pdb: Obj) -> str:
    return f"{pdb['metadata'].get('namespace') or 'default'}/{pdb['metadata']['name']}"


def _pdb_of(pod: Obj, budgets: list[tuple[Obj, str]]) -> str | None:
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    matching = [(int((b.get("status") or {}).get("disruptionsAllowed") or 0), name)
                for b, name in budgets
                if (b["metadata"].get("namespace") or "default") == (meta.get("namespace")
                                                                       or "default")
                and selector_matches((b.get("spec") or {}).get("selector"), labels)]
    return min(matching)[1] if matching else None


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against labels; a PDB with no (or an empty) selector selects none
    in policy/v1 when absent and all when empty (`{}`)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not Requirement(expr["key"], expr["operator"],
                           tuple(expr.get("values") or ())).matches(labels):
            return False
    return True


# --- quantities -----------------------------------------------------------------------------

def _quantity(value: Any) -> Any:
    return parse_quantity(value) if value not in (None, "") else 0


def _milli(value: Any) -> int:
    return int(_quantity(value) * 1000)


def _mib(value: Any) -> int:
    return int(_quantity(value) / (1 << 20))


def _pod_key(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"
