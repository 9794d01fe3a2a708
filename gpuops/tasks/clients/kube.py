"""The Kubernetes verbs gpuops needs, over the official client, with errors mapped.

Every call goes through `call`, which turns `ApiException` and connection failures into
the few classes of `gpuops.common.errors` (keeping the parsed `Status`); each temporary one
carries its retry delay for `gpuops.common.retry.with_retries` (429: Retry-After, 409: a quick
re-read, 5xx and unreachable: back-off).
Objects are returned as plain dicts (the API's JSON), so domain logic never depends on the
client's generated models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from gpuops.common.errors import (
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    KubeUnavailable,
)

T = TypeVar("T")
Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def map_api_exception(e: ApiException) -> KubeError:
    try:
        body = json.loads(e.body) if e.body else {}
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") or f"{e.status} {e.reason}"
    status = e.status
    if status == 404:
        return KubeNotFound(message, status=status, body=body)
    if status == 403 or status == 401:
        return KubeForbidden(message, status=status, body=body)
    if status == 409:
        return KubeConflict(message, status=status, body=body)
    if status in (400, 415, 422):
        return KubeInvalid(message, status=status, body=body)
    if status == 429:
        retry_after = (e.headers or {}).get("Retry-After") if e.headers else None
        details = body.get("details") or {}
        delay = float(retry_after or details.get("retryAfterSeconds") or 1)
        return KubeTooManyRequests(message, retry_after=delay, status=status, body=body)
    if status and status >= 500:
        return KubeServerError(message, status=status, body=body)
    return KubeError(message, status=status, body=body)


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except ApiException as e:
        raise map_api_exception(e) from e
    except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as e:
        raise KubeUnavailable(f"the Kubernetes API could not be reached: {e}") from e


def _plain(api: client.ApiClient, obj: Any) -> Obj:
    return obj if isinstance(obj, dict) else api.sanitize_for_serialization(obj)


@dataclass
class Kube:
    """One cluster: an ApiClient and the name events use for it."""

    api: client.ApiClient
    cluster_name: str = "sim"

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None,
                        cluster_name: str = "sim") -> Kube:
        if path:
            api = config.new_client_from_config(config_file=str(path), context=context)
        else:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            api = client.ApiClient(cfg)
        return cls(api, cluster_name)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def _raw(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a client method and return the JSON body as plain data."""
        resp = call(fn, *args, _preload_content=False, **kwargs)
        return json.loads(resp.data) if resp.data else None

    # --- pods ----------------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._raw(self.core.read_namespaced_pod, name, namespace)

    def list_pods(self, namespace: str | None = None, *, label_selector: str | None = None,
                  field_selector: str | None = None) -> list[Obj]:
        kwargs = {k: v for k, v in (("label_selector", label_selector),
                                    ("field_selector", field_selector)) if v}
        if namespace:
            return self._raw(self.core.list_namespaced_pod, namespace, **kwargs)["items"]
        return self._raw(self.core.list_pod_for_all_namespaces, **kwargs)["items"]

    def read_log(self, namespace: str, name: str, container: str, *, previous: bool = False,
                 tail_lines: int | None = None, limit_bytes: int | None = None) -> str:
        kwargs: dict[str, Any] = {"container": container, "previous": previous}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if limit_bytes is not None:
            kwargs["limit_bytes"] = limit_bytes
        resp: Any = call(self.core.read_namespaced_pod_log, name, namespace,
                         _preload_content=False, **kwargs)  # the raw response
        return resp.data.decode("utf-8", errors="replace")

    def evict_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction",
                     "metadata": {"name": name, "namespace": namespace}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        call(self.core.create_namespaced_pod_eviction, name, namespace, body,
             _preload_content=False)

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Strategic merge patch (e.g. annotations); a `metadata.uid` in it must match."""
        return self._raw(self.core.patch_namespaced_pod, name, namespace, patch,
                         _content_type=STRATEGIC_PATCH)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Strategic merge patch of pods/status (e.g. `status.nominatedNodeName`, which
        KEP-5278 opens to components other than the scheduler)."""
        return self._raw(self.core.patch_namespaced_pod_status, name, namespace, patch,
                         _content_type=STRATEGIC_PATCH)

    def list_pdbs(self, namespace: str | None = None) -> list[Obj]:
        policy = client.PolicyV1Api(self.api)
        if namespace:
            return self._raw(policy.list_namespaced_pod_disruption_budget, namespace)["items"]
        return self._raw(policy.list_pod_disruption_budget_for_all_namespaces)["items"]

    def delete_pod(self, namespace: str, name: str, *, grace_period: int | None = None) -> None:
        kwargs = {} if grace_period is None else {"grace_period_seconds": grace_period}
        call(self.core.delete_namespaced_pod, name, namespace, _preload_content=False, **kwargs)

    def get_namespace(self, name: str) -> Obj:
        return self._raw(self.core.read_namespace, name)

    def get_secret(self, namespace: str, name: str) -> Obj:
        """A Secret as the API returns it (`data` base64). The body is never logged: the
        client logs response bodies only when it preloads them, which `_raw` does not."""
        return self._raw(self.core.read_namespaced_secret, name, namespace)

    # --- events --------------------------------------------------------------------------------

    def list_events(self, namespace: str | None = None, *, field_selector: str | None = None
                    ) -> list[Obj]:
        kwargs = {"field_selector": field_selector} if field_selector else {}
        if namespace:
            return self._raw(self.core.list_namespaced_event, namespace, **kwargs)["items"]
        return self._raw(self.core.list_event_for_all_namespaces, **kwargs)["items"]

    # --- nodes ---------------------------------------------------------------------------------

    def get_node(self, name: str) -> Obj:
        return self._raw(self.core.read_node, name)

    def list_nodes(self, *, label_selector: str | None = None) -> list[Obj]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self._raw(self.core.list_node, **kwargs)["items"]

    def patch_node(self, name: str, patch: Obj) -> Obj:
        return self._raw(self.core.patch_node, name, patch, _content_type=STRATEGIC_PATCH)

    def merge_patch_node(self, name: str, patch: Obj) -> Obj:
        """JSON merge patch: lists are replaced whole (`spec.taints` is atomic in the API),
        a null removes a key (an annotation)."""
        return self._raw(self.core.patch_node, name, patch, _content_type=MERGE_PATCH)

    def set_unschedulable(self, name: str, unschedulable: bool) -> Obj:
        return self.patch_node(name, {"spec": {"unschedulable": unschedulable or None}})

    # --- discovery -----------------------------------------------------------------------------

    def api_groups(self) -> dict[str, list[str]]:
        """Every served API group (`/apis`) and its versions, the preferred one first."""
        body = self._raw(client.ApisApi(self.api).get_api_versions)
        groups: dict[str, list[str]] = {}
        for group in body.get("groups") or ():
            versions = [v["version"] for v in group.get("versions") or ()]
            preferred = (group.get("preferredVersion") or {}).get("version")
            if preferred in versions:
                versions.remove(preferred)
                versions.insert(0, preferred)
            groups[group["name"]] = versions
        return groups

    # --- workloads -----------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> Obj:
        """Any object of a named API group (apps, batch, CRDs...) by apiVersion and kind.

        The custom-objects path is generic: /apis/<group>/<version>/.../<plural>/<name>."""
        group, _, version = api_version.rpartition("/")
        plural = _plural(kind)
        if not group:
            raise KubeInvalid(f"get() serves named API groups only, not core {kind!r}; "
                              "use the typed verbs (get_pod, get_node)")
        if namespace:
            return self._raw(self.custom.get_namespaced_custom_object, group, version,
                             namespace, plural, name)
        return self._raw(self.custom.get_cluster_custom_object, group, version, plural, name)

    def get_deployment(self, namespace: str, name: str) -> Obj:
        return self._raw(self.apps.read_namespaced_deployment, name, namespace)

    def create_deployment(self, namespace: str, body: Obj) -> Obj:
        return self._raw(self.apps.create_namespaced_deployment, namespace, body)

    def patch_deployment(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Strategic merge patch (containers merge by name)."""
        return self._raw(self.apps.patch_namespaced_deployment, name, namespace, patch,
                         _content_type=STRATEGIC_PATCH)

    def delete_deployment(self, namespace: str, name: str) -> None:
        """Delete with background propagation: its ReplicaSets and pods go after it."""
        call(self.apps.delete_namespaced_deployment, name, namespace,
             body={"propagationPolicy": "Background"}, _preload_content=False)

    def get_service(self, namespace: str, name: str) -> Obj:
        return self._raw(self.core.read_namespaced_service, name, namespace)

    def create_service(self, namespace: str, body: Obj) -> Obj:
        return self._raw(self.core.create_namespaced_service, namespace, body)

    def delete_service(self, namespace: str, name: str) -> None:
        call(self.core.delete_namespaced_service, name, namespace, _preload_content=False)

    # --- a pod's own HTTP endpoints, through the API server's pod proxy ------------------------

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        """GET `path` on the pod's `port` (`/api/v1/namespaces/NS/pods/POD:PORT/proxy/PATH`):
        the body as it came. Nothing listening is a `KubeServerError` (503)."""
        resp: Any = call(self.core.connect_get_namespaced_pod_proxy_with_path,
                         f"{pod}:{port}", namespace, path.lstrip("/"), _preload_content=False)
        return bytes(resp.data)

    def proxy_post(self, namespace: str, pod: str, port: int, path: str, body: Obj
                   ) -> tuple[int, Any]:
        """POST a JSON body to the pod's `port`; (HTTP status, JSON answer). The client's
        connect_* calls take no body, so the request is built with its own serializer; an
        answer >= 400 is returned, not raised (a model server's 500 is an answer)."""
        method, url, headers, data, _ = self.api.param_serialize(
            "POST", "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}",
            {"namespace": namespace, "name": f"{pod}:{port}", "path": path.lstrip("/")},
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"])
        try:
            response = self.api.call_api(method, url, headers, data)
            response.read()
        except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as e:
            raise KubeUnavailable(f"the Kubernetes API could not be reached: {e}") from e
        try:
            answer = json.loads(response.data) if response.data else None
        except ValueError:
            answer = None
        return response.status, answer

    def get_priority_class(self, name: str) -> Obj:
        return self._raw(client.SchedulingV1Api(self.api).read_priority_class, name)

    def create_priority_class(self, body: Obj) -> Obj:
        return self._raw(client.SchedulingV1Api(self.api).create_priority_class, body)

    def patch_custom(self, group: str, version: str, namespace: str, plural: str, name: str,
                     patch: Obj | list) -> Obj:
        ctype = JSON_PATCH if isinstance(patch, list) else MERGE_PATCH
        return self._raw(self.custom.patch_namespaced_custom_object, group, version,
                         namespace, plural, name, patch, _content_type=ctype)

    def get_custom(self, group: str, version: str, namespace: str, plural: str, name: str
                   ) -> Obj:
        return self._raw(self.custom.get_namespaced_custom_object, group, version, namespace,
                         plural, name)

    def create_custom(self, group: str, version: str, namespace: str, plural: str, body: Obj
                      ) -> Obj:
        return self._raw(self.custom.create_namespaced_custom_object, group, version,
                         namespace, plural, body)

    def delete_custom(self, group: str, version: str, namespace: str, plural: str, name: str
                      ) -> None:
        call(self.custom.delete_namespaced_custom_object, group, version, namespace, plural,
             name, _preload_content=False)

    def list_custom(self, group: str, version: str, namespace: str | None, plural: str
                    ) -> list[Obj]:
        if namespace:
            return self._raw(self.custom.list_namespaced_custom_object, group, version,
                             namespace, plural)["items"]
        return self._raw(self.custom.list_cluster_custom_object, group, version,
                         plural)["items"]

    def top_owner(self, obj: Obj, *, max_depth: int = 5) -> Obj:
        """Follow controller ownerReferences up to the workload a person manages
        (Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob, Pod -> StatefulSet, ...).
        An owner that cannot be read (deleted, forbidden) ends the walk."""
        current = obj
        for _ in range(max_depth):
            ref = next((r for r in current["metadata"].get("ownerReferences") or []
                        if r.get("controller")), None)
            if ref is None:
                return current
            try:
                current = self.get(ref["apiVersion"], ref["kind"],
                                   current["metadata"].get("namespace"), ref["name"])
            except (KubeNotFound, KubeForbidden, KubeInvalid):
                return {"apiVersion": ref["apiVersion"], "kind": ref["kind"],
                        "metadata": {"name": ref["name"], "uid": ref.get("uid"),
                                     "namespace": obj["metadata"].get("namespace")}}
        return current


_PLURALS = {"Endpoints": "endpoints", "PodDisruptionBudget": "poddisruptionbudgets",
            "Ingress": "ingresses", "NetworkPolicy": "networkpolicies",
            "PriorityClass": "priorityclasses", "StorageClass": "storageclasses"}


def _plural(kind: str) -> str:
    return _PLURALS.get(kind) or (kind.lower() + ("es" if kind.endswith("s") else "s"))
