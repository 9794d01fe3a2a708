"""The new version's objects, derived from the old ones (pure).

Blue-green on the Gateway API Inference Extension, as its upgrade guide does by hand: a second
model-server Deployment and a second InferencePool (and the pool's own endpoint picker when
the old one has one), so the route can send each pool a share of the traffic.

- The vLLM container (the one named, else the only one, else the one asking for GPUs) gets
  the new image, model (`--model`; the served model name is kept, so clients see no change)
  and engine flags; everything else in the pod (resources, probes, secrets by reference,
  node selection) is the old one's.
- Names: `<base>-<version hash>`, where base is the old object's `gpuops.io/rollout-base`
  label or its name, so a rollout of a rollout stays `llama-3-8b-1a2b3c`.
- Labels: the old pool's selector must not select the new pods (it would send them the old
  pool's traffic, and the analysis could not tell the versions apart), nor the old
  Deployment's selector (two Deployments would fight over the pods). So one selector key
  (`app` where there is one) takes the new pool's name as its value in the new pods, the new
  pool's selector and the new Deployment's, exactly as the guide's
  `matchLabels.app=<new>`. What else selects by that label (a Service, a PDB) selects the
  old pods only: the new ones are reached through their pool.
- The endpoint picker: its Service and Deployment copied under `<new pool>-epp`, with
  `--pool-name` pointing at the new pool.
- A LeaderWorkerSet (a model across nodes) becomes a LeaderWorkerSet: the leader's vLLM
  container changes as above, the workers' the same way when they run vLLM's server too,
  else only their image (`_worker_change`); both templates are relabelled. Its controller
  selects its pods by a label of its own, so only the pool's selector matters.
- A baseline (`--baseline fresh-copy`): the same objects with the old pod template as it is,
  named `<base>-baseline-<old version hash>`.

Objects come in and go out as the API's JSON (dicts); what cannot be derived is a
`ConfigError` naming the parameter it concerns (usually `pool`) and the object.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuops.common.annotations import PREFIX, ROLLOUT_BASE, ROLLOUT_RUN
from gpuops.common.errors import ConfigError
from gpuops.common.podfacts import GPU
from gpuops.common.quantity import parse_quantity
from gpuops.tasks.rollout.objects import InferencePool
from gpuops.tasks.rollout.params import VersionChange
from gpuops.tasks.rollout.workloads import (
    DEPLOYMENT,
    controller_labels,
    gpus_per_replica,
    group_size,
    is_lws,
    serving_template,
    template_at,
    template_paths,
    worker_template,
)

Obj = dict[str, Any]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
POOL_NAME_FLAGS = ("--pool-name", "--poolName")  # the endpoint picker's; older releases: camel


@dataclass(frozen=True)
class ServerVersion:
    """What a model-server version is: its vLLM container's image and command line."""

    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command + self.args

    def digest(self) -> str:
        text = json.dumps([self.image, list(self.command), list(self.args)])
        return hashlib.sha256(text.encode()).hexdigest()[:6]

    def describe(self) -> str:
        return f"{self.image} {' '.join(self.args)}".strip()


@dataclass(frozen=True)
class PoolCopy:
    """A model-server Deployment beside the old one, its InferencePool and picker."""

    pool_name: str
    deployment_name: str
    epp_name: str | None
    pool: Obj
    deployment: Obj
    epp_service: Obj | None = None
    epp_deployment: Obj | None = None

    def bodies(self) -> list[Obj]:
        """What to create, in order: the picker first, the pods last."""
        return [b for b in (self.epp_service, self.epp_deployment, self.pool, self.deployment)
                if b is not None]


@dataclass(frozen=True)
class NewVersion:
    """Everything the rollout creates, and what it knows of the old version."""

    namespace: str
    old_pool: str
    old_deployment: str
    old_version: ServerVersion
    version: ServerVersion
    pool_name: str
    deployment_name: str
    epp_name: str | None
    replicas: int
    gpus_per_replica: int  # a LeaderWorkerSet's: its group's, size x each pod's
    pool: Obj
    deployment: Obj  # the model server: a Deployment, or a LeaderWorkerSet like the old one
    epp_service: Obj | None = None
    epp_deployment: Obj | None = None
    baseline: PoolCopy | None = None  # a fresh copy of the old version, when asked for
    workload_kind: str = DEPLOYMENT
    group_size: int = 1  # pods per replica (a LeaderWorkerSet group's)

    @property
    def digest(self) -> str:
        return self.version.digest()


# --- the container -------------------------------------------------------------------------------

def _containers(template: Mapping[str, Any]) -> list[Obj]:
    return list((template.get("spec") or {}).get("containers") or [])


def _container_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    wanted = (resources.get("limits") or {}).get(GPU) or \
        (resources.get("requests") or {}).get(GPU) or 0
    return int(parse_quantity(wanted))


def vllm_container_index(deployment: Mapping[str, Any], name: str | None) -> int:
    """Which container is the model server: `name`, else the only one, else the one (only
    one) asking for GPUs."""
    where = f"{deployment.get('kind') or 'Deployment'} {deployment['metadata'].get('name')}"
    containers = _containers(serving_template(deployment))
    if not containers:
        raise ConfigError("pool", f"{where} has no containers")
    names = [str(c.get("name")) for c in containers]
    if name is not None:
        if name not in names:
            raise ConfigError("container", f"{where} has no container {name!r}; it has "
                              f"{', '.join(names)}")
        return names.index(name)
    if len(containers) == 1:
        return 0
    gpu = [i for i, c in enumerate(containers) if _container_gpus(c) > 0]
    if len(gpu) == 1:
        return gpu[0]
    raise ConfigError("container", f"{where} has containers {', '.join(names)}; name the "
                      "vLLM one")


def version_of(container: Mapping[str, Any]) -> ServerVersion:
    return ServerVersion(str(container.get("image") or ""),
                         tuple(str(a) for a in container.get("command") or ()),
                         tuple(str(a) for a in container.get("args") or ()))


def _find_flag(argv: Sequence[str], flag: str) -> tuple[int, bool] | None:
    """(index, has its value in the next word) of `flag` or `flag=...`."""
    for i, word in enumerate(argv):
        if word.startswith(flag + "="):
            return i, False
        if word == flag:
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            return i, has_value
    return None


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    found = _find_flag(argv, flag)
    if found is None:
        return None
    i, next_word = found
    if next_word:
        return argv[i + 1]
    word = argv[i]
    return word.split("=", 1)[1] if "=" in word else None


def _set_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """`flag` set to `value` (None: a switch) where it is, in the form it has; else added."""
    found = _find_flag(argv, flag)
    out = list(argv)
    if found is None:
        return out + ([flag] if value is None else [flag, value])
    i, next_word = found
    if value is None:
        return out
    if next_word:
        out[i + 1] = value
    else:
        out[i] = f"{flag}={value}"
    return out


def served_model(version: ServerVersion) -> str | None:
    """The model name clients ask for: `--served-model-name`, else `--model`, else
    `vllm serve MODEL`'s."""
    argv = version.argv
    return flag_value(argv, "--served-model-name") or flag_value(argv, "--model") or \
        _serve_positional(argv)


def _serve_positional(argv: Sequence[str]) -> str | None:
    for i, word in enumerate(argv):
        if word == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            return argv[i + 1]
    return None


def _with_model(command: list[str], args: list[str], model: str, where: str
                ) -> tuple[list[str], list[str]]:
    for argv in (args, command):
        if _find_flag(argv, "--model") is not None:
            argv[:] = _set_flag(argv, "--model", model)
            return command, args
    for argv in (args, command):
        for i, word in enumerate(argv):
            if word == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                argv[i + 1] = model
                return command, args
    raise ConfigError("model", f"{where} names its model neither with --model nor "
                      "`vllm serve MODEL`: cannot change it")


def new_container(container: Mapping[str, Any], change: VersionChange, where: str) -> Obj:
    """The old container with the new image, model and flags."""
    old = version_of(container)
    out = copy.deepcopy(dict(container))
    command, args = list(old.command), list(old.args)
    if change.model is not None:
        name = served_model(old)
        command, args = _with_model(command, args, change.model, where)
        if flag_value(command + args, "--served-model-name") is None and name:
            args += ["--served-model-name", name]  # clients keep asking for the same model
    for flag in change.args:
        key, eq, value = flag.partition("=")
        if key == "--port":
            raise ConfigError("args", "--port is the pool's target port: it cannot change "
                              "in a rollout")
        if _find_flag(command, key) is not None and _find_flag(args, key) is None:
            command = _set_flag(command, key, value if eq else None)
        else:
            args = _set_flag(args, key, value if eq else None)
    if change.image is not None:
        out["image"] = change.image
    if command:
        out["command"] = command
    if args or "args" in out:
        out["args"] = args
    return out


# --- labels --------------------------------------------------------------------------------------

def _pick(keys: Sequence[str]) -> str:
    for preferred in ("app", "app.kubernetes.io/name", "app.kubernetes.io/instance"):
        if preferred in keys:
            return preferred
    return min(keys)


def _match_labels(obj: Mapping[str, Any], where: str) -> dict[str, str]:
    selector = (obj.get("spec") or {}).get("selector") or {}
    if selector.get("matchExpressions"):
        raise ConfigError("pool", f"{where} selects its pods with matchExpressions; a rollout "
                          "needs matchLabels it can give the new version")
    labels = selector.get("matchLabels") or {}
    if not labels:
        raise ConfigError("pool", f"{where} has no spec.selector.matchLabels")
    return {str(k): str(v) for k, v in labels.items()}


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class Relabel:
    """The selector keys whose value the new objects change, and to what."""

    keys: frozenset[str]
    value: str

    def apply(self, labels: Mapping[str, str]) -> dict[str, str]:
        return {k: (self.value if k in self.keys else v) for k, v in labels.items()}


def relabel_for(pool_selector: Mapping[str, str], workload_selector: Mapping[str, str],
                value: str) -> Relabel:
    shared = sorted(set(pool_selector) & set(workload_selector))
    keys = {_pick(shared)} if shared else {_pick(list(pool_selector)),
                                            _pick(list(workload_selector))}
    return Relabel(frozenset(keys), value)


# --- names ---------------------------------------------------------------------------------------

def _base(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str((meta.get("labels") or {}).get(ROLLOUT_BASE) or meta.get("name"))


def derived_name(obj: Mapping[str, Any], digest: str, room: int = 59) -> str:
    """`<base>-<digest>` within `room` characters (a pool's leaves room for `-epp`)."""
    base = _base(obj)[: room - len(digest) - 1].rstrip("-")
    return f"{base}-{digest}"


def _metadata(old: Mapping[str, Any], name: str, namespace: str, run_id: str, base: str,
              relabel: Relabel | None = None) -> Obj:
    meta = old.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    if relabel is not None:
        labels = relabel.apply(labels)
    labels[ROLLOUT_BASE] = base
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != LAST_APPLIED and not k.startswith(PREFIX)}
    annotations[ROLLOUT_RUN] = run_id
    return {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}


# --- the objects ---------------------------------------------------------------------------------

def _new_template(template: Mapping[str, Any], relabel: Relabel,
                  container: tuple[int, Obj] | None) -> Obj:
    tmeta = dict(template.get("metadata") or {})
    tmeta["labels"] = relabel.apply(tmeta.get("labels") or {})
    tmeta.pop("creationTimestamp", None)
    tspec = dict(template.get("spec") or {})
    if container is not None:
        containers = list(tspec.get("containers") or [])
        containers[container[0]] = container[1]
        tspec["containers"] = containers
    return {"metadata": tmeta, "spec": tspec}


def _new_deployment(old: Mapping[str, Any], name: str, relabel: Relabel, replicas: int,
                    container_index: int, container: Obj, run_id: str,
                    worker: tuple[int, Obj] | None = None) -> Obj:
    """The old model server (a Deployment or a LeaderWorkerSet) as the new one: its serving
    template with `container` at `container_index`, a LeaderWorkerSet's worker template with
    `worker`; every template and selector relabelled."""
    spec = copy.deepcopy(dict(old.get("spec") or {}))
    for i, path in enumerate(template_paths(old)):
        parent = spec
        for key in path[:-1]:
            parent[key] = dict(parent.get(key) or {})
            parent = parent[key]
        parent[path[-1]] = _new_template(template_at(old, path), relabel,
                                         (container_index, container) if i == 0 else worker)
    if not is_lws(old):
        spec["selector"] = {"matchLabels": relabel.apply(spec["selector"]["matchLabels"])}
    spec["replicas"] = replicas
    spec.pop("paused", None)
    namespace = str(old["metadata"].get("namespace") or "default")
    return {"apiVersion": str(old.get("apiVersion") or "apps/v1"),
            "kind": str(old.get("kind") or "Deployment"),
            "metadata": _metadata(old, name, namespace, run_id, _base(old), relabel),
            "spec": spec}


def _new_pool(old: Mapping[str, Any], pool: InferencePool, name: str, relabel: Relabel,
              epp_name: str | None, run_id: str) -> Obj:
    spec = copy.deepcopy(dict(old.get("spec") or {}))
    selector = relabel.apply(pool.selector)
    if pool.api.version == "v1alpha2":
        spec["selector"] = selector
        ref_key = "extensionRef"
    else:
        spec["selector"] = {**(spec.get("selector") or {}), "matchLabels": selector}
        ref_key = "endpointPickerRef"
    if epp_name is not None and isinstance(spec.get(ref_key), Mapping):
        spec[ref_key] = {**spec[ref_key], "name": epp_name}
    return {"apiVersion": pool.api.api_version, "kind": "InferencePool",
            "metadata": _metadata(old, name, pool.namespace, run_id, _base(old)),
            "spec": spec}


def _new_epp(service: Mapping[str, Any], deployment: Mapping[str, Any], name: str,
             pool_name: str, run_id: str) -> tuple[Obj, Obj]:
    where = f"endpoint picker Deployment {deployment['metadata'].get('name')}"
    service_selector = {str(k): str(v) for k, v in
                        ((service.get("spec") or {}).get("selector") or {}).items()}
    relabel = relabel_for(service_selector, _match_labels(deployment, where), name)
    sspec = service.get("spec") or {}
    ports = [{k: v for k, v in p.items() if k != "nodePort"} for p in sspec.get("ports") or ()]
    namespace = str(service["metadata"].get("namespace") or "default")
    new_service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": _metadata(service, name, namespace, run_id, name),
                   "spec": {"selector": relabel.apply(service_selector), "ports": ports,
                            "type": sspec.get("type") or "ClusterIP"}}
    containers = copy.deepcopy(_containers((deployment.get("spec") or {}).get("template")
                                           or {}))
    pointed = False
    for container in containers:
        for key in ("args", "command"):
            argv = [str(a) for a in container.get(key) or ()]
            for flag in POOL_NAME_FLAGS:
                if _find_flag(argv, flag) is not None:
                    argv = _set_flag(argv, flag, pool_name)
                    container[key] = argv
                    pointed = True
    if not pointed:
        raise ConfigError("pool", f"{where} has no --pool-name argument: the new pool's "
                          "picker cannot be pointed at it")
    new_deployment = _new_deployment(deployment, name, relabel,
                                     int((deployment.get("spec") or {}).get("replicas") or 1),
                                     0, containers[0], run_id)
    new_deployment["spec"]["template"]["spec"]["containers"] = containers
    new_deployment["metadata"]["labels"][ROLLOUT_BASE] = name
    return new_service, new_deployment


def _workload_selector(workload: Mapping[str, Any], where: str) -> dict[str, str]:
    """What the workload's controller selects its pods by (a LeaderWorkerSet: the
    `leaderworkerset.sigs.k8s.io/name` label it sets itself, nothing a template carries)."""
    return {} if is_lws(workload) else _match_labels(workload, where)


def _relabel(pool: InferencePool, workload: Mapping[str, Any], value: str, where: str
             ) -> Relabel:
    if not is_lws(workload):
        return relabel_for(pool.selector, _match_labels(workload, where), value)
    own = [k for k in pool.selector if k not in controller_labels(pool.selector)]
    if not own:
        raise ConfigError("pool", f"InferencePool {pool.ref} selects {where}'s pods only by "
                          "labels the LeaderWorkerSet controller sets; add a template label "
                          "(such as app) to its selector so the new version's pods can differ")
    return Relabel(frozenset({_pick(own)}), value)


def _copy(*, pool: InferencePool, pool_obj: Mapping[str, Any], deployment: Mapping[str, Any],
          index: int, container: Obj, suffix: str, run_id: str,
          epp_service: Mapping[str, Any] | None, epp_deployment: Mapping[str, Any] | None,
          worker: tuple[int, Obj] | None = None) -> PoolCopy:
    """The old pool's objects with `container` as the model server (and `worker` as a
    LeaderWorkerSet's worker container), named `<base>-<suffix>` and labelled so no old
    object selects them (see the module docstring)."""
    where = f"{deployment.get('kind') or 'Deployment'} {pool.namespace}/" \
        f"{deployment['metadata']['name']}"
    pool_name = derived_name(pool_obj, suffix)
    deployment_name = derived_name(deployment, suffix, room=63)
    if pool.endpoint_picker is not None and (epp_service is None or epp_deployment is None):
        raise ConfigError("pool", f"InferencePool {pool.ref}'s endpoint picker "
                          f"{pool.endpoint_picker.kind} {pool.endpoint_picker.name} was not "
                          "found (a Service and the Deployment it selects): the new pool "
                          "needs a picker of its own")
    epp_name = f"{pool_name}-epp" if pool.endpoint_picker is not None else None
    relabel = _relabel(pool, deployment, pool_name, where)
    replicas = int((deployment.get("spec") or {}).get("replicas") or 1)
    new_deployment = _new_deployment(deployment, deployment_name, relabel, replicas, index,
                                     container, run_id, worker)
    new_labels = dict((serving_template(new_deployment).get("metadata") or {}).get("labels")
                      or {})
    if _selects(pool.selector, new_labels) or \
            _selects(_workload_selector(deployment, where), new_labels):
        raise AssertionError("the new pods' labels are still selected by the old objects")
    service = deployment_epp = None
    if epp_name is not None and epp_service is not None and epp_deployment is not None:
        service, deployment_epp = _new_epp(epp_service, epp_deployment, epp_name, pool_name,
                                           run_id)
    return PoolCopy(pool_name, deployment_name, epp_name,
                    _new_pool(pool_obj, pool, pool_name, relabel, epp_name, run_id),
                    new_deployment, service, deployment_epp)


def derive(*, pool: InferencePool, pool_obj: Mapping[str, Any], deployment: Mapping[str, Any],
           change: VersionChange, run_id: str, container: str | None = None,
           epp_service: Mapping[str, Any] | None = None,
           epp_deployment: Mapping[str, Any] | None = None,
           baseline: bool = False) -> NewVersion:
    """The new version beside the old (see the module docstring); `baseline`: and a fresh
    copy of the old version (`baseline_copy`)."""
    dname = str(deployment["metadata"]["name"])
    kind = str(deployment.get("kind") or DEPLOYMENT)
    where = f"{kind} {pool.namespace}/{dname}"
    index = vllm_container_index(deployment, container)
    old_container = _containers(serving_template(deployment))[index]
    container_obj = new_container(old_container, change, where)
    old_version, version = version_of(old_container), version_of(container_obj)
    if version == old_version:
        raise ConfigError("image", f"the new version is the one serving now "
                          f"({old_version.describe()}): change the image, model or args")
    worker = _worker_change(deployment, str(old_container.get("name")), change, where)
    common: dict[str, Any] = {"pool": pool, "pool_obj": pool_obj, "deployment": deployment,
                              "index": index, "run_id": run_id, "epp_service": epp_service,
                              "epp_deployment": epp_deployment}
    new = _copy(container=container_obj, suffix=version.digest(), worker=worker, **common)
    # The baseline: the old pod template as it is, under a name no version hash can take.
    copy_ = _copy(container=copy.deepcopy(dict(old_container)),
                  suffix=f"baseline-{old_version.digest()}", **common) if baseline else None
    return NewVersion(pool.namespace, pool.name, dname, old_version, version, new.pool_name,
                      new.deployment_name, new.epp_name,
                      int(new.deployment["spec"]["replicas"]), gpus_per_replica(new.deployment),
                      new.pool, new.deployment, new.epp_service, new.epp_deployment, copy_,
                      kind, group_size(deployment))


def _worker_change(workload: Mapping[str, Any], name: str, change: VersionChange, where: str
                   ) -> tuple[int, Obj] | None:
    """A LeaderWorkerSet's worker container in the new version: the one named as the leader's
    vLLM container (else the only one, else the one asking for GPUs) gets the new image, and
    the model and flags too when it runs vLLM's server itself (wide expert parallelism: every
    pod a data-parallel rank); a worker that only joins the leader's engine (`ray start`)
    keeps its command line."""
    template = worker_template(workload)
    if template is None:
        return None
    containers = _containers(template)
    names = [str(c.get("name")) for c in containers]
    if name in names:
        index = names.index(name)
    else:
        gpu = [i for i, c in enumerate(containers) if _container_gpus(c) > 0]
        if len(containers) != 1 and len(gpu) != 1:
            return None  # no container to tell: the workers stay as they are
        index = 0 if len(containers) == 1 else gpu[0]
    old = containers[index]
    runs_server = served_model(version_of(old)) is not None
    worker_change = change if runs_server else VersionChange(image=change.image)
    return index, new_container(old, worker_change, f"{where} workerTemplate")


def epp_deployment_of(service: Mapping[str, Any], deployments: Sequence[Mapping[str, Any]]
                      ) -> Mapping[str, Any] | None:
    """The one Deployment whose pods the picker's Service selects (None: none or several)."""
    selector = (service.get("spec") or {}).get("selector") or {}
    found = [d for d in deployments
             if _selects(selector, ((d.get("spec") or {}).get("template") or {}).get(
                 "metadata", {}).get("labels") or {})]
    return found[0] if len(found) == 1 else None
