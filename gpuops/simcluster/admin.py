"""The admin endpoints: inject faults, move the clock, load a scenario, read a summary.

Not part of Kubernetes: the simulator's own API under `/admin`, which `gpuops sim` and the
tests call. It drives the cluster only through what it is handed (the store, the clock, the
fault registry every component registered its faults in, and a scenario loader).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from .core import errors
from .core.clock import VirtualClock
from .core.faults import FaultRegistry
from .core.store import Store
from .scenario import ScenarioError, scenario_text

# (text, source) -> what was created; ScenarioError (nothing created) if any part is invalid
ScenarioLoader = Callable[[str, str], dict[str, int]]


class AdminApi:
    def __init__(self, store: Store, clock: VirtualClock, faults: FaultRegistry,
                 cluster_name: str, load_scenario: ScenarioLoader) -> None:
        self.store = store
        self.clock = clock
        self.faults = faults
        self.cluster_name = cluster_name
        self.load_scenario = load_scenario

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/admin/faults", self.post_fault)
        app.router.add_post("/admin/scenario", self.scenario)
        app.router.add_get("/admin/faults", self.get_faults)
        app.router.add_route("*", "/admin/clock", self.clock_endpoint)
        app.router.add_post("/admin/history", self.history)
        app.router.add_get("/admin/state", self.state)

    async def post_fault(self, request: web.Request) -> web.Response:
        body = await _json(request)
        kind = body.get("kind")
        if not isinstance(kind, str):
            raise errors.bad_request("field 'kind' is required: the fault to inject "
                                     f"(one of {', '.join(self.faults.kinds())})")
        params = body.get("params") or {}
        if not isinstance(params, dict):
            raise errors.bad_request("field 'params' must be an object")
        if body.get("target") is not None and not isinstance(body["target"], str):
            raise errors.bad_request("field 'target' must be a string or null")
        result = self.faults.inject(kind, body.get("target"), params)
        return web.json_response({"kind": kind, "target": body.get("target"), **result})

    async def get_faults(self, _request: web.Request) -> web.Response:
        return web.json_response(self.faults.describe())

    async def clock_endpoint(self, request: web.Request) -> web.Response:
        clock = self.clock
        if request.method == "POST":
            body = await _json(request)
            try:
                if "speed" in body:
                    clock.set_speed(_number(body, "speed"))
                if "advance" in body:
                    clock.advance(_number(body, "advance"))
            except ValueError as e:
                raise errors.bad_request(str(e)) from e
        return web.json_response({"now": clock.now().isoformat(), "time": clock.time(),
                                  "speed": clock.speed})

    async def history(self, request: web.Request) -> web.Response:
        body = await _json(request)
        window = body.get("window")
        if not isinstance(window, int) or window < 1:
            raise errors.bad_request("field 'window' must be a positive integer")
        self.store.set_history_window(window)
        return web.json_response({"window": window})

    async def state(self, _request: web.Request) -> web.Response:
        store = self.store
        counts = {rt.key: store.count(rt) for rt in store.registry.all()}
        return web.json_response({"cluster": self.cluster_name,
                                  "resourceVersion": store.resource_version,
                                  "now": self.clock.now().isoformat(),
                                  "objects": {k: v for k, v in counts.items() if v}})

    async def scenario(self, request: web.Request) -> web.Response:
        """Load a scenario (its `name`, a shipped one or a path, or its `yaml` text) into the
        running cluster: all of it or, if any part is invalid, none of it (422)."""
        body = await _json(request)
        try:
            if isinstance(body.get("yaml"), str):
                summary = self.load_scenario(body["yaml"], "<admin>")
            elif isinstance(body.get("name"), str):
                summary = self.load_scenario(*scenario_text(body["name"]))
            else:
                raise errors.bad_request("field 'name' (a shipped scenario or a path) or "
                                         "'yaml' (a scenario's text) is required")
        except ScenarioError as e:
            raise errors.ApiError(422, "Invalid", str(e)) from e
        return web.json_response(summary)


def _number(body: dict[str, Any], field: str) -> float:
    try:
        return float(body[field])
    except (TypeError, ValueError):
        raise errors.bad_request(f"field {field!r} must be a number of seconds (or, for "
                                 f"'speed', a factor), got {body[field]!r}") from None


async def _json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"the request body is not valid JSON: {e}") from e
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return body
