"""A pool's model server as a Deployment or a LeaderWorkerSet (pure).

llm-d serves a model that fits one node with a Deployment, and one that spans nodes
(Llama-405B, DeepSeek with wide expert parallelism) with a `leaderworkerset.x-k8s.io/v1`
LeaderWorkerSet: `spec.replicas` groups of `spec.leaderWorkerTemplate.size` pods, a leader
(from `leaderTemplate`, else `workerTemplate`) and size-1 workers (`workerTemplate`). A group
is one replica: the InferencePool reaches it through its leader, it serves only once every
pod of it is Ready, and it needs `size` pods' GPUs at once.

The rollout makes the new version as the same kind as the old. Everything that depends on
which kind it is lives here: where the pod templates are, how many GPUs one replica needs,
which pods belong to one replica, the API to scale or delete it by.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuops.common.podfacts import GPU
from gpuops.common.quantity import parse_quantity
from gpuops.tasks.rollout.capacity import Room, room_for

Obj = Mapping[str, Any]
DEPLOYMENT = "Deployment"
LWS = "LeaderWorkerSet"
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"
LWS_NAME = LWS_PREFIX + "name"
LWS_GROUP_INDEX = LWS_PREFIX + "group-index"
LWS_WORKER_INDEX = LWS_PREFIX + "worker-index"


@dataclass(frozen=True)
class WorkloadApi:
    kind: str
    api_version: str
    plural: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


APIS = {DEPLOYMENT: WorkloadApi(DEPLOYMENT, "apps/v1", "deployments"),
        LWS: WorkloadApi(LWS, LWS_API, "leaderworkersets")}


def api_of(kind: str) -> WorkloadApi:
    return APIS[kind]


def is_lws(obj: Obj) -> bool:
    return obj.get("kind") == LWS


def group_size(obj: Obj) -> int:
    """Pods per replica: a LeaderWorkerSet's `size`, 1 for a Deployment."""
    if not is_lws(obj):
        return 1
    size = (((obj.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size"))
    return size if isinstance(size, int) and size >= 1 else 1


def template_paths(obj: Obj) -> list[tuple[str, ...]]:
    """Where the pod templates are in `spec`, the one serving requests first: a Deployment's
    `template`; a LeaderWorkerSet's `leaderTemplate` (when given) and `workerTemplate`."""
    if not is_lws(obj):
        return [("template",)]
    lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
    paths: list[tuple[str, ...]] = (
        [("leaderWorkerTemplate", "leaderTemplate")] if lwt.get("leaderTemplate") else [])
    if lwt.get("workerTemplate") or not paths:
        paths.append(("leaderWorkerTemplate", "workerTemplate"))
    return paths


def template_at(obj: Obj, path: Sequence[str]) -> Mapping[str, Any]:
    node: Any = obj.get("spec") or {}
    for key in path:
        node = (node or {}).get(key) or {}
    return node


def serving_template(obj: Obj) -> Mapping[str, Any]:
    """The template of the pods that serve requests (a Deployment's, an LWS's leader's)."""
    return template_at(obj, template_paths(obj)[0])


def worker_template(obj: Obj) -> Mapping[str, Any] | None:
    """A LeaderWorkerSet's worker template when its workers differ from its leader."""
    paths = template_paths(obj)
    return template_at(obj, paths[1]) if len(paths) > 1 else None


def _container_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    wanted = (resources.get("limits") or {}).get(GPU) or \
        (resources.get("requests") or {}).get(GPU) or 0
    return int(parse_quantity(wanted))


def pod_gpus(template: Mapping[str, Any]) -> int:
    """GPUs one pod of `template` holds: its containers', or an init container's if more."""
    spec = template.get("spec") or {}
    return max(sum(_container_gpus(c) for c in spec.get("containers") or ()),
               max((_container_gpus(c) for c in spec.get("initContainers") or ()), default=0))


def gpus_per_replica(obj: Obj) -> int:
    """A replica's GPUs: a Deployment pod's; an LWS group's, its leader's and size-1 workers'."""
    size = group_size(obj)
    leader = pod_gpus(serving_template(obj))
    worker = worker_template(obj)
    return leader + (size - 1) * (pod_gpus(worker) if worker is not None else leader)


def pod_gpu_needs(obj: Obj) -> list[int]:
    """Each pod of one replica's GPUs, the leader first."""
    worker = worker_template(obj)
    leader = pod_gpus(serving_template(obj))
    return [leader] + [pod_gpus(worker) if worker is not None else leader] * (
        group_size(obj) - 1)


def controller_labels(keys: Iterable[str]) -> list[str]:
    """The keys only the LeaderWorkerSet controller sets (a template cannot change them)."""
    return [k for k in keys if k.startswith(LWS_PREFIX)]


# --- pods ----------------------------------------------------------------------------------------

def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and not (pod.get("metadata") or {}).get(
        "deletionTimestamp") and any(c.get("type") == "Ready" and c.get("status") == "True"
                                     for c in status.get("conditions") or ())


def ready_groups(lws_name: str, size: int, pods: Iterable[Obj]) -> set[str]:
    """The leaders (pod names) of `lws_name`'s groups whose `size` pods are all Ready."""
    ready: dict[str, set[int]] = {}
    leaders: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LWS_NAME) != lws_name or not _ready(pod):
            continue
        group, worker = labels.get(LWS_GROUP_INDEX, ""), labels.get(LWS_WORKER_INDEX, "")
        if not group.isdigit() or not worker.isdigit():
            continue
        ready.setdefault(group, set()).add(int(worker))
        if worker == "0":
            leaders[group] = str(meta.get("name"))
    return {leaders[g] for g, workers in ready.items()
            if g in leaders and workers >= set(range(size))}


def workload_pods(kind: str, name: str, pods: Iterable[Obj]) -> list[Obj]:
    """An LWS's pods, leaders and workers, not finished (a Deployment's: none told here)."""
    if kind != LWS:
        return []
    return [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(LWS_NAME)
            == name and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


def lws_of_pods(pods: Iterable[Obj]) -> set[str]:
    """The LeaderWorkerSets the pods belong to, by the label the lws controller sets."""
    return {str(((p.get("metadata") or {}).get("labels") or {})[LWS_NAME]) for p in pods
            if LWS_NAME in ((p.get("metadata") or {}).get("labels") or {})}


# --- room ----------------------------------------------------------------------------------------

def room_for_replicas(workload: Obj, nodes: Sequence[Obj], pods: Sequence[Obj]) -> Room:
    """Room for the new version's replicas on free GPUs now (`capacity.room_for`). A
    LeaderWorkerSet's replica is a group: it fits when all its `size` pods do, each on a node
    its template allows with its GPUs free, so groups that fit = pods that fit // size."""
    template = serving_template(workload)
    size = group_size(workload)
    per_pod = pod_gpus(template)
    room = room_for(template.get("spec") or {}, per_pod, nodes, pods)
    if size == 1:
        return room
    worker = worker_template(workload)
    if worker is not None and pod_gpus(worker) != per_pod:
        # leader and workers differ: as many groups as the larger pod leaves room for
        per_pod = max(per_pod, pod_gpus(worker))
        room = room_for(template.get("spec") or {}, per_pod, nodes, pods)
    return Room(room.fits // size, room.free_gpus, room.nodes)
