"""Scenario files: a whole simulated cluster (namespaces, priority classes, node pools, any
Kubernetes objects, the demand model) in one YAML file.

Loading is all or nothing: the file is validated first (pydantic for the sections, then the
objects against the cluster's resource types), every problem is reported with its field path
and YAML line, and nothing is created unless all of it is valid. A failure while creating
(admission rejecting an object) removes what was created before it.

A name (`default`, `empty`) means a file shipped in `scenarios/`; anything else is a path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from gpuops.common.yamlsource import YamlDocument

from .cloud.pools import DNS_LABEL, NodePool, NodePools
from .config import DEFAULT_CLUSTER_NAME, Knobs
from .core import errors
from .core.admission import admit_create
from .core.resources import ResourceType
from .core.specmodel import SpecModel
from .core.store import Store
from .metrics.serving import DemandModel

SCENARIO_DIR = Path(__file__).parent / "scenarios"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"

Loc = tuple[str | int, ...]


# --- the file's shape --------------------------------------------------------------------------

class ClusterSpec(SpecModel):
    name: str = Field(DEFAULT_CLUSTER_NAME, pattern=DNS_LABEL)


class PriorityClassSpec(SpecModel):
    name: str = Field(pattern=DNS_SUBDOMAIN)
    value: int = Field(ge=-2_000_000_000, le=1_000_000_000)
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    global_default: bool = False
    description: str = ""

    def as_kubernetes(self) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {"name": self.name}, "value": self.value,
                                "globalDefault": self.global_default,
                                "preemptionPolicy": self.preemption_policy}
        if self.description:
            body["description"] = self.description
        return body


class Scenario(SpecModel):
    cluster: ClusterSpec = ClusterSpec()
    namespaces: list[str] = Field(default_factory=lambda: ["default"])
    priority_classes: list[PriorityClassSpec] = Field(default_factory=list)
    pools: list[NodePool] = Field(default_factory=list)
    objects: list[dict[str, Any]] = Field(default_factory=list)
    # per model: {baseRps, peakRps, peakHourUtc, weekendFactor}, read by the metrics engine
    demand: dict[str, Any] = Field(default_factory=dict)
    # knobs for the simulated components, over SimConfig's at startup (config.py)
    sim: Knobs = Field(default_factory=Knobs)


# --- errors with lines -------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    loc: Loc
    message: str
    line: int | None = None  # when known without the YAML tree (a syntax error)


class ScenarioError(ValueError):
    """Everything wrong with a scenario, each problem with its field path and YAML line."""

    def __init__(self, source: str, problems: list[Problem], root: yaml.Node | None = None):
        self.source = source
        document = YamlDocument(data=None, root=root)  # only for its `line_of`
        self.problems = [(p, p.line or document.line_of(p.loc)) for p in problems]
        lines = [f"  {'line ' + str(line) + ': ' if line else ''}{_path(p.loc) or '(file)'}: "
                 f"{p.message}" for p, line in self.problems]
        super().__init__(f"invalid scenario {source!r}; nothing was created:\n"
                         + "\n".join(lines))


def _path(loc: Loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _pydantic_problems(error: ValidationError) -> list[Problem]:
    problems = []
    for err in error.errors():
        message = str(err["msg"]).removeprefix("Value error, ")
        value = err.get("input")
        if err["type"] != "missing" and isinstance(value, (str, int, float, bool)):
            message += f" (got {value!r})"
        problems.append(Problem(tuple(err["loc"]), message))
    return problems


# --- parsing -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParsedScenario:
    scenario: Scenario
    root: yaml.Node | None
    source: str

    def error(self, problems: list[Problem]) -> ScenarioError:
        return ScenarioError(self.source, problems, self.root)


def parse_scenario(text: str, source: str = "<scenario>") -> ParsedScenario:
    """Validate a scenario's text on its own (what needs no cluster); ScenarioError if bad."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else {}
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" (column {mark.column + 1})" if mark else ""
        raise ScenarioError(source, [Problem((), f"not valid YAML{where}: {e.problem}",
                                             mark.line + 1 if mark else None)]) from e
    finally:
        loader.dispose()
    if root is None:
        # Most often a wrong path or an unsaved file: an empty cluster is said explicitly.
        raise ScenarioError(source, [Problem((), "the scenario is empty; for a cluster with "
                                             "nothing in it use the shipped scenario `empty`")])
    if not isinstance(data, dict):
        keys = ", ".join(f.alias or n for n, f in Scenario.model_fields.items())
        raise ScenarioError(source, [Problem((), f"a scenario is a mapping with the keys "
                                             f"{keys}")], root)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(source, _pydantic_problems(e), root) from e
    parsed = ParsedScenario(scenario, root, source)
    problems = _static_problems(scenario)
    if problems:
        raise parsed.error(problems)
    return parsed


def _duplicates(loc: str, names: list[str]) -> list[Problem]:
    seen: set[str] = set()
    problems = []
    for i, name in enumerate(names):
        if name in seen:
            problems.append(Problem((loc, i), f"duplicate name {name!r}"))
        seen.add(name)
    return problems


def _static_problems(s: Scenario) -> list[Problem]:
    problems = _duplicates("namespaces", s.namespaces)
    problems += _duplicates("priorityClasses", [p.name for p in s.priority_classes])
    problems += _duplicates("pools", [p.name for p in s.pools])
    problems += [Problem(("namespaces", i), f"{ns!r} is not a valid namespace name (lower case "
                         "letters, digits and '-')")
                 for i, ns in enumerate(s.namespaces) if not _is_dns_label(ns)]
    defaults = [i for i, p in enumerate(s.priority_classes) if p.global_default]
    problems += [Problem(("priorityClasses", i, "globalDefault"), "only one PriorityClass "
                         "may be the global default") for i in defaults[1:]]
    for i, obj in enumerate(s.objects):
        for key in ("apiVersion", "kind"):
            if not isinstance(obj.get(key), str) or not obj[key]:
                problems.append(Problem(("objects", i, key), "Field required (a string)"))
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            problems.append(Problem(("objects", i, "metadata", "name"), "Field required: "
                                    "every object needs metadata.name"))
    for model, curve in s.demand.items():
        try:
            DemandModel.from_config({model: curve})
        except (TypeError, ValueError) as e:
            problems.append(Problem(("demand", model),
                                    str(e).removeprefix(f"demand.{model}: ")))
    return problems


def _is_dns_label(text: str) -> bool:
    return re.fullmatch(DNS_LABEL, text) is not None


# --- loading into a cluster --------------------------------------------------------------------

def scenario_text(name_or_path: str) -> tuple[str, str]:
    """(text, source) of a shipped scenario name or a file path."""
    shipped = SCENARIO_DIR / f"{name_or_path}.yaml"
    path = shipped if shipped.is_file() else Path(name_or_path)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml")))
        raise ScenarioError(name_or_path, [Problem((), f"no such scenario: not a shipped one "
                                                   f"({names}) nor a file")])
    return path.read_text(), (path.name if path == shipped else str(path))


def apply_scenario(store: Store, pools: NodePools, parsed: ParsedScenario) -> dict[str, int]:
    """Create a scenario's contents (namespaces, priority classes, pools and their nodes,
    objects): all of it, or none of it and a ScenarioError. Returns what was created."""
    return _Loader(store, pools, parsed).apply()


@dataclass
class _Planned:
    loc: Loc
    rt: ResourceType | None  # None: a kind a CustomResourceDefinition in the file defines
    namespace: str | None
    body: dict[str, Any]


class _Loader:
    def __init__(self, store: Store, pools: NodePools, parsed: ParsedScenario) -> None:
        self.store = store
        self.pools = pools
        self.parsed = parsed
        self.s = parsed.scenario
        self.created: list[tuple[ResourceType, str | None, str]] = []
        self.added_pools: list[str] = []

    def _plan_objects(self) -> tuple[list[_Planned], list[Problem]]:
        """Resolve each object's type and namespace, against the cluster as it is now."""
        registry = self.store.registry
        ns_type = self.store.type("namespaces")
        namespaces = set(self.s.namespaces) | {"default"}
        scenario_crds: dict[tuple[str, str], bool] = {}  # kinds defined by CRDs in the file
        planned, problems, seen = [], [], set()
        for i, obj in enumerate(self.s.objects):
            api_version, kind = obj["apiVersion"], obj["kind"]
            rt = registry.by_kind(api_version, kind)
            if rt is None and (api_version, kind) not in scenario_crds:
                problems.append(Problem(("objects", i, "kind"), f'no matches for kind "{kind}" '
                                        f'in version "{api_version}"'))
                continue
            if kind == "CustomResourceDefinition":
                spec = obj.get("spec") or {}
                for version in spec.get("versions") or []:
                    scenario_crds[(f"{spec.get('group')}/{version.get('name')}",
                                   (spec.get("names") or {}).get("kind", ""))] = (
                        spec.get("scope", "Namespaced") == "Namespaced")
            meta = obj["metadata"]
            namespaced = rt.namespaced if rt else scenario_crds[(api_version, kind)]
            namespace = (meta.get("namespace") or "default") if namespaced else None
            if namespace is not None and namespace not in namespaces and self.store.find(
                    ns_type, None, namespace) is None:
                problems.append(Problem(("objects", i, "metadata", "namespace"),
                                        f"namespace {namespace!r} is not in `namespaces`"))
            key = (api_version, kind, namespace, meta["name"])
            if key in seen:
                problems.append(Problem(("objects", i, "metadata", "name"),
                                        f"duplicate {kind} {meta['name']!r}"))
            seen.add(key)
            if rt is not None and self.store.find(rt, namespace, meta["name"]) is not None:
                problems.append(Problem(("objects", i, "metadata", "name"),
                                        f"{kind} {meta['name']!r} already exists"))
            planned.append(_Planned(("objects", i), rt, namespace, obj))
        return planned, problems

    def _cluster_problems(self) -> list[Problem]:
        problems = []
        pc_type = self.store.type("priorityclasses", "scheduling.k8s.io")
        for i, pc in enumerate(self.s.priority_classes):
            existing = self.store.find(pc_type, None, pc.name)
            if existing is not None and existing.get("value") != pc.value:
                problems.append(Problem(("priorityClasses", i, "value"), f"PriorityClass "
                                        f"{pc.name!r} exists with value {existing.get('value')}"))
        known = self.pools.by_name
        problems += [Problem(("pools", i, "name"), f"pool {p.name!r} already exists")
                     for i, p in enumerate(self.s.pools) if p.name in known]
        return problems

    def apply(self) -> dict[str, int]:
        planned, problems = self._plan_objects()
        problems = self._cluster_problems() + problems
        if problems:
            raise self.parsed.error(problems)
        where: Loc = ()
        nodes = 0
        try:
            ns_type = self.store.type("namespaces")
            for ns in dict.fromkeys(["default", *self.s.namespaces]):
                where = ("namespaces", self.s.namespaces.index(ns)) \
                    if ns in self.s.namespaces else ("namespaces",)
                if self.store.find(ns_type, None, ns) is None:
                    self._create(ns_type, None, {"metadata": {"name": ns}})
            pc_type = self.store.type("priorityclasses", "scheduling.k8s.io")
            for i, pc in enumerate(self.s.priority_classes):
                where = ("priorityClasses", i)
                if self.store.find(pc_type, None, pc.name) is None:
                    self._create(pc_type, None, pc.as_kubernetes())
            nodes_type = self.store.type("nodes")
            for i, pool in enumerate(self.s.pools):
                where = ("pools", i)
                self.pools.by_name[pool.name] = pool
                self.added_pools.append(pool.name)
                for n in range(pool.desired_size):
                    node = self.pools.register_node(pool, ready=True,
                                                    zone=pool.zones[n % len(pool.zones)])
                    self.created.append((nodes_type, None, node["metadata"]["name"]))
                    nodes += 1
            for item in planned:
                where = item.loc
                rt = item.rt or self.store.registry.by_kind(item.body["apiVersion"],
                                                            item.body["kind"])
                if rt is None:  # a CRD earlier in the file did not define it after all
                    raise errors.bad_request(f'no matches for kind "{item.body["kind"]}" in '
                                             f'version "{item.body["apiVersion"]}"')
                self._create(rt, item.namespace, item.body)
        except errors.ApiError as e:
            self._roll_back()
            raise self.parsed.error([Problem(where, e.message)]) from e
        return {"namespaces": len(self.s.namespaces), "priorityClasses":
                len(self.s.priority_classes), "pools": len(self.s.pools), "nodes": nodes,
                "objects": len(planned)}

    def _create(self, rt: ResourceType, namespace: str | None, body: dict[str, Any]) -> None:
        body = admit_create(self.store, rt, body)
        obj = self.store.create(rt, body, namespace)
        self.created.append((rt, namespace, obj["metadata"]["name"]))

    def _roll_back(self) -> None:
        for rt, namespace, name in reversed(self.created):
            self.store.finalize_deletion(rt, namespace, name)
        for name in self.added_pools:
            self.pools.by_name.pop(name, None)
