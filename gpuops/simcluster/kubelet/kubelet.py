"""The kubelet of every node: runs the pods bound to it, over virtual time.

The lifecycle itself is pure (`lifecycle.py` and friends); this module is its plumbing:
a store listener marks pods whose binding, spec or deletion changed (and pods waiting for a
ConfigMap or Secret that appeared, or for their node), a timer per pod wakes it at its next
deadline, and each sync applies the due transitions, writes the events and log lines they
left, and writes the pod's status only when it changed. A node with 100,000 pods costs the
pods that have something due, never a scan of all of them.

Pods on a node that is NotReady are left as they are (no kubelet is posting their status)
until it is Ready again; pods bound to a node that does not exist are force-deleted after
40 s, as pod GC does, and so are the pods of a deleted node. Annotations are described in
`spec.py`, fault kinds in `faults.py`; `KubeletConfig` (a scenario's `sim.kubelet`) sets
image pull times and the `Tunables`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core import errors
from ..core.clock import VirtualClock
from ..core.faults import FaultRegistry
from ..core.gpus import GpuAllocations
from ..core.logs import LogStore
from ..core.recorder import Recorder
from ..core.resources import ResourceType
from ..core.store import Store
from ..core.versions import LoadTimes
from ..core.workqueue import ControllerLoop
from .containerlogs import LogContext
from .env import config_values, container_environment
from .faults import FaultBook, register_kubelet_faults
from .lifecycle import (
    advance,
    begin_termination,
    fail_pod,
    flush_steady_lines,
    recheck_config,
    replan,
    update_spec,
)
from .node import NodeInfo, record_xid
from .runtime import Fault, Outbox, PodKey, PodRuntime, Tunables, new_pod_runtime
from .spec import ConfigRef, ContainerSpec, PullTimes, pod_spec_view
from .status import render_status

Obj = dict[str, Any]
ORPHAN_GRACE_S = 40.0  # pod GC's quarantine for pods bound to a node that does not exist
TERMINAL = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True)
class KubeletConfig:
    pulls: PullTimes = dataclasses.field(default_factory=PullTimes)
    tunables: Tunables = dataclasses.field(default_factory=Tunables)


@dataclasses.dataclass(frozen=True)
class NodeKey:
    """Work about a node (it appeared, changed readiness, or went away)."""

    name: str


class _World:
    """What the lifecycle may ask about the world: images, ConfigMaps and Secrets, faults."""

    def __init__(self, kubelet: Kubelet) -> None:
        self.k = kubelet

    def pull_error(self, pod: PodRuntime, spec: ContainerSpec) -> str | None:
        return self.k.book.pull_error(pod.key, spec.name, spec.image)

    def image_present(self, pod: PodRuntime, image: str) -> bool:
        faults = self.k.book.by_pod.get(pod.key, {})
        if any(c.spec.image == image and "image-pull" in faults.get(c.name, {})
               for c in pod.containers):
            return False  # an image-pull fault on this pod: its pulls go to the registry
        return image in self.k.images.get(pod.node, ())

    def image_pulled(self, pod: PodRuntime, image: str) -> None:
        self.k.images.setdefault(pod.node, set()).add(image)

    def config_error(self, pod: PodRuntime, refs: tuple[ConfigRef, ...]) -> str | None:
        for ref in refs:
            rt = self.k.configmaps if ref.kind == "configmap" else self.k.secrets
            obj = self.k.store.find(rt, pod.namespace, ref.name)
            if obj is None:
                self.k.blocked_on.setdefault((pod.namespace, ref.kind, ref.name),
                                             set()).add(pod.key)
                return f'{ref.kind} "{ref.name}" not found'
            if ref.key is not None and ref.key not in (obj.get("data") or {}) \
                    and ref.key not in (obj.get("binaryData") or {}) \
                    and ref.key not in (obj.get("stringData") or {}):
                self.k.blocked_on.setdefault((pod.namespace, ref.kind, ref.name),
                                             set()).add(pod.key)
                kind = "ConfigMap" if ref.kind == "configmap" else "Secret"
                return f"couldn't find key {ref.key} in {kind} {pod.namespace}/{ref.name}"
        return None

    def environment(self, pod: PodRuntime, spec: ContainerSpec) -> dict[str, str]:
        def lookup(ref: ConfigRef) -> dict[str, str] | None:
            rt = self.k.configmaps if ref.kind == "configmap" else self.k.secrets
            obj = self.k.store.find(rt, pod.namespace, ref.name)
            return None if obj is None else config_values(obj, ref.kind)
        return container_environment(spec.env, spec.env_from, lookup)

    def faults(self, pod: PodRuntime, container: str) -> list[Fault]:
        return self.k.book.for_container(pod.key, container)

    def fault_fired(self, pod: PodRuntime, container: str, fault: Fault) -> None:
        self.k.book.fired(pod.key, container, fault)


class Kubelet(ControllerLoop[NodeKey | PodKey]):
    name = "kubelet"

    def __init__(self, store: Store, clock: VirtualClock, recorder: Recorder, logs: LogStore,
                 faults: FaultRegistry, gpus: GpuAllocations, config: KubeletConfig,
                 load_times: LoadTimes | None = None) -> None:
        super().__init__(store, clock)
        self.recorder = recorder
        self.logs = logs
        self.gpus = gpus
        self.pods_rt = store.type("pods")
        self.nodes_rt = store.type("nodes")
        self.configmaps = store.type("configmaps")
        self.secrets = store.type("secrets")
        self.pulls = config.pulls
        self.load_times = load_times  # per-version model-load times (`slow-version` faults)
        self.tunables = config.tunables
        self.pods: dict[PodKey, PodRuntime] = {}
        self.by_node: dict[str, set[PodKey]] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.orphans: dict[PodKey, float] = {}
        # When the listener saw a pod bound or marked deleted: the kubelet acts from that
        # instant, even if the clock jumped before its loop got to the pod.
        self.bound_at: dict[PodKey, float] = {}
        self.deleted_at: dict[PodKey, float] = {}
        self.touched_at: dict[PodKey, float] = {}  # spec, faults or a ConfigMap changed
        self.blocked_on: dict[tuple[str, str, str], set[PodKey]] = {}
        self.images: dict[str, set[str]] = {}
        self.book = FaultBook()
        self.world = _World(self)
        self._node_count = 0
        self._writing = False
        for node in store.list(self.nodes_rt):
            self._node_seen(node)
        for pod in store.list(self.pods_rt):
            if (pod.get("spec") or {}).get("nodeName"):
                self.enqueue(_key(pod))
        store.add_listener(self._on_pod, self.pods_rt)
        store.add_listener(self._on_node, self.nodes_rt)
        store.add_listener(self._on_config, self.configmaps, self.secrets)
        logs.before_read = self._flush_logs
        register_kubelet_faults(faults, store, clock, self.book, self)

    # --- listening -----------------------------------------------------------------------------

    def _on_node(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        if event == "DELETED":
            self.enqueue(NodeKey(obj["metadata"]["name"]))
        else:
            self._node_seen(obj)

    def _on_config(self, rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        """A ConfigMap or Secret appeared or changed: pods waiting for it try again."""
        if event == "DELETED":
            return
        meta = obj["metadata"]
        waiting = self.blocked_on.pop(
            (meta.get("namespace", ""), rt.plural[:-1], meta["name"]), None)  # "configmap"
        for key in waiting or ():
            self._touch(key)

    def _on_pod(self, _rt: ResourceType, event: str, obj: Obj, old: Obj | None) -> None:
        if self._writing:
            return  # the kubelet's own status write
        key = _key(obj)
        if not (obj.get("spec") or {}).get("nodeName"):
            return
        if event == "DELETED":
            self.bound_at.pop(key, None)
            self.deleted_at.pop(key, None)
            self.enqueue(key)
            return
        deleting = obj["metadata"].get("deletionTimestamp")
        if deleting and (old is None or not old["metadata"].get("deletionTimestamp")):
            self.deleted_at.setdefault(key, self.clock.time())
        if key not in self.pods:
            if event == "ADDED" or old is None or not (old.get("spec") or {}).get("nodeName"):
                self.bound_at[key] = self.clock.time()
            self.enqueue(key)
            return
        if (event == "ADDED" or old is None or obj.get("spec") != old.get("spec") or deleting
                != old["metadata"].get("deletionTimestamp")
                or obj["metadata"].get("annotations") != old["metadata"].get("annotations")):
            self._touch(key)

    def _touch(self, key: PodKey) -> None:
        """Something about a running pod changed now: its sync applies it as of now."""
        self.touched_at.setdefault(key, self.clock.time())
        self.enqueue(key)

    def _node_seen(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        info = self.nodes.get(name)
        if info is None:
            self.nodes[name] = NodeInfo.of(node, self._node_count)
            self._node_count += 1
            self.enqueue(NodeKey(name))
        elif info.update(node):
            self.enqueue(NodeKey(name))  # back from NotReady: its pods go on

    # --- syncing -------------------------------------------------------------------------------

    def sync(self, key: NodeKey | PodKey) -> None:
        if isinstance(key, NodeKey):
            self._sync_node(key.name)
        else:
            self._sync_pod(key)

    def _sync_node(self, name: str) -> None:
        if self.store.find(self.nodes_rt, None, name) is None:
            self.nodes.pop(name, None)
            self.images.pop(name, None)
            for key in list(self.by_node.pop(name, ())):
                self._force_delete(key)
            return
        for key in list(self.by_node.get(name, ())):
            self.enqueue(key)

    def _sync_pod(self, key: PodKey) -> None:
        now = self.clock.time()
        obj = self.store.find(self.pods_rt, *key)
        pod = self.pods.get(key)
        bound_at = min(self.bound_at.pop(key, now), now)
        touched = self.touched_at.get(key)
        if obj is None:
            if pod is not None:
                self._forget(pod)
            self.orphans.pop(key, None)
            self.touched_at.pop(key, None)
            self.logs.forget_pod(*key)
            return
        meta, node = obj["metadata"], (obj.get("spec") or {}).get("nodeName")
        if pod is not None and (pod.uid != meta["uid"] or pod.node != node):
            self._forget(pod)
            self.logs.forget_pod(*key)
            pod = None
        if not node:
            return
        if pod is None:
            if (obj.get("status") or {}).get("phase") in TERMINAL:
                return
            pod = self._admit(key, obj, node, bound_at if key not in self.orphans else now)
            if pod is None:
                return
        if meta.get("deletionTimestamp") and pod.deletion_grace is None:
            grace = meta.get("deletionGracePeriodSeconds")
            pod.deletion_grace = float(pod.spec.grace_seconds if grace is None else grace)
            pod.deletion_seen_at = min(self.deleted_at.pop(key, now), now)
        out = Outbox()
        info = self.nodes.get(pod.node)
        if info is not None and info.alive and touched is not None:
            # Apply the change (spec, annotations, faults, a ConfigMap) as of when it happened.
            del self.touched_at[key]
            at = min(max(touched, pod.admitted_at), now)
            self._catch_up(pod, at, out)
            view = pod_spec_view(obj, self.pulls, self.load_times)
            if view != pod.spec:
                update_spec(pod, view, at, self.world, out)
            replan(pod, at, self.world)
            recheck_config(pod, at)
        self._step(pod, now, out)

    def _admit(self, key: PodKey, obj: Obj, node: str, now: float) -> PodRuntime | None:
        info = self.nodes.get(node)
        self.by_node.setdefault(node, set()).add(key)
        if info is None:
            since = self.orphans.setdefault(key, now)
            if now - since >= ORPHAN_GRACE_S:
                self._force_delete(key)
            else:
                self.enqueue_at(since + ORPHAN_GRACE_S, key)
            return None
        self.orphans.pop(key, None)
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            # Deleted before its kubelet started anything: nothing to stop.
            if not meta.get("finalizers"):
                self.store.finalize_deletion(self.pods_rt, *key)
            self.by_node[node].discard(key)
            return None
        view = pod_spec_view(obj, self.pulls, self.load_times)
        pod_ip = info.host_ip if view.host_network else info.allocate_ip()
        ctx = LogContext(pod=meta["name"], namespace=meta["namespace"],
                         gpu_product=info.gpu_product, rank=_rank(obj))
        pod = new_pod_runtime(meta["namespace"], meta["name"], meta["uid"], node, view, now=now,
                              host_ip=info.host_ip, pod_ip=pod_ip, ctx=ctx, tun=self.tunables)
        self.pods[key] = pod
        self.book.apply_rules(key, obj, now)
        return pod

    def _step(self, pod: PodRuntime, now: float, out: Outbox | None = None) -> None:
        out = out or Outbox()
        info = self.nodes.get(pod.node)
        if info is None:
            self._force_delete(pod.key)
            return
        if info.alive:
            self._catch_up(pod, now, out)
        self._apply(pod, out)
        if not info.alive:
            return  # nobody posts this pod's status until its node is back
        self._publish(pod)
        if pod.done:
            self._retire(pod)
        else:
            due = pod.next_due()
            if due != float("inf"):
                self.enqueue_at(max(due, now + 1e-6), pod.key)

    def _flush_logs(self, namespace: str, name: str, container: str) -> None:
        pod = self.pods.get((namespace, name))
        info = self.nodes.get(pod.node) if pod is not None else None
        if pod is None or info is None or not info.alive:
            return
        out = Outbox()
        flush_steady_lines(pod, container, self.clock.time(), out)
        self._apply(pod, out)

    def _catch_up(self, pod: PodRuntime, now: float, out: Outbox) -> None:
        """Apply what is due; a deletion starts at the instant it was seen, not at `now`."""
        at = max(pod.deletion_seen_at, pod.admitted_at)
        if pod.deletion_grace is not None and pod.terminating_at is None and not pod.done \
                and at <= now:
            advance(pod, at, self.world, out)
            begin_termination(pod, at, pod.deletion_grace, out)
        advance(pod, now, self.world, out)

    # --- effects -------------------------------------------------------------------------------

    def _apply(self, pod: PodRuntime, out: Outbox) -> None:
        logs = self.logs
        for op, container, ts, line in out.logs:
            if op == "rotate":
                logs.rotate(pod.namespace, pod.name, container)
            else:
                logs.write(pod.namespace, pod.name, container, ts, line)
        if out.events:
            involved = {"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"name": pod.name, "namespace": pod.namespace,
                                     "uid": pod.uid}}
            for _subject, type_, reason, message in out.events:
                self.recorder.record(involved, reason, message, type=type_,
                                     component="kubelet", host=pod.node)
        for xid in out.xids:
            self.record_xid(pod.node, int(xid["xid"]), int(xid["gpu"]), xid["time"],
                            f"{pod.namespace}/{pod.name}")

    def _publish(self, pod: PodRuntime) -> None:
        obj = self.store.find(self.pods_rt, pod.namespace, pod.name)
        if obj is None or obj["metadata"]["uid"] != pod.uid:
            return
        status = render_status(pod, obj.get("status"))
        if status == obj.get("status"):
            return
        self._writing = True
        try:
            self.store.mutate(self.pods_rt, pod.namespace, pod.name,
                              lambda o: o.__setitem__("status", status), subresource="status")
        finally:
            self._writing = False

    def _retire(self, pod: PodRuntime) -> None:
        """The pod is over: deleted ones leave the store, finished ones keep their logs."""
        if pod.done == "deleted":
            obj = self.store.find(self.pods_rt, pod.namespace, pod.name)
            if obj is not None and not obj["metadata"].get("finalizers"):
                self.store.finalize_deletion(self.pods_rt, pod.namespace, pod.name)
            self.logs.forget_pod(pod.namespace, pod.name)
        self._forget(pod)

    def _forget(self, pod: PodRuntime) -> None:
        self.deleted_at.pop(pod.key, None)
        self.touched_at.pop(pod.key, None)
        self.pods.pop(pod.key, None)
        self.by_node.get(pod.node, set()).discard(pod.key)
        self.book.forget(pod.key)

    def _force_delete(self, key: PodKey) -> None:
        """Pod GC: a pod whose node does not exist is removed, whatever its state."""
        pod = self.pods.get(key)
        if pod is not None:
            self._forget(pod)
        self.orphans.pop(key, None)
        if self.store.find(self.pods_rt, *key) is not None:
            self.store.finalize_deletion(self.pods_rt, *key)
        self.logs.forget_pod(*key)

    # --- hooks for the fault handlers ----------------------------------------------------------

    def faults_changed(self, key: PodKey) -> None:
        self._touch(key)

    def evict(self, key: PodKey, resource: str, message: str | None) -> bool:
        pod = self.pods.get(key)
        info = self.nodes.get(pod.node) if pod is not None else None
        if pod is None or pod.done or pod.terminating_at is not None or info is None \
                or not info.alive:
            return False  # a kubelet that is down evicts nothing
        now = self.clock.time()
        out = Outbox()
        advance(pod, now, self.world, out)
        if pod.done:
            self._apply(pod, out)
            self._publish(pod)
            self._retire(pod)
            return False
        fail_pod(pod, now, out, "Evicted", message or _eviction_message(pod, resource),
                 disruption=True)
        node = self.store.find(self.nodes_rt, None, pod.node)
        if node is not None:
            self.recorder.record(node, "EvictionThresholdMet",
                                 f"Attempting to reclaim {resource}", type="Warning",
                                 component="kubelet", host=pod.node)
        self._apply(pod, out)
        self._publish(pod)
        self._retire(pod)
        return True

    def node_xid(self, node: str, xid: int, gpu: int) -> list[PodKey]:
        if self.store.find(self.nodes_rt, None, node) is None:
            raise errors.not_found("nodes", node)
        now = self.clock.time()
        self.record_xid(node, xid, gpu, now, None)
        hit = []
        for key in sorted(self.by_node.get(node, ())):
            pod = self.pods.get(key)
            if pod is None or pod.done:
                continue
            gpu_containers = [c.name for c in pod.containers if c.spec.gpus > 0]
            if gpu_containers:
                self.book.add(key, gpu_containers[0], Fault(
                    "gpu-xid", {"xid": xid, "gpu": gpu, "recorded": True}, now, once=True))
                self._touch(key)
                hit.append(key)
        return hit

    def assigned_gpu(self, key: PodKey) -> int | None:
        pod = self.pods.get(key)
        node = self.store.find(self.nodes_rt, None, pod.node) if pod is not None else None
        return None if pod is None or node is None else self.gpus.first_held(node, pod.uid)

    def record_xid(self, node: str, xid: int, gpu: int, ts: float, pod: str | None) -> None:
        record_xid(self.store, self.recorder, node, xid, gpu, ts, pod)


def _key(obj: Obj) -> PodKey:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _rank(obj: Obj) -> int:
    meta = obj["metadata"]
    for source in (meta.get("annotations") or {}, meta.get("labels") or {}):
        for name in ("batch.kubernetes.io/job-completion-index",
                     "leaderworkerset.sigs.k8s.io/worker-index"):
            if str(source.get(name, "")).isdigit():
                return int(source[name])
    return 0


def _eviction_message(pod: PodRuntime, resource: str) -> str:
    app = pod.app()
    name = app[0].name if app else "main"
    limit = app[0].spec.memory_limit_mib if app else None
    using = int((limit or 2048) * 1.4 * 1024)
    return (f"The node was low on resource: {resource}. Threshold quantity: 100Mi, available: "
            f"51200Ki. Container {name} was using {using}Ki, request is 0, has larger "
            f"consumption of {resource}. ")
