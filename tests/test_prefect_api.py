"""One test per touch of private Prefect API (gpuops/common/prefect_api.py): each pins what
gpuops relies on, so that a Prefect upgrade that changes it fails here, by name."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.events import Event
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Completed, Failed

from gpuops.common.prefect_api import close_sync_client, open_sync_client, send_once, state_error
from gpuops.deployments.services import free_port, start_prefect_server

INCREMENT = "/v2/concurrency_limits/increment"


async def _answered(client, body: dict) -> httpx.Response:
    """send_once's answer that is not a 503: a SQLite server answers "database is locked"
    now and then under load, which is a real answer send_once must hand back as it is."""
    for _ in range(100):
        response = await send_once(client, "POST", INCREMENT, json=body)
        if response.status_code != 503:
            return response
        await asyncio.sleep(0.05)
    raise AssertionError("the Prefect server answered 503 a hundred times")


async def _new_rate_limit(client, slots: int = 1) -> str:
    name = f"test-prefect-api-{uuid.uuid4().hex[:8]}"
    await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(
        name=name, limit=slots, slot_decay_per_second=0.01))
    return name


def test_send_once_returns_the_servers_answer_without_retrying_it(prefect_server):
    """A full rate limit answers 423 with Retry-After: sent once, that answer comes back
    as it is (Prefect's own send would retry or raise)."""
    async def scenario() -> tuple[int, bool, int, str | None]:
        async with get_client() as client:
            name = await _new_rate_limit(client)
            body = {"names": [name], "slots": 1, "mode": "rate_limit"}
            taken = await _answered(client, body)
            full = await _answered(client, body)
            return (taken.status_code, bool(taken.json()), full.status_code,
                    full.headers.get("Retry-After"))
    status, granted, full_status, retry_after = asyncio.run(scenario())
    assert (status, granted) == (200, True)
    assert full_status == 423 and retry_after is not None


@pytest.mark.timeout(240)
def test_send_once_sends_the_csrf_header_a_protected_server_asks_for(tmp_path):
    server = start_prefect_server(tmp_path, port=free_port(), timeout_s=180, settings={
        "PREFECT_SERVER_CSRF_PROTECTION_ENABLED": "true"})
    try:
        async def scenario() -> tuple[int, int]:
            async with get_client() as client:
                name = await _new_rate_limit(client)
                body = {"names": [name], "slots": 1, "mode": "rate_limit"}
                sent = await _answered(client, body)
                bare = await _send_without_csrf(client, body)
                return sent.status_code, bare
        with temporary_settings(updates={PREFECT_API_URL: server.url}):
            sent, bare = asyncio.run(scenario())
    finally:
        server.stop()
    assert bare == 403  # the server does want the header...
    assert sent == 200  # ...and send_once sends it


async def _send_without_csrf(client, body: dict) -> int:
    async with httpx.AsyncClient(base_url=str(client.api_url)) as plain:
        return (await plain.post(INCREMENT, json=body)).status_code


def test_state_error_reads_a_failed_states_exception_from_inside_an_event_loop():
    error = ValueError("the task's own error")

    async def in_a_retry_condition() -> tuple[object, object]:
        return state_error(Failed(data=error)), state_error(Completed(data=42))
    failed, completed = asyncio.run(in_a_retry_condition())
    assert failed is error and completed == 42


def test_a_sync_client_opened_by_hand_delivers_events_until_closed(prefect_server):
    client = open_sync_client()
    event = Event(id=uuid.uuid4(), occurred=datetime.now(UTC), event="gpuops.test.delivered",
                  resource={"prefect.resource.id": "k8s.test.pod.default.prefect-api"})
    response = client.request("POST", "/events", json=[event.model_dump(mode="json")])
    assert 200 <= response.status_code < 300
    close_sync_client(client)
    close_sync_client(client)  # a second close (a connection already gone) is harmless
    with pytest.raises(RuntimeError):
        client.request("POST", "/events", json=[])
