"""The Slack fake speaks the Web API as slack_sdk expects it, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from gpuops.deployments.services import start_slack_fake_server
from gpuops.deployments.slackfake import start_slack_fake

_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def fake_url() -> Iterator[str]:
    """The fake served from a background event loop, so slack_sdk's sync client can call it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner, url = asyncio.run_coroutine_threadsafe(start_slack_fake(), loop).result(10)
    yield url
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _admin(fake_url: str, path: str, body: dict | None = None) -> dict:
    origin = fake_url.removesuffix("/api/")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{origin}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    with _direct.open(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def client(fake_url: str) -> WebClient:
    _admin(fake_url, "/_fake/reset", {})
    return WebClient(token="xoxb-test", base_url=fake_url)


def test_post_message_returns_channel_and_increasing_ts(client: WebClient) -> None:
    first = client.chat_postMessage(channel="C1", text="pod restarted")
    second = client.chat_postMessage(channel="C1", text="again")

    assert first["ok"] and first["channel"] == "C1"
    assert first["message"]["text"] == "pod restarted"
    assert float(second["ts"]) > float(first["ts"])
    assert len(first["ts"].split(".")[1]) == 6


def test_reply_in_thread_is_listed_by_conversations_replies(client: WebClient) -> None:
    parent = client.chat_postMessage(channel="C1", text="workload default/llama restarted")
    reply = client.chat_postMessage(channel="C1", text="OOMKilled", thread_ts=parent["ts"],
                                    blocks=[{"type": "section",
                                             "text": {"type": "mrkdwn", "text": "*OOM*"}}])

    thread = client.conversations_replies(channel="C1", ts=parent["ts"])

    assert [m["ts"] for m in thread["messages"]] == [parent["ts"], reply["ts"]]
    assert thread["messages"][0]["reply_count"] == 1
    assert thread["messages"][1]["thread_ts"] == parent["ts"]
    assert thread["messages"][1]["blocks"][0]["text"]["text"] == "*OOM*"
    history = client.conversations_history(channel="C1")
    assert [m["ts"] for m in history["messages"]] == [parent["ts"]]  # replies stay in the thread


def test_update_changes_text_and_keeps_history(client: WebClient, fake_url: str) -> None:
    posted = client.chat_postMessage(channel="C2", text="awaiting approval")

    updated = client.chat_update(channel="C2", ts=posted["ts"], text="approved by U1")

    assert updated["text"] == "approved by U1"
    recorded = _admin(fake_url, "/_fake/messages")["messages"]
    assert len(recorded) == 1
    assert recorded[0]["text"] == "approved by U1"
    assert [u["text"] for u in recorded[0]["updates"]] == ["awaiting approval"]


def test_update_of_unknown_message_is_an_api_error(client: WebClient) -> None:
    with pytest.raises(SlackApiError) as error:
        client.chat_update(channel="C2", ts="1.000001", text="x")
    assert error.value.response["error"] == "message_not_found"


def test_calls_without_token_are_not_authed(fake_url: str) -> None:
    with pytest.raises(SlackApiError) as error:
        WebClient(base_url=fake_url).chat_postMessage(channel="C1", text="hi")
    assert error.value.response["error"] == "not_authed"


def test_ratelimit_answers_429_with_retry_after(client: WebClient, fake_url: str) -> None:
    _admin(fake_url, "/_fake/ratelimit",
           {"method": "chat.postMessage", "count": 1, "retry_after": 7})

    with pytest.raises(SlackApiError) as error:
        client.chat_postMessage(channel="C1", text="hi")

    assert error.value.response.status_code == 429
    assert error.value.response["error"] == "ratelimited"
    assert error.value.response.headers["Retry-After"] in ("7", ["7"])


def test_rate_limited_post_succeeds_after_the_retry_handler_waits(fake_url: str) -> None:
    _admin(fake_url, "/_fake/reset", {})
    _admin(fake_url, "/_fake/ratelimit",
           {"method": "chat.postMessage", "count": 1, "retry_after": 1})
    client = WebClient(token="xoxb-test", base_url=fake_url,
                       retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=2)])

    started = time.monotonic()
    response = client.chat_postMessage(channel="C1", text="after a pause")

    assert response["ok"]
    assert time.monotonic() - started >= 1.0  # Retry-After was honoured
    calls = _admin(fake_url, "/_fake/calls?method=chat.postMessage")["calls"]
    assert [c["status"] for c in calls] == [429, 200]
    assert len(_admin(fake_url, "/_fake/messages")["messages"]) == 1


def test_ephemeral_messages_stay_out_of_channel_history(client: WebClient, fake_url: str) -> None:
    client.chat_postEphemeral(channel="C3", user="U7", text="only you can see this")

    assert client.conversations_history(channel="C3")["messages"] == []
    recorded = _admin(fake_url, "/_fake/messages")["messages"]
    assert recorded[0]["ephemeral_to"] == "U7"


def test_permalink_points_at_the_message(client: WebClient) -> None:
    posted = client.chat_postMessage(channel="C4", text="x")

    link = client.chat_getPermalink(channel="C4", message_ts=posted["ts"])["permalink"]

    assert link.endswith(f"/archives/C4/p{posted['ts'].replace('.', '')}")


def test_file_upload_v2_posts_the_file_into_the_thread(client: WebClient, fake_url: str) -> None:
    parent = client.chat_postMessage(channel="C5", text="evidence")

    uploaded = client.files_upload_v2(channel="C5", thread_ts=parent["ts"], filename="prev.log",
                                      content="CUDA error: out of memory", title="previous logs")

    assert uploaded["file"]["title"] == "previous logs"
    reply = _admin(fake_url, "/_fake/messages")["messages"][-1]
    assert reply["thread_ts"] == parent["ts"]
    assert reply["files"][0]["content"] == "CUDA error: out of memory"


def test_users_and_usergroups(client: WebClient, fake_url: str) -> None:
    _admin(fake_url, "/_fake/usergroups", {"usergroup": "S1", "users": ["U1", "U2"]})

    assert client.usergroups_users_list(usergroup="S1")["users"] == ["U1", "U2"]
    assert client.users_info(user="U1")["user"]["id"] == "U1"
    assert client.auth_test()["user_id"]
    with pytest.raises(SlackApiError):
        client.usergroups_users_list(usergroup="S404")


def test_subprocess_entrypoint_serves_the_same_api(tmp_path: Path) -> None:
    service = start_slack_fake_server(tmp_path)
    try:
        posted = WebClient(token="t", base_url=service.url).chat_postMessage(channel="C", text="x")
        assert posted["ok"]
    finally:
        service.stop()
    assert not service.is_running()
    assert (tmp_path / "logs" / "slackfake.log").exists()
