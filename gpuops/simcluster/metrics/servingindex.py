"""What the serving metrics know of the cluster, kept current by a store listener.

InferencePools and their member pods, HTTPRoutes' InferencePool backends, and a view of every
GPU pod bound to a node (which GPU it holds is `core/gpus.py`'s). Every change of those objects
updates the index at once, so a metrics step or a scrape never rescans the store's pods
(100,000 of them in the scale benchmark).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.clock import parse_rfc3339
from ..core.gpus import GpuAllocations
from ..core.resources import ResourceType
from ..core.selectors import Requirement, labels_match, selector_from_spec
from ..core.store import Store
from ..core.versions import command_line, vllm_model_arg
from .serving import Backend, PoolKey, ReplicaProfile, RouteRule, Warmup

log = logging.getLogger("gpuops.simcluster.metrics")
Obj = dict[str, Any]

ANN_MODEL = "sim.gpuops.io/model"  # pod or InferencePool or HTTPRoute: the served model name
ANN_CAPACITY = "sim.gpuops.io/capacity-rps"  # pod: requests/s one replica serves at its SLO
ANN_TTFT_BASE = "sim.gpuops.io/ttft-base-seconds"  # pod: TTFT of an idle replica
ANN_ITL_BASE = "sim.gpuops.io/itl-base-seconds"  # pod: inter-token latency of an idle replica
ANN_WARMUP = "sim.gpuops.io/warmup-seconds"  # pod: how long a replica is cold after Ready
ANN_COLD_TTFT = "sim.gpuops.io/cold-ttft-factor"  # pod: TTFT multiplier at Ready
ANN_COLD_ITL = "sim.gpuops.io/cold-itl-factor"  # pod: inter-token latency multiplier at Ready
# A LeaderWorkerSet's pods: a group is one replica, served by its leader (worker 0).
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_LEADER = "leaderworkerset.sigs.k8s.io/leader-name"


@dataclass(frozen=True)
class PodFacts:
    """What a pod's spec and annotations say; unchanged by status updates, so it is cached."""

    model: str | None  # explicit: annotation or vLLM args
    images: tuple[str, ...]
    argv: str  # every container's command line, joined by spaces: what `args` globs match
    profile: ReplicaProfile

    @classmethod
    def of(cls, spec: dict[str, Any], annotations: dict[str, str]) -> PodFacts:
        containers = spec.get("containers") or ()
        argv = [a for c in containers for a in command_line(c)]
        return cls(annotations.get(ANN_MODEL) or vllm_model_arg(containers),
                   tuple(c.get("image", "") for c in containers), " ".join(argv),
                   replica_profile(annotations, argv))


_NO_FACTS = PodFacts(None, (), "", ReplicaProfile())


@dataclass(frozen=True)
class PodView:
    """What the metrics need of a pod, extracted once per pod change."""

    uid: str
    namespace: str
    name: str
    running: bool
    ready: bool
    restarts: int
    created: str
    annotations: dict[str, str]
    facts: PodFacts
    generate_name: str = ""
    ready_since: float | None = None  # the Ready condition's lastTransitionTime, when Ready

    @classmethod
    def of(cls, pod: dict[str, Any], facts: PodFacts) -> PodView:
        meta, status = pod["metadata"], pod.get("status") or {}
        running = status.get("phase") == "Running"
        condition = next((c for c in status.get("conditions") or ()
                          if c.get("type") == "Ready" and c.get("status") == "True"), None)
        ready = running and not meta.get("deletionTimestamp") and condition is not None
        return cls(meta["uid"], meta.get("namespace", ""), meta["name"], running, ready,
                   sum(int(cs.get("restartCount") or 0)
                       for cs in status.get("containerStatuses") or ()),
                   meta.get("creationTimestamp", ""), meta.get("annotations") or {}, facts,
                   meta.get("generateName") or "",
                   _time(condition.get("lastTransitionTime")) if ready and condition else None)

    @property
    def model(self) -> str | None:
        return self.facts.model

    @property
    def images(self) -> tuple[str, ...]:
        return self.facts.images

    @property
    def profile(self) -> ReplicaProfile:
        return self.facts.profile


def _time(text: Any) -> float | None:
    try:
        return parse_rfc3339(str(text)) if text else None
    except ValueError:
        return None


def replica_profile(annotations: dict[str, str], argv: list[str] | None = None
                    ) -> ReplicaProfile:
    """From the pod's `sim.gpuops.io/*` annotations (a value that is no number, or out of
    range, keeps the default) and the vLLM arguments that change serving:
    `--no-enable-prefix-caching`, `--max-num-seqs`."""
    def number(key: str, default: float, low: float = 0.0, zero: bool = False) -> float:
        try:
            value = float(annotations[key])
        except (KeyError, ValueError):
            return default
        if not math.isfinite(value) or value < low or (value == 0 and not zero):
            return default
        return value

    argv = argv or []
    base = ReplicaProfile()
    warm = base.warmup
    seqs = _int_flag(argv, "--max-num-seqs")
    return ReplicaProfile(
        capacity_rps=number(ANN_CAPACITY, base.capacity_rps),
        ttft_base_s=number(ANN_TTFT_BASE, base.ttft_base_s),
        itl_base_s=number(ANN_ITL_BASE, base.itl_base_s),
        max_num_seqs=seqs if seqs and seqs > 0 else base.max_num_seqs,
        prefix_caching="--no-enable-prefix-caching" not in argv,
        warmup=Warmup(number(ANN_WARMUP, warm.seconds, zero=True),
                      number(ANN_COLD_TTFT, warm.ttft_factor, low=1.0),
                      number(ANN_COLD_ITL, warm.itl_factor, low=1.0)))


def _int_flag(argv: list[str], flag: str) -> int | None:
    for i, arg in enumerate(argv):
        text = argv[i + 1] if arg == flag and i + 1 < len(argv) else (
            arg.split("=", 1)[1] if arg.startswith(flag + "=") else None)
        if text is not None:
            try:
                return int(text)
            except ValueError:
                return None
    return None


@dataclass
class Pool:
    key: PoolKey
    selector: list[Requirement]
    model: str | None  # from its annotation


def pool_selector(pool: dict[str, Any]) -> list[Requirement]:
    """v1 `selector.matchLabels`, or v1alpha2's plain label map; empty (or invalid) selects
    nothing."""
    selector = (pool.get("spec") or {}).get("selector") or {}
    try:
        if "matchLabels" in selector or "matchExpressions" in selector:
            return selector_from_spec(selector)
        return selector_from_spec({"matchLabels": selector})
    except (KeyError, TypeError, AttributeError) as e:
        meta = pool["metadata"]
        log.warning("InferencePool %s/%s: unusable spec.selector (%s: %s); it selects no pods",
                    meta.get("namespace"), meta.get("name"), type(e).__name__, e)
        return []


def route_rules(route: dict[str, Any]) -> list[RouteRule]:
    """The route's rules that send traffic to InferencePools (other backendRefs are ignored)."""
    namespace = route["metadata"].get("namespace", "default")
    model = (route["metadata"].get("annotations") or {}).get(ANN_MODEL)
    rules = []
    for rule in (route.get("spec") or {}).get("rules") or ():
        backends = []
        for ref in (rule.get("backendRefs") or ()) if isinstance(rule, dict) else ():
            if not isinstance(ref, dict) or ref.get("kind") != "InferencePool" or \
                    not ref.get("name"):
                continue
            weight = ref.get("weight", 1)  # Gateway API's default weight is 1
            backends.append(Backend((str(ref.get("namespace") or namespace), str(ref["name"])),
                                    weight if isinstance(weight, int) else 1))
        if backends:
            rules.append(RouteRule(tuple(backends), model))
    return rules


class ServingIndex:
    """Pools, routes, pool members and GPU pods' views, kept current by a store listener."""

    def __init__(self, store: Store, gpus: GpuAllocations,
                 before_change: Callable[[], None] = lambda: None) -> None:
        # Called before a change that alters who serves what (a replica's readiness, a pool,
        # a route), so the model can first catch up to now under the old state.
        self.before_change: Callable[[], None] = lambda: None  # nothing to catch up on yet
        self.store = store
        self.pod_type = store.type("pods")
        self.pool_type = store.type("inferencepools", "inference.networking.k8s.io")
        self.route_type = store.type("httproutes", "gateway.networking.k8s.io")
        self.pools: dict[PoolKey, Pool] = {}
        self.pools_by_ns: dict[str, set[PoolKey]] = {}
        self.routes: dict[tuple[str, str], list[RouteRule]] = {}
        self.members: dict[PoolKey, dict[str, PodView]] = {}
        self.pod_pools: dict[str, set[PoolKey]] = {}
        self.gpus = gpus  # registered its listener first: a change reaches it before this
        self.views: dict[str, PodView] = {}  # pool members and GPU pods on a node
        # LeaderWorkerSet groups: group key -> worker index -> (ready, ready since)
        self.groups: dict[str, dict[int, tuple[bool, float | None]]] = {}
        self._facts: dict[str, tuple[Any, dict[str, str], PodFacts]] = {}
        listeners = ((self.pool_type, self._pool_changed), (self.route_type, self._route_changed),
                     (self.pod_type, self._pod_changed))
        for rt, listener in listeners:
            store.add_listener(listener, rt)
        for rt, listener in listeners:
            for obj in store.list(rt):
                listener(rt, "ADDED", obj, None)
        self.before_change = before_change

    def _pool_changed(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        self._on_pool(event, obj)

    def _route_changed(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        self.before_change()
        meta = obj["metadata"]
        rkey = (meta.get("namespace", ""), meta["name"])
        if event == "DELETED":
            self.routes.pop(rkey, None)
        else:
            self.routes[rkey] = route_rules(obj)

    def _pod_changed(self, _rt: ResourceType, event: str, obj: Obj, _old: Obj | None) -> None:
        self._on_pod(event, obj)

    def _on_pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if event == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._forget(uid)
            if self._group_member(event, pod):
                self._leader_changed(pod)  # its group is no longer whole
            return
        spec = pod.get("spec") or {}
        annotations = meta.get("annotations") or {}
        cached = self._facts.get(uid)
        facts = cached[2] if cached is not None and cached[0] == meta.get("generation") and \
            cached[1] == annotations else None
        holds_gpus = self.gpus.node_of(uid) is not None
        labels = meta.get("labels") or {}
        worker = self._group_member(event, pod)
        pools = {k for k in self.pools_by_ns.get(meta.get("namespace", ""), ())
                 if self.pools[k].selector and labels_match(self.pools[k].selector, labels)}
        if worker:
            pools = set()  # a group's worker serves nothing of its own: its leader does
        if not pools and not holds_gpus:
            if uid in self.views:
                self._forget(uid)  # it left every pool
            return  # most pods: nothing to show, nothing more to compute
        if facts is None:
            facts = PodFacts.of(spec, annotations)
            self._facts[uid] = (meta.get("generation"), annotations, facts)
        view = self._as_replica(PodView.of(pod, facts), pod)
        old = self.views.get(uid)
        was_in = self.pod_pools.get(uid, set())
        if (pools or was_in) and (pools != was_in or old is None or old.ready != view.ready):
            self.before_change()
        for k in self.pod_pools.get(uid, set()) - pools:
            self.members.get(k, {}).pop(uid, None)
        for k in pools:
            self.members.setdefault(k, {})[uid] = view
        if pools:
            self.pod_pools[uid] = pools
        else:
            self.pod_pools.pop(uid, None)
        self.views[uid] = view
        if worker:
            self._leader_changed(pod)

    # --- LeaderWorkerSet groups ------------------------------------------------------------------

    def _group_member(self, event: str, pod: dict[str, Any]) -> int:
        """Track a LeaderWorkerSet pod's readiness in its group; its worker index (0: the
        leader, or no such pod)."""
        labels = pod["metadata"].get("labels") or {}
        key, index = labels.get(LWS_GROUP_KEY), labels.get(LWS_WORKER_INDEX, "")
        if not key or not index.isdigit():
            return 0
        members = self.groups.setdefault(key, {})
        view_ready = PodView.of(pod, _NO_FACTS)
        if event == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded",
                                                                           "Failed"):
            members.pop(int(index), None)
            if not members:
                self.groups.pop(key, None)
        else:
            members[int(index)] = (view_ready.ready, view_ready.ready_since)
        return int(index)

    def _as_replica(self, view: PodView, pod: dict[str, Any]) -> PodView:
        """A group's leader is a Ready replica once every pod of its group is Ready, since
        the last of them became Ready."""
        meta = pod["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        key, size = labels.get(LWS_GROUP_KEY), str(annotations.get(LWS_SIZE, "1"))
        if not key or labels.get(LWS_WORKER_INDEX) != "0" or not size.isdigit() or \
                int(size) <= 1 or not view.ready:
            return view
        members = self.groups.get(key, {})
        states = [members.get(i) for i in range(int(size))]
        if any(s is None or not s[0] for s in states):
            return dataclasses.replace(view, ready=False, ready_since=None)
        since = [s[1] for s in states if s is not None and s[1] is not None]
        return dataclasses.replace(view, ready_since=max(since) if since else view.ready_since)

    def _leader_changed(self, worker: dict[str, Any]) -> None:
        meta = worker["metadata"]
        leader_name = (meta.get("annotations") or {}).get(LWS_LEADER)
        leader = self.store.find(self.pod_type, meta.get("namespace", ""), leader_name) \
            if leader_name else None
        if leader is not None:
            self._on_pod("MODIFIED", leader)

    def _forget(self, uid: str) -> None:
        if uid in self.pod_pools:
            self.before_change()
        for k in self.pod_pools.pop(uid, set()):
            self.members.get(k, {}).pop(uid, None)
        self.views.pop(uid, None)
        self._facts.pop(uid, None)

    def _on_pool(self, event: str, obj: dict[str, Any]) -> None:
        self.before_change()
        meta = obj["metadata"]
        key: PoolKey = (meta.get("namespace", ""), meta["name"])
        before = list(self.members.get(key, {}).values())
        if event == "DELETED":
            self.pools.pop(key, None)
            self.pools_by_ns.get(key[0], set()).discard(key)
            pods = []
        else:
            pool = Pool(key, pool_selector(obj),
                        (meta.get("annotations") or {}).get(ANN_MODEL))
            self.pools[key] = pool
            self.pools_by_ns.setdefault(key[0], set()).add(key)
            pods = (self.store.list(self.pod_type, key[0], labels=pool.selector)
                    if pool.selector else [])
        pods.extend(p for p in (self.store.find(self.pod_type, v.namespace, v.name)
                                for v in before) if p is not None)
        for pod in pods:  # re-evaluated against the pools as they are now
            self._on_pod("MODIFIED", pod)
        if event == "DELETED":
            self.members.pop(key, None)

    # --- reading -------------------------------------------------------------------------------

    def pool_model(self, key: PoolKey) -> str:
        pool = self.pools[key]
        if pool.model:
            return pool.model
        for view in self.members.get(key, {}).values():
            if view.model:
                return view.model
        return key[1]

    def rules(self) -> list[RouteRule]:
        return [rule for rules in self.routes.values() for rule in rules]

    def ready_members(self, key: PoolKey) -> list[PodView]:
        return [v for v in self.members.get(key, {}).values() if v.ready]
