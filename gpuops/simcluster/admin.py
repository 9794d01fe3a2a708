"""The admin endpoints: inject faults, move the clock, read a summary. Not part of Kubernetes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import orjson
from aiohttp import web
from pydantic import Field

from .core import errors
from .core.faults import ErrorRule, FaultParams

if TYPE_CHECKING:
    from .apiserver.server import ApiServer
    from .cluster import SimCluster

Method = Literal["*", "GET", "POST", "PUT", "PATCH", "DELETE"]


class LatencyParams(FaultParams):
    seconds: float | None = Field(None, ge=0, le=60, description="added to every API "
                                  "request (or give ms)")
    ms: float | None = Field(None, ge=0, le=60_000, description="the same in milliseconds")


class ErrorParams(FaultParams):
    count: int = Field(1, ge=1, le=1_000_000, description="how many requests get the error")
    path: str = Field("*", min_length=1, description="a glob on the request path, e.g. "
                      "/api/v1/namespaces/*/pods")
    method: Method = Field("*", description="only requests with this method")


class ThrottleParams(ErrorParams):
    retry_after: int = Field(1, ge=0, le=3600, description="the Retry-After header, seconds")


def register_api_faults(cluster: SimCluster, server: ApiServer) -> None:
    faults, store = server.faults, cluster.store

    def latency(_target: str | None, p: dict[str, Any]) -> dict[str, Any]:
        faults.latency_s = float(p.get("seconds", p.get("ms", 0.0) / 1000))
        return {"latency_s": faults.latency_s}

    def error_rule(code: int) -> Any:
        def add(_target: str | None, p: dict[str, Any]) -> dict[str, Any]:
            rule = ErrorRule(code, p["count"], p.get("retry_after", 1), p["path"], p["method"])
            faults.rules.append(rule)
            return {"code": code, "count": rule.remaining, "path": rule.path}
        return add

    def drop_watches(_target: str | None, _p: dict[str, Any]) -> dict[str, Any]:
        return {"dropped": store.drop_all_watches()}

    def force_410(_target: str | None, _p: dict[str, Any]) -> dict[str, Any]:
        store.compact()
        return {"dropped": store.drop_all_watches(), "compacted_to": store.resource_version}

    def clear(_target: str | None, _p: dict[str, Any]) -> dict[str, Any]:
        faults.clear()
        return {"cleared": True}

    reg = cluster.faults
    reg.register("api-latency", latency, "add latency to every API request",
                 params=LatencyParams)
    reg.register("api-429", error_rule(429), "answer the next `count` requests with 429 and "
                 "Retry-After", params=ThrottleParams)
    reg.register("api-500", error_rule(500), "answer the next `count` requests with 500",
                 params=ErrorParams)
    reg.register("drop-watches", drop_watches, "close every open watch connection")
    reg.register("force-410", force_410, "forget watch history: older resourceVersions get "
                 "410 Gone, open watches are closed")
    reg.register("api-clear", clear, "remove API latency and pending error rules")


def add_admin_routes(app: web.Application, cluster: SimCluster, server: ApiServer) -> None:
    register_api_faults(cluster, server)

    async def post_fault(request: web.Request) -> web.Response:
        body = await _json(request)
        kind = body.get("kind")
        if not isinstance(kind, str):
            raise errors.bad_request("field 'kind' is required: the fault to inject "
                                     f"(one of {', '.join(cluster.faults.kinds())})")
        params = body.get("params") or {}
        if not isinstance(params, dict):
            raise errors.bad_request("field 'params' must be an object")
        if body.get("target") is not None and not isinstance(body["target"], str):
            raise errors.bad_request("field 'target' must be a string or null")
        result = cluster.faults.inject(kind, body.get("target"), params)
        return web.json_response({"kind": kind, "target": body.get("target"), **result})

    async def get_faults(_request: web.Request) -> web.Response:
        return web.json_response(cluster.faults.describe())

    async def clock(request: web.Request) -> web.Response:
        if request.method == "POST":
            body = await _json(request)
            try:
                if "speed" in body:
                    cluster.clock.set_speed(float(body["speed"]))
                if "advance" in body:
                    cluster.clock.advance(float(body["advance"]))
            except ValueError as e:
                raise errors.bad_request(str(e)) from e
        return web.json_response({"now": cluster.clock.now().isoformat(),
                                  "time": cluster.clock.time(), "speed": cluster.clock.speed})

    async def history(request: web.Request) -> web.Response:
        body = await _json(request)
        window = body.get("window")
        if not isinstance(window, int) or window < 1:
            raise errors.bad_request("field 'window' must be a positive integer")
        cluster.store.set_history_window(window)
        return web.json_response({"window": window})

    async def state(_request: web.Request) -> web.Response:
        counts = {rt.key: cluster.store.count(rt) for rt in cluster.store.registry.all()}
        return web.json_response({"cluster": cluster.config.cluster_name,
                                  "resourceVersion": cluster.store.resource_version,
                                  "now": cluster.clock.now().isoformat(),
                                  "objects": {k: v for k, v in counts.items() if v}})

    async def scenario(request: web.Request) -> web.Response:
        """Load a scenario (its `name`, a shipped one or a path, or its `yaml` text) into the
        running cluster: all of it or, if any part is invalid, none of it (422)."""
        from .scenario import ScenarioError, load_scenario, load_scenario_text

        body = await _json(request)
        try:
            if isinstance(body.get("yaml"), str):
                summary = load_scenario_text(cluster, body["yaml"], "<admin>")
            elif isinstance(body.get("name"), str):
                summary = load_scenario(cluster, body["name"], at_startup=False)
            else:
                raise errors.bad_request("field 'name' (a shipped scenario or a path) or "
                                         "'yaml' (a scenario's text) is required")
        except ScenarioError as e:
            raise errors.ApiError(422, "Invalid", str(e)) from e
        return web.json_response(summary)

    app.router.add_post("/admin/faults", post_fault)
    app.router.add_post("/admin/scenario", scenario)
    app.router.add_get("/admin/faults", get_faults)
    app.router.add_route("*", "/admin/clock", clock)
    app.router.add_post("/admin/history", history)
    app.router.add_get("/admin/state", state)


async def _json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"the request body is not valid JSON: {e}") from e
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return body


def fault_catalog() -> dict[str, dict[str, Any]]:
    """Every fault kind a cluster registers, described from its parameter model, without
    starting a cluster (for `gpuops sim fault --list`)."""
    from .apiserver.server import ApiServer
    from .cluster import SimCluster, SimConfig
    from .controllers_all import build_controllers

    cluster = SimCluster(SimConfig(scenario="empty"))
    build_controllers(cluster)
    register_api_faults(cluster, ApiServer(cluster))
    return cluster.faults.describe()
