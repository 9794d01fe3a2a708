"""InferencePools, their model servers and the HTTPRoutes that feed them, as plain data (pure).

Why a layer of its own: the Gateway API Inference Extension changed shape on its way to v1.
`inference.networking.k8s.io/v1` has `spec.selector.matchLabels`, `spec.targetPorts[].number`
and `spec.endpointPickerRef`; the older `inference.networking.x-k8s.io/v1alpha2` still found
on clusters has a flat `spec.selector`, `spec.targetPortNumber` and `spec.extensionRef`. The
rollout reads either into one `InferencePool` and never looks at the raw shape again.

An HTTPRoute sends traffic to a pool through a rule's `backendRefs` entry of kind
`InferencePool` in the pool's API group, with a `weight` (Gateway API's default: 1). A pool's
model server is the Deployment (or LeaderWorkerSet) whose pod template the pool's selector
matches. Objects come in as the API's JSON (dicts); malformed ones get a `ConfigError` naming
the object and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuops.common.errors import ConfigError

Obj = Mapping[str, Any]

POOL_KIND = "InferencePool"
ROUTE_GROUP = "gateway.networking.k8s.io"
LWS_GROUP = "leaderworkerset.x-k8s.io"
# (group, version), preferred first.
POOL_APIS = (("inference.networking.k8s.io", "v1"), ("inference.networking.x-k8s.io", "v1alpha2"))
ROUTE_APIS = ((ROUTE_GROUP, "v1"), (ROUTE_GROUP, "v1beta1"))
LWS_APIS = ((LWS_GROUP, "v1"),)
# What the lws controller labels a LeaderWorkerSet's pods with (`workloads` says more).
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


@dataclass(frozen=True)
class ApiVersion:
    group: str
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@dataclass(frozen=True)
class ServedApis:
    """The API versions the cluster serves for what a rollout touches."""

    inference_pool: ApiVersion
    http_route: ApiVersion
    leader_worker_set: ApiVersion | None = None  # None: the cluster has no LeaderWorkerSet


def _pick(groups: Mapping[str, Sequence[str]], wanted: Sequence[tuple[str, str]]
          ) -> ApiVersion | None:
    for group, version in wanted:
        if version in groups.get(group, ()):
            return ApiVersion(group, version)
    return None


def served_apis(groups: Mapping[str, Sequence[str]]) -> ServedApis:
    """From discovery (`/apis`: group -> served versions) to the versions to use."""
    pool = _pick(groups, POOL_APIS)
    if pool is None:
        raise ConfigError(POOL_KIND, "the cluster serves no InferencePool API (looked for "
                          + ", ".join(f"{g}/{v}" for g, v in POOL_APIS)
                          + "); install the Gateway API Inference Extension CRDs")
    route = _pick(groups, ROUTE_APIS)
    if route is None:
        raise ConfigError("HTTPRoute", f"the cluster serves no HTTPRoute API (looked for "
                          f"{ROUTE_GROUP}/v1, /v1beta1); install the Gateway API CRDs")
    return ServedApis(pool, route, _pick(groups, LWS_APIS))


# --- InferencePool -------------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolRef:
    """Which pool a backendRef names: its API group matters (v1 and v1alpha2 differ)."""

    group: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class EndpointPicker:
    name: str
    kind: str = "Service"
    group: str = ""
    port: int | None = None
    failure_mode: str = "FailClose"


@dataclass(frozen=True)
class InferencePool:
    namespace: str
    name: str
    api: ApiVersion
    selector: Mapping[str, str]
    target_ports: tuple[int, ...]
    endpoint_picker: EndpointPicker | None
    uid: str = ""

    @property
    def ref(self) -> PoolRef:
        return PoolRef(self.api.group, self.namespace, self.name)

    @property
    def label_selector(self) -> str:
        """The selector as `list_pods` takes it (`app=llama,tier=gpu`)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))

    def selects(self, labels: Mapping[str, str]) -> bool:
        """An empty selector selects nothing (the extension's pools never match every pod)."""
        return bool(self.selector) and all(labels.get(k) == v for k, v in self.selector.items())


def _where(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', 'object')} {meta.get('namespace', '')}/{meta.get('name', '?')}"


def _mapping(obj: Obj, value: Any, path: str, *, required: bool = True) -> Mapping[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{_where(obj)}.{path}", f"must be an object, got {value!r}")
    return value


def _labels(obj: Obj, value: Any, path: str) -> dict[str, str]:
    labels = _mapping(obj, value, path)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ConfigError(f"{_where(obj)}.{path}", "must map label keys to string values")
    return dict(labels)


def _port(obj: Obj, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigError(f"{_where(obj)}.{path}", f"must be a port number, got {value!r}")
    return value


def _api_of(obj: Obj) -> ApiVersion:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    return ApiVersion(group, version)


def parse_pool(obj: Obj) -> InferencePool:
    """An InferencePool of either served shape."""
    api = _api_of(obj)
    meta = _mapping(obj, obj.get("metadata"), "metadata")
    spec = _mapping(obj, obj.get("spec"), "spec")
    if api.version == "v1alpha2":
        selector = _labels(obj, spec.get("selector"), "spec.selector")
        ports: tuple[int, ...] = (_port(obj, spec.get("targetPortNumber"),
                                         "spec.targetPortNumber"),)
        ref = _mapping(obj, spec.get("extensionRef"), "spec.extensionRef", required=False)
        port = ref.get("portNumber")
        path = "spec.extensionRef"
    else:
        sel = _mapping(obj, spec.get("selector"), "spec.selector")
        selector = _labels(obj, sel.get("matchLabels"), "spec.selector.matchLabels")
        raw_ports = spec.get("targetPorts")
        if not isinstance(raw_ports, list) or not raw_ports:
            raise ConfigError(f"{_where(obj)}.spec.targetPorts", "must list at least one port")
        ports = tuple(_port(obj, _mapping(obj, p, f"spec.targetPorts[{i}]").get("number"),
                            f"spec.targetPorts[{i}].number") for i, p in enumerate(raw_ports))
        ref = _mapping(obj, spec.get("endpointPickerRef"), "spec.endpointPickerRef",
                       required=False)
        port = _mapping(obj, ref.get("port"), "spec.endpointPickerRef.port",
                        required=False).get("number")
        path = "spec.endpointPickerRef"
    picker = None
    if ref:
        if not isinstance(ref.get("name"), str) or not ref["name"]:
            raise ConfigError(f"{_where(obj)}.{path}.name", "is required")
        picker = EndpointPicker(ref["name"], str(ref.get("kind") or "Service"),
                                str(ref.get("group") or ""),
                                None if port is None else _port(obj, port, f"{path}.port"),
                                str(ref.get("failureMode") or "FailClose"))
    return InferencePool(str(meta.get("namespace") or "default"), str(meta.get("name")), api,
                         selector, ports, picker, str(meta.get("uid") or ""))


# --- model servers and pods ----------------------------------------------------------------------

@dataclass(frozen=True)
class ModelServer:
    """The workload that runs a pool's vLLM pods."""

    kind: str  # Deployment | LeaderWorkerSet
    api_version: str
    namespace: str
    name: str
    replicas: int
    ready_replicas: int
    images: tuple[str, ...]
    template_labels: Mapping[str, str] = field(default_factory=dict)
    group_size: int = 1  # pods per replica: a LeaderWorkerSet's leaderWorkerTemplate.size


def _template_of(obj: Obj) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        # The leader serves the requests; without a leaderTemplate it uses the worker's.
        return lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
    return spec.get("template") or {}


def parse_model_server(obj: Obj) -> ModelServer:
    meta = obj.get("metadata") or {}
    template = _template_of(obj)
    containers = (template.get("spec") or {}).get("containers") or []
    replicas = (obj.get("spec") or {}).get("replicas")
    size = ((obj.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size")
    return ModelServer(
        str(obj.get("kind")), str(obj.get("apiVersion")), str(meta.get("namespace") or ""),
        str(meta.get("name")), 1 if replicas is None else int(replicas),
        int((obj.get("status") or {}).get("readyReplicas") or 0),
        tuple(str(c.get("image")) for c in containers if c.get("image")),
        dict((template.get("metadata") or {}).get("labels") or {}),
        size if isinstance(size, int) and size >= 1 and obj.get("kind") == "LeaderWorkerSet"
        else 1)


@dataclass(frozen=True)
class PoolPod:
    name: str
    ready: bool  # a LeaderWorkerSet leader: its whole group is Ready
    images: tuple[str, ...]
    node: str | None = None
    group: tuple[str, str] | None = None  # a LeaderWorkerSet pod's (set, group index)


def _group_of(labels: Mapping[str, str]) -> tuple[str, str] | None:
    if LWS_NAME not in labels or LWS_GROUP_INDEX not in labels:
        return None
    return labels[LWS_NAME], labels[LWS_GROUP_INDEX]


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ())


def _pool_pod(pod: Obj, ready: bool) -> PoolPod:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return PoolPod(str(meta.get("name")), ready,
                   tuple(str(c.get("image")) for c in spec.get("containers") or ()),
                   spec.get("nodeName"), _group_of(meta.get("labels") or {}))


def _finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pool_pods(pool: InferencePool, pods: Iterable[Obj],
              ready_leaders: set[str] | None = None) -> tuple[PoolPod, ...]:
    """The pool's member pods (its namespace, its selector), finished ones left out. A
    LeaderWorkerSet group is one member, its leader (its workers serve nothing of their
    own), Ready when the whole group is (`ready_leaders`, from `workloads.ready_groups`)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace", pool.namespace) != pool.namespace or \
                not pool.selects(labels) or _finished(pod):
            continue
        if _group_of(labels) is not None:
            if labels.get(LWS_WORKER_INDEX, "0") != "0":
                continue
            ready = _ready(pod) and (ready_leaders is None or meta.get("name") in ready_leaders)
        else:
            ready = _ready(pod)
        out.append(_pool_pod(pod, ready))
    return tuple(sorted(out, key=lambda p: p.name))


def group_pods(servers: Iterable[ModelServer], pods: Iterable[Obj]) -> tuple[PoolPod, ...]:
    """Every pod, leaders and workers, of the LeaderWorkerSets among `servers`."""
    names = {(s.namespace, s.name) for s in servers if s.kind == "LeaderWorkerSet"}
    out = [_pool_pod(p, _ready(p)) for p in pods if not _finished(p) and (
        str((p.get("metadata") or {}).get("namespace") or ""),
        ((p.get("metadata") or {}).get("labels") or {}).get(LWS_NAME)) in names]
    return tuple(sorted(out, key=lambda p: p.name))


# --- HTTPRoute -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Backend:
    index: int
    group: str
    kind: str
    name: str
    namespace: str  # resolved: the route's own when the backendRef names none
    weight: int  # effective: Gateway API's default is 1
    weight_set: bool  # whether the backendRef carries `weight` (a JSON patch must know)

    def names(self, pool: PoolRef) -> bool:
        return (self.kind, self.group, self.namespace, self.name) == (
            POOL_KIND, pool.group, pool.namespace, pool.name)


@dataclass(frozen=True)
class RouteRule:
    index: int
    backends: tuple[Backend, ...]

    def backends_of(self, pool: PoolRef) -> tuple[Backend, ...]:
        return tuple(b for b in self.backends if b.names(pool))


@dataclass(frozen=True)
class HTTPRoute:
    namespace: str
    name: str
    api_version: str
    rules: tuple[RouteRule, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def rules_for(self, *pools: PoolRef) -> tuple[RouteRule, ...]:
        """The rules that send traffic, or could, to any of `pools`."""
        return tuple(r for r in self.rules if any(r.backends_of(p) for p in pools))

    def weight_of(self, rule: RouteRule, pool: PoolRef) -> int:
        """A pool's weight in one rule: 0 when the rule does not name it."""
        return sum(b.weight for b in rule.backends_of(pool))


def parse_route(obj: Obj) -> HTTPRoute:
    meta = _mapping(obj, obj.get("metadata"), "metadata")
    namespace = str(meta.get("namespace") or "default")
    spec = _mapping(obj, obj.get("spec"), "spec")
    rules = []
    for i, rule in enumerate(spec.get("rules") or ()):
        backends = []
        for j, ref in enumerate(_mapping(obj, rule, f"spec.rules[{i}]").get("backendRefs") or ()):
            where = f"spec.rules[{i}].backendRefs[{j}]"
            ref = _mapping(obj, ref, where)
            weight = ref.get("weight", 1)
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
                raise ConfigError(f"{_where(obj)}.{where}.weight",
                                  f"must be an integer >= 0, got {weight!r}")
            backends.append(Backend(j, str(ref.get("group") or ""),
                                    str(ref.get("kind") or "Service"), str(ref.get("name")),
                                    str(ref.get("namespace") or namespace), weight,
                                    "weight" in ref))
        rules.append(RouteRule(i, tuple(backends)))
    return HTTPRoute(namespace, str(meta.get("name")), str(obj.get("apiVersion")), tuple(rules),
                     dict(meta.get("annotations") or {}), str(meta.get("resourceVersion") or ""))


# --- a pool and what surrounds it ----------------------------------------------------------------

@dataclass(frozen=True)
class PoolView:
    pool: InferencePool
    model_servers: tuple[ModelServer, ...]
    pods: tuple[PoolPod, ...]
    routes: tuple[HTTPRoute, ...]  # those with a rule naming the pool
    # A LeaderWorkerSet's pods, leaders and workers (its workers hold GPUs too).
    group_pods: tuple[PoolPod, ...] = ()

    @property
    def replicas_present(self) -> int:
        """Replicas with a pod still there (holding its GPUs): a LeaderWorkerSet group
        counts while any of its pods is left."""
        groups = {p.group for p in (*self.pods, *self.group_pods) if p.group is not None}
        return len(groups) + sum(1 for p in self.pods if p.group is None)

    def model_server(self, field_name: str = "pool") -> ModelServer:
        """The one workload behind the pool; a `ConfigError` on `field_name` otherwise."""
        if len(self.model_servers) == 1:
            return self.model_servers[0]
        found = ", ".join(f"{m.kind} {m.name}" for m in self.model_servers) or "none"
        raise ConfigError(field_name, f"InferencePool {self.pool.ref} selects "
                          f"{self.pool.label_selector or 'nothing'}; expected one Deployment or "
                          f"LeaderWorkerSet whose pods it selects, found {found}")


def pool_view(pool: InferencePool, workloads: Iterable[Obj], pods: Iterable[Obj],
              routes: Iterable[HTTPRoute], lws_pods: Iterable[Obj] = ()) -> PoolView:
    """`lws_pods`: the pods of the LeaderWorkerSets the pool's pods belong to (their workers
    too, which the pool's selector may leave out), to tell whole groups Ready."""
    servers = tuple(s for s in map(parse_model_server, workloads)
                    if s.namespace in ("", pool.namespace) and pool.selects(s.template_labels))
    members = group_pods(servers, lws_pods)
    sizes = {s.name: s.group_size for s in servers}
    ready_leaders = _ready_leaders(members, sizes) if members else None
    return PoolView(pool, servers, pool_pods(pool, pods, ready_leaders),
                    tuple(r for r in routes if r.rules_for(pool.ref)), members)


def _ready_leaders(members: Iterable[PoolPod], sizes: Mapping[str, int]) -> set[str]:
    """Leaders (named `<set>-<group>`) whose group has all its pods, every one Ready."""
    groups: dict[tuple[str, str], list[PoolPod]] = {}
    for pod in members:
        if pod.group is not None:
            groups.setdefault(pod.group, []).append(pod)
    return {f"{g[0]}-{g[1]}" for g, pods in groups.items()
            if len(pods) >= sizes.get(g[0], 1) and all(p.ready for p in pods)}
