"""How simcluster's API answers what goes wrong: a bad request it detects is a 400 naming what
is wrong, its own bug a 500 (as kube-apiserver answers), and a stream the server cuts ends in
an error, never as if it had finished."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest
from aiohttp import ClientPayloadError, web
from aiohttp.test_utils import TestClient, TestServer
from kubernetes import client, config

from gpuops.simcluster.apiserver.server import ApiServer
from gpuops.simcluster.cluster import SimCluster
from gpuops.simcluster.config import SimConfig
from gpuops.simcluster.core.clock import VirtualClock
from gpuops.simcluster.core.faults import FaultRegistry
from gpuops.simcluster.core.logs import LogStore
from gpuops.simcluster.core.store import Store
from gpuops.simcluster.scenario import parse_scenario, scenario_text
from gpuops.simcluster.testing import SimClusterThread
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


def test_stopping_the_cluster_while_a_log_is_followed_does_not_wait_for_it_and_cuts_it(tmp_path):
    sim = SimClusterThread(SimConfig(scenario="empty"), tmp_path / "kubeconfig").start()
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))
    core.create_node({"metadata": {"name": "node-1"}, "status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
    core.create_namespaced_pod("default", {"metadata": {"name": "api"}, "spec": {
        "nodeName": "node-1", "containers": [{"name": "app", "image": "acme/api:1"}]}})
    sim.advance(5)
    wait_for(lambda: core.read_namespaced_pod("api", "default").status.phase == "Running",
             message="pod api running")
    stream = core.read_namespaced_pod_log("api", "default", follow=True,
                                          _preload_content=False)
    first_line = stream.readline()  # the stream is live
    ended: list[str] = []

    def read_to_the_end() -> None:
        try:
            while stream.read(1024):
                pass
            ended.append("clean end")
        except Exception as e:  # noqa: BLE001 - how it ended is what the test checks
            ended.append(type(e).__name__)

    reader = threading.Thread(target=read_to_the_end, daemon=True)
    reader.start()
    sim.stop()  # SimClusterThread gives the cluster 30 s to stop
    reader.join(10)

    assert first_line
    assert ended and ended[0] != "clean end", ended



async def _stream_cancelled_after(path: str, seconds: float) -> str:
    """Open a stream on a cluster whose requests are cancelled after `seconds` (a deadline
    around every handler, as any caller's timeout would be) and say how the stream ended."""
    cluster = SimCluster(SimConfig(scenario="empty", controllers=False))
    app = cluster.assemble(parse_scenario(*scenario_text("empty")))
    cluster.store.create(cluster.store.type("pods"), {
        "metadata": {"name": "api", "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "acme/api:1"}]}})
    cluster.logs.write("default", "api", "app", cluster.clock.time(), "serving")

    @web.middleware
    async def deadline(request: web.Request, handler) -> web.StreamResponse:
        async with asyncio.timeout(seconds):
            return await handler(request)

    app.middlewares.insert(0, deadline)
    async with TestClient(TestServer(app)) as http:
        response = await http.get(path)
        try:
            await response.read()
        except ClientPayloadError:
            return "cut"
        return "finished"


@pytest.mark.parametrize("path", [
    "/api/v1/namespaces/default/pods/api/log?follow=true",
    "/api/v1/namespaces/default/pods?watch=true",
])
def test_a_stream_whose_request_is_cancelled_ends_cut_not_as_if_it_had_finished(path):
    assert asyncio.run(_stream_cancelled_after(path, 0.5)) == "cut"


def test_a_failure_inside_simcluster_is_a_500_internal_error_not_a_400(tmp_path):
    """What the middleware answers when simcluster's own code raises (a KeyError here, from
    a route the test adds): the client must not be told its request was bad."""
    async def scenario() -> tuple[int, dict]:
        store = Store(VirtualClock())
        api = ApiServer(store, store.clock, LogStore(), FaultRegistry())
        app = web.Application(middlewares=[api.middleware])

        async def buggy(_request: web.Request) -> web.Response:
            return web.json_response({}[_request.match_info["key"]])

        app.router.add_get("/buggy/{key}", buggy)
        async with TestClient(TestServer(app)) as http:
            response = await http.get("/buggy/name")
            return response.status, await response.json()

    status, body = asyncio.run(scenario())

    assert status == 500
    assert body["kind"] == "Status" and body["reason"] == "InternalError"
    assert "KeyError" in body["message"]


def raw(sim: SimClusterThread, method: str, path: str, body: dict | None = None
        ) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(sim.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize(("path", "parameter"), [
    ("/api/v1/pods?limit=ten", "limit"),
    ("/api/v1/pods?watch=true&timeoutSeconds=soon", "timeoutSeconds"),
    ("/api/v1/namespaces/default/pods/api/log?tailLines=all", "tailLines"),
    ("/api/v1/namespaces/default/pods/api/log?sinceSeconds=1h", "sinceSeconds"),
    ("/api/v1/namespaces/default/pods/api/log?limitBytes=1k", "limitBytes"),
    ("/api/v1/namespaces/default/pods/api/log?sinceTime=yesterday", "sinceTime"),
])
def test_a_malformed_query_parameter_is_a_400_naming_the_parameter(sim, path, parameter):
    core = client.CoreV1Api(sim.api)
    core.create_node({"metadata": {"name": "node-1"}, "status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}})
    core.create_namespaced_pod("default", {"metadata": {"name": "api"}, "spec": {
        "nodeName": "node-1", "containers": [{"name": "app", "image": "acme/api:1"}]}})
    sim.advance(5)
    wait_for(lambda: core.read_namespaced_pod("api", "default").status.phase == "Running",
             message="pod api running")

    status, body = raw(sim, "GET", path)

    assert status == 400 and body["reason"] == "BadRequest", body
    assert parameter in body["message"], body["message"]


def test_a_delete_with_a_grace_period_that_is_not_a_number_is_a_400_naming_it(sim):
    client.CoreV1Api(sim.api).create_namespaced_config_map("default", {
        "metadata": {"name": "settings"}})

    status, body = raw(sim, "DELETE", "/api/v1/namespaces/default/configmaps/settings"
                       "?gracePeriodSeconds=later")

    assert status == 400 and "gracePeriodSeconds" in body["message"], body


@pytest.mark.parametrize("field", ["advance", "speed"])
def test_moving_the_clock_by_something_that_is_not_a_number_is_a_400_naming_the_field(
        sim, field):
    status, body = raw(sim, "POST", "/admin/clock", {field: None})

    assert status == 400 and body["reason"] == "BadRequest", body
    assert field in body["message"], body["message"]
