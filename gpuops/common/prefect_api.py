"""The only module that touches Prefect's private API: each touch point is one function here,
pinned by one test in tests/test_prefect_api.py, so that a Prefect upgrade that breaks one
fails there, loudly, instead of somewhere on a hot path. Ruff's private-member rule (SLF001)
keeps every other module off private names.

Why each is needed:
- `send_once`: Prefect's HTTP client retries a 503 itself, sleeping 2, 4, 8, 16 s before it
  returns; on a busy SQLite server (the dev default) that was most of a Slack message's
  latency in a restart storm (tasks/restarts/slack_limits.py retries a 503 within 0.3 s
  instead). So the request goes out through httpx's own `send` on Prefect's connection,
  with the CSRF headers Prefect's `send` would have added when the server wants them.
- `state_error`: a task's `retry_condition_fn` is called synchronously, also for async
  tasks, where `State.result()` dispatches to its coroutine; `_sync=True` asks for the
  synchronous one.
- `open_sync_client`: a watcher thread keeps one synchronous client (one connection) open
  across its sends; Prefect offers it only as a context manager, so it is entered here by
  hand and left by `close_sync_client`.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import httpx
from prefect.client.base import PrefectHttpxAsyncClient
from prefect.client.orchestration import PrefectClient, SyncPrefectClient, get_client
from prefect.client.schemas.objects import State

_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def send_once(client: PrefectClient, method: str, path: str, *,
                    json: Any = None) -> httpx.Response:
    """One request to the Prefect API, answered as the server answered it: no client-side
    retry of a 503 or 429, no exception for an error status. A dropped connection raises
    httpx's `TransportError`.

    A change sent to a server with CSRF protection carries the client's CSRF token: the
    token it holds already, or, when the server refuses the request for want of one (403
    "Missing CSRF token." / "Invalid CSRF token ..."), one fetched then and sent once more.
    A server without protection costs no token request."""
    http = cast(PrefectHttpxAsyncClient, client._client)
    request = http.build_request(method, path, json=json)
    change = method.upper() in _CHANGES and http.enable_csrf_support
    if change and http.csrf_token is not None:
        await http._add_csrf_headers(request)  # (a new token only if this one expired)
    response = await httpx.AsyncClient.send(http, request)
    if change and response.status_code == 403 and "CSRF token" in response.text:
        http.csrf_token = None
        await http._add_csrf_headers(request)
        response = await httpx.AsyncClient.send(http, request)
    return response


def state_error(state: State) -> Any:
    """A finished state's result without raising: its exception when it failed. Safe to
    call from synchronous code running inside an event loop (a retry condition)."""
    return state.result(raise_on_failure=False, _sync=True)  # type: ignore[call-overload]


def open_sync_client() -> SyncPrefectClient:
    """A synchronous client, open until `close_sync_client`."""
    return get_client(sync_client=True).__enter__()


def close_sync_client(client: SyncPrefectClient) -> None:
    """Close a client from `open_sync_client`; errors on the way out are ignored (its
    connection may already be gone: that is why it is being closed)."""
    with contextlib.suppress(Exception):
        client.__exit__(None, None, None)
