"""The resource types simcluster serves, described once: discovery, routing and storage read
them, and each carries its strategy (`registry/`), what the API server does differently for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .registry.namespaces import NamespaceStrategy
from .registry.others import CustomResourceDefinitionStrategy, NodeStrategy, PriorityClassStrategy
from .registry.pods import BindingStrategy, PodStrategy
from .registry.services import ServiceStrategy
from .registry.strategy import GENERIC, Strategy
from .registry.workloads import (
    DaemonSetStrategy,
    DeploymentStrategy,
    JobStrategy,
    ReplicaSetStrategy,
    StatefulSetStrategy,
)


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch",
                              "update", "watch")
    strategy: Strategy = field(default=GENERIC, compare=False, repr=False)
    # discovery's categories: `kubectl get all` lists the resources in `all`; not part of
    # the type's identity (a CRD re-applied with other categories is the same resource)
    categories: tuple[str, ...] = field(default=(), compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Storage key: the plural qualified by its group (`pods`, `apps/deployments`)."""
        return f"{self.group}/{self.plural}" if self.group else self.plural

    @property
    def builtin(self) -> bool:
        """Built into kube-apiserver (as opposed to a CRD): only these take strategic merge."""
        return self.group in BUILTIN_GROUPS

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


BUILTIN_GROUPS = frozenset({"", "apps", "batch", "policy", "scheduling.k8s.io", "events.k8s.io",
                            "coordination.k8s.io",
                            "apiextensions.k8s.io", "autoscaling", "authorization.k8s.io",
                            "authentication.k8s.io"})
ALL = ("all",)  # the category of what `kubectl get all` shows
GATEWAY_API = ("gateway-api",)
CREATE_ONLY = ("create",)


def _core(kind: str, plural: str, namespaced: bool = True, short: tuple[str, ...] = (),
          sub: tuple[str, ...] = ("status",), strategy: Strategy = GENERIC,
          categories: tuple[str, ...] = ()) -> ResourceType:
    return ResourceType("", "v1", kind, plural, namespaced, short, sub, strategy=strategy,
                        categories=categories)


def _apps(kind: str, plural: str, short: str, strategy: Strategy) -> ResourceType:
    return ResourceType("apps", "v1", kind, plural, True, (short,), ("status", "scale"),
                        strategy=strategy, categories=ALL)


def _review(group: str, kind: str, plural: str) -> ResourceType:
    """An access or identity review: created and answered at once, never stored."""
    return ResourceType(group, "v1", kind, plural, False, (), (), CREATE_ONLY)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _core("Pod", "pods", short=("po",), sub=("status", "log", "eviction", "binding", "proxy",
                                            "exec", "attach", "portforward"),
          strategy=PodStrategy(), categories=ALL),
    _core("Node", "nodes", namespaced=False, short=("no",), strategy=NodeStrategy()),
    _core("Namespace", "namespaces", namespaced=False, short=("ns",), sub=("status", "finalize"),
          strategy=NamespaceStrategy()),
    _core("Event", "events", short=("ev",), sub=()),
    _core("Service", "services", short=("svc",), sub=("status", "proxy"),
          strategy=ServiceStrategy(),
          categories=ALL),
    _core("ConfigMap", "configmaps", short=("cm",), sub=()),
    _core("Secret", "secrets", sub=()),
    _core("ServiceAccount", "serviceaccounts", short=("sa",), sub=()),
    # Deployments replaced them and simcluster runs no controller for them: listed (always
    # empty, for kubectl cluster-info dump and get rc), never created (405).
    ResourceType("", "v1", "ReplicationController", "replicationcontrollers", True, ("rc",), (),
                 verbs=("get", "list", "watch")),
    _core("Binding", "bindings", sub=(), strategy=BindingStrategy()),
    _apps("Deployment", "deployments", "deploy", DeploymentStrategy()),
    _apps("ReplicaSet", "replicasets", "rs", ReplicaSetStrategy()),
    _apps("StatefulSet", "statefulsets", "sts", StatefulSetStrategy()),
    ResourceType("apps", "v1", "DaemonSet", "daemonsets", True, ("ds",),
                 strategy=DaemonSetStrategy(), categories=ALL),
    ResourceType("batch", "v1", "Job", "jobs", True, (), strategy=JobStrategy(),
                 categories=ALL),
    ResourceType("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, ("pdb",)),
    ResourceType("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",), (),
                 strategy=PriorityClassStrategy()),
    ResourceType("events.k8s.io", "v1", "Event", "events", True, ("ev",), ()),
    ResourceType("coordination.k8s.io", "v1", "Lease", "leases", True, (), ()),
    ResourceType("apiextensions.k8s.io", "v1", "CustomResourceDefinition",
                 "customresourcedefinitions", False, ("crd", "crds"),
                 strategy=CustomResourceDefinitionStrategy()),
    ResourceType("inference.networking.k8s.io", "v1", "InferencePool", "inferencepools", True,
                 ("infpool",)),
    ResourceType("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes", True, (),
                 categories=GATEWAY_API),
    ResourceType("gateway.networking.k8s.io", "v1", "Gateway", "gateways", True, ("gtw",),
                 categories=GATEWAY_API),
    ResourceType("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", True,
                 ("lws",)),
    _review("authorization.k8s.io", "SelfSubjectAccessReview", "selfsubjectaccessreviews"),
    _review("authorization.k8s.io", "SelfSubjectRulesReview", "selfsubjectrulesreviews"),
    _review("authentication.k8s.io", "SelfSubjectReview", "selfsubjectreviews"),
)


@dataclass
class ResourceRegistry:
    """Known types by (group, version, plural); custom resources register at run time."""

    _types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    @classmethod
    def with_builtins(cls) -> ResourceRegistry:
        registry = cls()
        for rt in BUILTIN_TYPES:
            registry.register(rt)
        return registry

    def register(self, rt: ResourceType) -> ResourceType:
        existing = self._types.get((rt.group, rt.version, rt.plural))
        if existing is not None:
            if existing != rt:
                raise ValueError(f"resource {rt.key!r} is already registered as "
                                 f"{existing.kind!r}")
            return existing  # the same type again (a CRD re-applied) keeps its strategy
        self._types[(rt.group, rt.version, rt.plural)] = rt
        return rt

    def register_crd(self, crd: dict) -> list[ResourceType]:
        """Register every served version of a CustomResourceDefinition object."""
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        if not spec.get("group") or not names.get("plural") or not names.get("kind"):
            raise ValueError("CustomResourceDefinition needs spec.group, spec.names.plural "
                             "and spec.names.kind")
        versions = [v["name"] for v in spec.get("versions", []) if v.get("served", True)]
        if not versions:
            raise ValueError("CustomResourceDefinition needs at least one served spec.versions[]")
        first: dict = next(iter(spec["versions"]), {})
        subresources = tuple(first.get("subresources", {}) or ())
        return [
            self.register(ResourceType(
                spec["group"], v, names["kind"], names["plural"],
                spec.get("scope", "Namespaced") == "Namespaced",
                tuple(names.get("shortNames", ())), subresources,
                categories=tuple(names.get("categories", ()))))
            for v in versions
        ]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rt in self._types.values():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return list(self._types.values())

    def groups(self) -> dict[str, list[str]]:
        """Group name -> its versions, core group excluded, in registration order."""
        result: dict[str, list[str]] = {}
        for rt in self._types.values():
            if rt.group and rt.version not in result.setdefault(rt.group, []):
                result[rt.group].append(rt.version)
        return result

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]
