"""Pod subresources: `log` (with previous, tailLines, sinceSeconds, timestamps, follow),
`eviction` (honouring PodDisruptionBudgets), `binding` and `proxy` (to what answers on the
pod's port: `core/podproxy.py`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from ..core import errors
from ..core.clock import VirtualClock, rfc3339
from ..core.logs import LogStore
from ..core.pdb import pdb_budget, pdbs_covering
from ..core.podproxy import PodProxy, ProxyRequest
from ..core.store import Store
from .codecs import dry_run_of, query_int, query_time


class PodSubresources:
    def __init__(self, store: Store, clock: VirtualClock, logs: LogStore,
                 pod_proxy: PodProxy | None = None) -> None:
        self.store = store
        self.clock = clock
        self.logs = logs
        self.pods = store.type("pods")
        self.pod_proxy = pod_proxy or PodProxy()

    # --- log -----------------------------------------------------------------------------------

    async def read_log(self, request: web.Request, namespace: str, name: str
                       ) -> web.StreamResponse:
        q = request.query
        pod = self.store.get(self.pods, namespace, name)
        container = _container_name(pod, q.get("container"))
        # A container waiting to restart (CrashLoopBackOff) has no current instance: like the
        # kubelet, serve its last terminated one, which the log store keeps as the previous log.
        previous = q.get("previous") in ("true", "1") or _waiting_to_restart(pod, container)
        lines = self.logs.read(namespace, name, container, previous=previous)
        if lines is None:
            if previous:
                raise errors.bad_request(f'previous terminated container "{container}" in pod '
                                         f'"{name}" not found')
            raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to '
                                     f'start: {_waiting_reason(pod, container)}')
        since = query_int(q, "sinceSeconds")
        if since is not None:
            cutoff = self.clock.time() - since
            lines = [entry for entry in lines if entry[0] >= cutoff]
        since_time = query_time(q, "sinceTime")
        if since_time is not None:
            cutoff = since_time.timestamp()
            lines = [entry for entry in lines if entry[0] >= cutoff]
        tail = query_int(q, "tailLines")
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        timestamps = q.get("timestamps") in ("true", "1")
        body = _format(lines, timestamps)
        limit = query_int(q, "limitBytes")
        if limit is not None:
            body = body[:limit]
        if q.get("follow") not in ("true", "1") or previous:
            return web.Response(body=body, content_type="text/plain")
        return await self._follow(request, namespace, name, container, body, len(
            self.logs.read(namespace, name, container) or []), timestamps)

    async def _follow(self, request: web.Request, namespace: str, name: str, container: str,
                      initial: bytes, seen: int, timestamps: bool) -> web.StreamResponse:
        """Stream new lines until the container instance ends or the client goes away."""
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(initial)
        try:
            while True:
                await asyncio.sleep(0.2)
                lines = self.logs.read(namespace, name, container)
                pod = self.store.find(self.pods, namespace, name)
                if lines is None or pod is None or len(lines) < seen:
                    break  # pod gone or the container restarted: this instance's stream ends
                if len(lines) > seen:
                    await response.write(_format(lines[seen:], timestamps))
                    seen = len(lines)
                if _terminated(pod, container):
                    break
        except ConnectionResetError:
            pass  # the client went away
        return response

    # --- proxy ---------------------------------------------------------------------------------

    async def proxy(self, request: web.Request, namespace: str, name: str, path: str
                    ) -> web.Response:
        """`pods/[scheme:]<name>[:port]/proxy/<path>`: forwarded to what listens there; a pod
        whose server is not up refuses the connection (503, as kube-apiserver's proxy says)."""
        parts = name.split(":")
        if len(parts) == 3 or (len(parts) == 2 and parts[0] in ("http", "https")):
            parts = parts[1:]  # a scheme first
        pod_name, port = parts[0], parts[1] if len(parts) > 1 else ""
        pod = self.store.get(self.pods, namespace, pod_name)
        ip = (pod.get("status") or {}).get("podIP") or ""
        answer = None
        if ip:
            answer = self.pod_proxy.answer(ProxyRequest(
                namespace, pod_name, port, request.method, path or "/",
                dict(request.query), await request.read()))
        if answer is None:
            raise errors.ApiError(503, "ServiceUnavailable", "error trying to reach service: "
                                  f"dial tcp {ip}:{port or 80}: connect: connection refused")
        return web.Response(status=answer.status, body=answer.body,
                            headers={"Content-Type": answer.content_type})

    # --- eviction and binding ------------------------------------------------------------------

    def evict(self, body: Any, namespace: str, name: str, *, dry_run: bool = False
              ) -> web.Response:
        """`dry_run`: the query's; the Eviction's deleteOptions may ask for one too."""
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise errors.bad_request("the request body must be an Eviction")
        options = body.get("deleteOptions") or {}
        dry_run = dry_run_of(options.get("dryRun"), "DeleteOptions") or dry_run
        store, pods = self.store, self.pods
        pod = store.get(pods, namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            return _evicted()
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed", "Pending"):
            for pdb in pdbs_covering(store, pod):
                matching = store.list(pods, namespace)
                budget = pdb_budget(pdb, matching)
                if _is_healthy(pod) and budget["disruptionsAllowed"] < 1:
                    raise errors.too_many_requests(
                        "Cannot evict pod as it would violate the pod's disruption budget.", 10,
                        causes=[{"reason": "DisruptionBudget",
                                 "message": f"The disruption budget {pdb['metadata']['name']} "
                                            f"needs {budget['desiredHealthy']} healthy pods "
                                            f"and has {budget['currentHealthy']} currently"}])
        if not dry_run:
            store.mutate(pods, namespace, name, lambda p: _add_condition(
                p, "DisruptionTarget", "EvictionByEvictionAPI", "Eviction API: evicting",
                rfc3339(self.clock.now())), subresource="status")
        store.delete(pods, namespace, name, grace_period=options.get("gracePeriodSeconds"),
                     dry_run=dry_run)
        return _evicted()

    def bind(self, body: Any, namespace: str, name: str, *, dry_run: bool = False
             ) -> web.Response:
        target = (body.get("target") or {}) if isinstance(body, dict) else {}
        node = target.get("name")
        if not node:
            raise errors.invalid("Binding", name, "target.name", "Required value")
        pod = self.store.get(self.pods, namespace, name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise errors.ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                                  f'pods/binding "{name}": pod {name} is already assigned to '
                                  f'node "{pod["spec"]["nodeName"]}"')
        now = rfc3339(self.clock.now())

        def assign(p: dict[str, Any]) -> None:
            p["spec"]["nodeName"] = node
            p.setdefault("status", {}).pop("nominatedNodeName", None)  # KEP-5278
            _add_condition(p, "PodScheduled", "", "", now)
            cond = p["status"]["conditions"][-1]
            cond.pop("reason")
            cond.pop("message")

        self.store.mutate(self.pods, namespace, name, assign, subresource="binding",
                          dry_run=dry_run)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                  "status": "Success", "code": 201}, status=201)


def _container_name(pod: dict[str, Any], requested: str | None) -> str:
    spec = pod.get("spec") or {}
    names = [c["name"] for c in spec.get("containers") or []]
    all_names = names + [c["name"] for c in spec.get("initContainers") or []]
    if requested:
        if requested not in all_names:
            raise errors.bad_request(f'container {requested} is not valid for pod '
                                     f'{pod["metadata"]["name"]}')
        return requested
    if len(names) == 1:
        return names[0]
    raise errors.bad_request(f'a container name must be specified for pod '
                             f'{pod["metadata"]["name"]}, choose one of: [{" ".join(names)}]')


def _format(lines: list[tuple[float, str]], timestamps: bool) -> bytes:
    if timestamps:
        out = [f"{datetime.fromtimestamp(ts, UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}"
               f"000Z {line}" for ts, line in lines]
    else:
        out = [line for _, line in lines]
    return ("".join(line + "\n" for line in out)).encode()


def _statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])


def _waiting_reason(pod: dict[str, Any], container: str) -> str:
    for cs in _statuses(pod):
        if cs.get("name") == container and "waiting" in (cs.get("state") or {}):
            return cs["state"]["waiting"].get("reason", "ContainerCreating")
    return "ContainerCreating"


def _waiting_to_restart(pod: dict[str, Any], container: str) -> bool:
    for cs in _statuses(pod):
        if cs.get("name") == container:
            return "waiting" in (cs.get("state") or {}) and \
                bool((cs.get("lastState") or {}).get("terminated"))
    return False


def _terminated(pod: dict[str, Any], container: str) -> bool:
    return any(cs.get("name") == container and "terminated" in (cs.get("state") or {})
               for cs in _statuses(pod))


def _is_healthy(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _add_condition(pod: dict[str, Any], ctype: str, reason: str, message: str, now: str
                   ) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != ctype]
    conditions.append({"type": ctype, "status": "True", "reason": reason, "message": message,
                       "lastTransitionTime": now})


def _evicted() -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Success"}, status=201)
