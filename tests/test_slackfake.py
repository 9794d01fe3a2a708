"""The Slack fake speaks the Web API as slack_sdk expects it, over real HTTP."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from gpuops.blocks.connections import SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.deployments.services import free_port, start_slack_fake_server
from gpuops.deployments.slackfake import start_slack_fake
from gpuops.deployments.slackfake_mrkdwn import mrkdwn_to_html
from gpuops.sensors.slack_receiver import build_receiver, serve_http
from gpuops.tasks.approvals.block_kit import ApprovalRequest, request_blocks
from tests.helpers import wait_for
from tests.servers import LoopThread

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


# --- the page: channels, threads and messages as a person reads them --------------------------

LOCAL_USER = "U0LOCALOPS"
PAGE_SECRET = "page-test-signing-secret-9f3c"


class PageFake:
    """A Slack fake with its page, on a background loop; optionally sending clicks to a
    receiver that the test serves on the same loop."""

    def __init__(self, loop: LoopThread, **config: Any) -> None:
        runner, self.base_url = loop.run(start_slack_fake("127.0.0.1", 0, **config))
        loop.on_stop(runner.cleanup)
        self.root = self.base_url.removesuffix("/api/")
        self.client = WebClient(token="xoxb-test", base_url=self.base_url)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with _direct.open(f"{self.root}{path}", timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def page(self, path: str) -> str:
        status, body = self.get(path)
        assert status == 200, (path, status, body)
        return body

    def click(self, message: dict, action_id: str) -> tuple[int, dict]:
        """What the page's script does when a button is pressed."""
        data = urllib.parse.urlencode({"channel": message["channel"], "ts": message["ts"],
                                       "action_id": action_id}).encode()
        request = urllib.request.Request(f"{self.root}/_fake/interact", data=data,
                                         headers={"Accept": "application/json"})
        try:
            with _direct.open(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def messages(self) -> list[dict]:
        return json.loads(self.get("/_fake/messages")[1])["messages"]


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.fixture
def page_fake(loop: LoopThread) -> PageFake:
    """A fake with no receiver: its buttons are disabled."""
    return PageFake(loop)


class Markup(HTMLParser):
    """The tags, attributes and visible text of a page, as a browser parses it."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._hidden = 0
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._hidden += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("script", "style")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.text.append(data)

    def visible(self) -> str:
        return " ".join(" ".join(self.text).split())

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag
                and all(a.get(k.rstrip("_")) == v for k, v in attrs.items())]


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _buttons(value: str = "v1") -> dict:
    return {"type": "actions", "block_id": "choose", "elements": [
        {"type": "button", "action_id": "do_it", "style": "primary", "value": value,
         "text": {"type": "plain_text", "text": "Do it"},
         "confirm": {"title": {"type": "plain_text", "text": "Really?"},
                     "text": {"type": "mrkdwn", "text": "It cordons gpu-1"},
                     "confirm": {"type": "plain_text", "text": "Yes"},
                     "deny": {"type": "plain_text", "text": "No"}}},
        {"type": "button", "action_id": "skip", "value": value,
         "text": {"type": "plain_text", "text": "Skip"}}]}


def test_the_page_lists_each_channel_with_its_message_count(page_fake: PageFake) -> None:
    parent = page_fake.client.chat_postMessage(channel="#ops", text="one")
    page_fake.client.chat_postMessage(channel="ops", text="two", thread_ts=parent["ts"])
    page_fake.client.chat_postMessage(channel="#gpuops", text="three",
                                      blocks=[_section("x"), _buttons()])
    page_fake.client.chat_postEphemeral(channel="#gpuops", user="U7", text="not counted")

    page = Markup(page_fake.page("/"))

    rows = [r for r in page.visible().split("# ")[1:]]
    assert any(r.startswith("gpuops 1 0 1") for r in rows), page.visible()
    assert any(r.startswith("ops 2 1 0") for r in rows), page.visible()  # #ops and ops: one
    assert page.find("a", href="/channels/ops") and page.find("a", href="/channels/gpuops")


def test_a_channel_shows_its_messages_in_order_with_replies_under_their_parent(
        page_fake: PageFake) -> None:
    first = page_fake.client.chat_postMessage(channel="#ops", text="first workload restarted")
    second = page_fake.client.chat_postMessage(channel="#ops", text="second workload restarted")
    page_fake.client.chat_postMessage(channel="#ops", text="reply to the first",
                                      thread_ts=first["ts"])

    page = page_fake.page("/channels/ops")

    order = [page.index(t) for t in ("first workload", "reply to the first", "second workload")]
    assert order == sorted(order)
    thread = page[page.index('<details class="thread"'):page.index("</details>")]
    assert "reply to the first" in thread and "1 reply" in thread
    assert "second workload" not in thread
    assert f'id="m-{second["ts"].replace(".", "-")}"' in page  # each message can be linked


def test_block_kit_renders_as_slack_shows_it(page_fake: PageFake) -> None:
    page_fake.client.chat_postMessage(channel="#ops", text="fallback, not shown", blocks=[
        {"type": "header", "text": {"type": "plain_text", "text": "Restart #3: llama"}},
        _section("*OOMKilled* in _vllm_, exit `137`:\n```CUDA error: out of memory\n"
                 "at step 12```\nsee <https://example.com/runs/7|the run> for "
                 "<@UALICE> &amp; <!here>; x &lt; y"),
        {"type": "section", "fields": [{"type": "mrkdwn", "text": "*Node*\ngpu-3"},
                                       {"type": "plain_text", "text": "Pool h100"}]},
        {"type": "divider"},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "Waits *60 min*"}]},
        _buttons()])

    page = page_fake.page("/channels/ops")
    markup = Markup(page)

    assert "Restart #3: llama" in page and "fallback, not shown" not in page
    assert "<b>OOMKilled</b>" in page and "<i>vllm</i>" in page and "<code>137</code>" in page
    assert "<pre>CUDA error: out of memory\nat step 12</pre>" in page
    assert markup.find("a", href="https://example.com/runs/7")
    assert '<span class="mention">@UALICE</span>' in page and "@here" in page
    assert "&amp; " in page and "x &lt; y" in page  # Slack's entities read as characters
    assert '<div class="fields"><div><b>Node</b><br>gpu-3</div><div>Pool h100</div>' in page
    assert "<hr>" in page and '<div class="b-context"><span>Waits <b>60 min</b>' in page
    buttons = markup.find("button")
    assert [b["value"] for b in buttons] == ["do_it", "skip"]
    assert buttons[0]["data-confirm"] == "Really?\n\nIt cordons gpu-1"


def test_a_message_without_blocks_shows_its_text_as_mrkdwn(page_fake: PageFake) -> None:
    page_fake.client.chat_postMessage(channel="#ops", text="*plain* message")

    assert "<b>plain</b> message" in page_fake.page("/channels/ops")


def test_an_edited_message_shows_its_latest_version_marked_edited(page_fake: PageFake) -> None:
    posted = page_fake.client.chat_postMessage(channel="#ops", text="awaiting approval")
    page_fake.client.chat_update(channel="#ops", ts=posted["ts"], text="approved by me")

    page = page_fake.page("/channels/ops")

    assert "approved by me" in page and "awaiting approval" not in page
    assert "(edited)" in page


def test_ephemeral_messages_are_marked_with_whom_they_are_for(page_fake: PageFake) -> None:
    page_fake.client.chat_postEphemeral(channel="#ops", user=LOCAL_USER, text="for me")
    page_fake.client.chat_postEphemeral(channel="#ops", user="UOTHER", text="for another")

    visible = Markup(page_fake.page("/channels/ops")).visible()

    assert "Only visible to you for me" in visible
    assert "Only visible to @UOTHER for another" in visible


def test_uploaded_files_are_listed_with_their_content(page_fake: PageFake) -> None:
    parent = page_fake.client.chat_postMessage(channel="#ops", text="evidence")
    uploaded = page_fake.client.files_upload_v2(
        channel="#ops", thread_ts=parent["ts"], filename="prev.log", title="previous logs",
        content="CUDA error: out of memory <b>not bold</b>")

    page = page_fake.page("/channels/ops")
    link = f"/_fake/files/{uploaded['file']['id']}"

    assert Markup(page).find("a", href=link) and "previous logs" in page
    assert "CUDA error: out of memory &lt;b&gt;not bold&lt;/b&gt;" in page  # the preview
    assert page_fake.get(link) == (200, "CUDA error: out of memory <b>not bold</b>")


HOSTILE = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


def test_nothing_from_a_message_becomes_markup_on_the_page(page_fake: PageFake) -> None:
    channel = f"#evil{HOSTILE}"
    page_fake.client.chat_postMessage(channel=channel, text=HOSTILE)
    page_fake.client.chat_postMessage(channel=channel, text="x", blocks=[
        {"type": "header", "text": {"type": "plain_text", "text": HOSTILE}},
        _section(f"*{HOSTILE}* `{HOSTILE}` ```{HOSTILE}``` <javascript:alert(3)|click me> "
                 f"<https://ok.example/?q={HOSTILE}|{HOSTILE}> <@U1|{HOSTILE}>"),
        {"type": "section", "fields": [{"type": "plain_text", "text": HOSTILE}],
         "accessory": {"type": "button", "action_id": HOSTILE, "value": HOSTILE,
                       "url": "javascript:alert(4)", "text": {"type": "plain_text",
                                                               "text": HOSTILE}}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": HOSTILE}]},
        {"type": "actions", "elements": [{"type": "button", "action_id": HOSTILE,
                                          "value": HOSTILE, "style": HOSTILE,
                                          "text": {"type": "plain_text", "text": HOSTILE},
                                          "confirm": {"title": {"type": "plain_text",
                                                                "text": HOSTILE}}}]},
        {"type": HOSTILE}])
    page_fake.client.chat_postEphemeral(channel=channel, user=HOSTILE, text=HOSTILE)
    name = urllib.parse.quote(channel.lstrip("#"), safe="")

    for path in ("/", f"/channels/{name}"):
        markup = Markup(page_fake.page(path))

        scripts = [a for t, a in markup.tags if t == "script"]
        assert len(scripts) == 1 and scripts[0].get("nonce")  # only the page's own
        assert not markup.find("img")
        assert not [a for _, a in markup.tags if any(k.startswith("on") for k in a)]
        assert not [a for _, a in markup.tags
                    if any((v or "").lower().startswith("javascript:") for v in a.values())]
    assert HOSTILE in markup.visible()  # shown as text, not dropped


def test_without_a_receiver_the_buttons_are_disabled_and_say_why(page_fake: PageFake) -> None:
    posted = page_fake.client.chat_postMessage(channel="#ops", text="x",
                                               blocks=[_section("approve?"), _buttons()])

    page = page_fake.page("/channels/ops")
    markup = Markup(page)

    assert all("disabled" in b for b in markup.find("button"))
    assert "GPUOPS_SLACK_SIGNING_SECRET" in markup.visible()
    assert "GPUOPS_SLACK_INTERACTIONS_URL" in markup.visible()
    status, answer = page_fake.click({"channel": "#ops", "ts": posted["ts"]}, "do_it")
    assert status == 409 and "Buttons are disabled" in answer["summary"]


@dataclass
class BoltApp:
    """A Slack app on slack-bolt (its signature check, its payload parsing), recording clicks
    and answering each through its `response_url`, as apps often do."""

    url: str
    clicks: list[dict] = field(default_factory=list)


def _bolt_app(loop: LoopThread, fake_base_url: str, secret: str, port: int) -> BoltApp:
    app = AsyncApp(signing_secret=secret, process_before_response=False,
                   client=AsyncWebClient(token="xoxb-test", base_url=fake_base_url))
    served = BoltApp(f"http://127.0.0.1:{port}/slack/events")

    @app.action("do_it")
    async def on_click(ack: Any, body: dict, respond: Any) -> None:
        await ack()
        served.clicks.append(body)
        await respond(text=f"the app saw {body['actions'][0]['value']}")

    async def serve() -> web.AppRunner:
        runner = web.AppRunner(app.web_app(path="/slack/events"), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    loop.on_stop(loop.run(serve()).cleanup)
    return served


def _fake_with_bolt(loop: LoopThread, *, app_secret: str = PAGE_SECRET
                    ) -> tuple[PageFake, BoltApp]:
    port = free_port()
    fake = PageFake(loop, signing_secret=PAGE_SECRET, local_user=LOCAL_USER,
                    interactions_url=f"http://127.0.0.1:{port}/slack/events")
    return fake, _bolt_app(loop, fake.base_url, app_secret, port)


def test_a_click_reaches_a_bolt_app_signed_and_shaped_as_slack_sends_it(
        loop: LoopThread) -> None:
    fake, app = _fake_with_bolt(loop)
    posted = fake.client.chat_postMessage(channel="#ops", text="approve?",
                                          blocks=[_section("approve?"), _buttons("run-42")])
    message = next(m for m in fake.messages() if m["ts"] == posted["ts"])

    status, answer = fake.click(message, "do_it")

    assert status == 200 and answer["status"] == 200, answer
    assert answer["summary"] == f"Do it sent as @{LOCAL_USER}: the receiver answered HTTP 200"
    click = wait_for(lambda: app.clicks and app.clicks[0], message="Bolt to run the handler")
    assert click["type"] == "block_actions"
    assert click["user"]["id"] == LOCAL_USER and click["user"]["team_id"] == "T0GPUOPS"
    assert click["user"]["username"]
    assert click["team"]["id"] == "T0GPUOPS" and click["api_app_id"]
    assert click["container"] == {"type": "message", "message_ts": posted["ts"],
                                  "channel_id": "#ops", "is_ephemeral": False}
    assert click["channel"] == {"id": "#ops", "name": "ops"}
    assert click["message"]["ts"] == posted["ts"] and click["message"]["text"] == "approve?"
    assert [b["block_id"] for b in click["message"]["blocks"]][1] == "choose"
    assert all(b["block_id"] for b in click["message"]["blocks"])  # Slack names every block
    [action] = click["actions"]
    assert action["action_id"] == "do_it" and action["block_id"] == "choose"
    assert action["type"] == "button" and action["value"] == "run-42"
    assert float(action["action_ts"]) > 0 and click["trigger_id"]
    assert click["response_url"].startswith(fake.root + "/_fake/respond/")
    # The app's answer through response_url is an ephemeral reply to the clicker.
    reply = wait_for(lambda: next((m for m in fake.messages()
                                   if m["text"] == "the app saw run-42"), None),
                     message="the app's response_url reply")
    assert reply["ephemeral_to"] == LOCAL_USER
    visible = Markup(fake.page("/channels/ops")).visible()
    assert "Only visible to you the app saw run-42" in visible
    assert f"{LOCAL_USER} clicked Do it — the receiver answered HTTP 200" in visible


def test_a_click_the_receiver_refuses_is_reported_on_the_page(loop: LoopThread) -> None:
    fake, app = _fake_with_bolt(loop, app_secret="another-secret")
    posted = fake.client.chat_postMessage(channel="#ops", text="x", blocks=[_buttons()])

    status, answer = fake.click({"channel": "#ops", "ts": posted["ts"]}, "do_it")

    assert status == 200 and answer["status"] == 401  # Bolt: the signature does not match
    assert "receiver answered HTTP 401" in Markup(fake.page("/channels/ops")).visible()
    assert app.clicks == []


def test_an_unreachable_receiver_is_reported_on_the_page(loop: LoopThread) -> None:
    url = f"http://127.0.0.1:{free_port()}/slack/events"  # nothing listens there
    fake = PageFake(loop, signing_secret=PAGE_SECRET, interactions_url=url)
    posted = fake.client.chat_postMessage(channel="#ops", text="x", blocks=[_buttons()])

    status, answer = fake.click({"channel": "#ops", "ts": posted["ts"]}, "do_it")

    assert status == 200 and answer["status"] is None
    assert f"could not reach the receiver at {url}" in answer["summary"]
    assert f"could not reach the receiver at {url}" in fake.page("/channels/ops")


def test_a_button_no_longer_in_the_message_cannot_be_clicked(loop: LoopThread) -> None:
    fake, app = _fake_with_bolt(loop)
    posted = fake.client.chat_postMessage(channel="#ops", text="x", blocks=[_buttons()])
    fake.client.chat_update(channel="#ops", ts=posted["ts"], text="answered",
                            blocks=[_section("answered")])

    status, answer = fake.click({"channel": "#ops", "ts": posted["ts"]}, "do_it")

    assert status == 409 and "no 'do_it' button any more" in answer["summary"]
    assert fake.click({"channel": "#ops", "ts": "1.000001"}, "do_it")[0] == 404
    assert app.clicks == []


def test_a_form_post_without_script_redirects_back_to_the_message(loop: LoopThread) -> None:
    fake, app = _fake_with_bolt(loop)
    posted = fake.client.chat_postMessage(channel="#ops", text="x", blocks=[_buttons()])
    data = urllib.parse.urlencode({"channel": "#ops", "ts": posted["ts"],
                                   "action_id": "do_it"}).encode()

    with _direct.open(urllib.request.Request(f"{fake.root}/_fake/interact", data=data),
                      timeout=30) as response:
        landed = response.url

    assert landed == f"{fake.root}/channels/ops#m-{posted['ts'].replace('.', '-')}"
    wait_for(lambda: app.clicks, message="the click to reach the app")


def test_the_signing_secret_never_appears_in_pages_answers_or_logs(tmp_path: Path) -> None:
    port, receiver_port = free_port(), free_port()
    log_path = tmp_path / "slackfake.log"
    secret = "s3cret-that-must-not-leak-7d1e"
    env = {**os.environ, "GPUOPS_SLACK_SIGNING_SECRET": secret,
           "GPUOPS_SLACK_INTERACTIONS_URL": f"http://127.0.0.1:{receiver_port}/slack/events"}
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gpuops.deployments.slackfake", "--port", str(port),
             "--local-user", "U0SOMEONE"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        fake = SimpleNamespace(root=f"http://127.0.0.1:{port}")
        wait_for(lambda: "slack page at" in log_path.read_text(), timeout=30,
                 message="the fake to start")
        client = WebClient(token="xoxb-test", base_url=f"{fake.root}/api/")
        posted = client.chat_postMessage(channel="#ops", text="x", blocks=[_buttons()])
        seen = [PageFake.click(fake, {"channel": "#ops", "ts": posted["ts"]}, "do_it")[1]]
        for path in ("/", "/channels/ops", "/_fake/messages", "/_fake/calls",
                     "/_fake/interactions", "/_fake/revision"):
            seen.append(PageFake.get(fake, path))
    finally:
        process.terminate()
        process.wait(10)

    page = seen[2][1]
    assert "as <b>@U0SOMEONE</b>" in page  # the flag and the environment both took effect
    assert f"127.0.0.1:{receiver_port}/slack/events" in page
    assert "could not reach the receiver" in json.dumps(seen[0])
    everything = json.dumps(seen) + log_path.read_text()
    assert secret not in everything


def test_the_real_receiver_answers_a_click_from_someone_it_refuses_with_an_ephemeral(
        prefect_server: str, loop: LoopThread) -> None:
    port = free_port()
    fake = PageFake(loop, signing_secret=PAGE_SECRET, local_user=LOCAL_USER,
                    interactions_url=f"http://127.0.0.1:{port}/slack/events")
    conn = SlackConnection(bot_token="xoxb-test", signing_secret=PAGE_SECRET,
                           base_url=fake.base_url)
    receiver = real_receiver(conn, ApprovalPolicy(approvers=["UALICE"]))
    loop.on_stop(loop.run(serve_http(receiver, "127.0.0.1", port)).cleanup)
    blocks = request_blocks(ApprovalRequest(title="Drain node gpu-1", summary="cordon gpu-1",
                                            reason="Xid 79"),
                            flow_run_id=str(uuid.uuid4()), key="approval-1", run_url=None,
                            timeout_s=600)
    posted = fake.client.chat_postMessage(channel="#ops", text="Approval needed", blocks=blocks)

    status, answer = fake.click({"channel": "#ops", "ts": posted["ts"]}, "gpuops_approve")

    assert (status, answer["status"]) == (200, 200), answer
    refusal = wait_for(lambda: next((m for m in fake.messages()
                                     if m["ephemeral_to"] == LOCAL_USER), None),
                       timeout=30, message="the receiver's ephemeral refusal")
    assert "nothing was done" in refusal["text"]
    visible = Markup(fake.page("/channels/ops")).visible()
    assert f"Only visible to you {refusal['text']}" in visible
    assert Markup(fake.page("/channels/ops")).find("button", value="gpuops_approve")


def real_receiver(conn: SlackConnection, policy: ApprovalPolicy) -> Any:
    """gpuops' receiver, whichever way it is built while its approver checks move from the
    receiver's policy to the request's record (then the policy argument is gone)."""
    if "policy" in inspect.signature(build_receiver).parameters:
        return build_receiver(conn, policy)  # type: ignore[call-arg]
    return build_receiver(conn)


@pytest.mark.parametrize(("mrkdwn", "html"), [
    ("snake_case_names stay plain", "snake_case_names stay plain"),
    ("2*3*4 is arithmetic", "2*3*4 is arithmetic"),
    ("*bold _and italic_* ~gone~", "<b>bold <i>and italic</i></b> <s>gone</s>"),
    ("*<@U1>* approved", '<b><span class="mention">@U1</span></b> approved'),
    ("&amp;lt; is how Slack writes &lt;", "&amp;lt; is how Slack writes &lt;"),
    ("`*not bold*` and ```_not italic_```", "<code>*not bold*</code> and <pre>_not italic_</pre>"),
    ("<javascript:alert(1)|click>", "click"),
    ("<!subteam^S123|@ops> and <#C1|ops>",
     '<span class="mention">@ops</span> and <span class="mention">#ops</span>'),
])
def test_mrkdwn_reads_as_slack_shows_it(mrkdwn: str, html: str) -> None:
    assert mrkdwn_to_html(mrkdwn) == html
