"""The Slack receiver's door: what it answers before any approval logic runs (signature,
malformed interactions), and its refusal to start without a signing secret. The real
receiver over HTTP, with the Slack fake as its Web API; `gpuops sensor slack` as a process."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from gpuops.blocks.connections import SlackConnection
from gpuops.common.errors import ConfigError
from gpuops.common.settings import SlackSettings, get_settings
from gpuops.deployments.services import free_port
from gpuops.sensors.slack_interaction import MalformedInteraction, parse_click_payload
from gpuops.sensors.slack_receiver import build_receiver, serve_http
from gpuops.tasks.approvals.block_kit import button_value, parse_button_value

pytestmark = pytest.mark.timeout(120)

SECRET = "door-test-secret"
FORM = "application/x-www-form-urlencoded"
VALUE = button_value(str(uuid.uuid4()), "approval")


def click_payload(**changes: object) -> dict:
    payload: dict = {"type": "block_actions", "user": {"id": "UALICE"},
                     "channel": {"id": "C0OPS"}, "message": {"ts": "1700000000.000100"},
                     "actions": [{"action_id": "gpuops_approve", "type": "button",
                                  "value": VALUE}]}
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not None}


def as_form(payload: object) -> bytes:
    return ("payload=" + urllib.parse.quote(json.dumps(payload))).encode()


MALFORMED = {
    "a JSON body": (b'{"type": "block_actions"}', "application/json"),
    "plain text": (b"approve please", "text/plain"),
    "not UTF-8": (b"payload=\xff\xfe", FORM),
    "a form without payload": (b"action=approve", FORM),
    "an empty form": (b"", FORM),
    "a payload that is not JSON": (b"payload=%7Bnot-json", FORM),
    "a payload that is a JSON list": (as_form([1, 2]), FORM),
    "another interaction type": (as_form(click_payload(type="view_submission")), FORM),
    "no user": (as_form(click_payload(user=None)), FORM),
    "no channel": (as_form(click_payload(channel=None)), FORM),
    "no message": (as_form(click_payload(message=None)), FORM),
    "no actions": (as_form(click_payload(actions=None)), FORM),
    "actions that are not a list": (as_form(click_payload(actions="approve")), FORM),
    "two actions": (as_form(click_payload(actions=[click_payload()["actions"][0]] * 2)), FORM),
    "an unknown action": (as_form(click_payload(actions=[
        {"action_id": "delete_everything", "type": "button", "value": VALUE}])), FORM),
    "a select, not a button": (as_form(click_payload(actions=[
        {"action_id": "gpuops_approve", "type": "static_select", "value": VALUE}])), FORM),
    "a button value that is not JSON": (as_form(click_payload(actions=[
        {"action_id": "gpuops_approve", "type": "button", "value": "run-42"}])), FORM),
    "a button value without a run id": (as_form(click_payload(actions=[
        {"action_id": "gpuops_approve", "type": "button", "value": '{"key":"approval"}'}])),
        FORM),
    "a button value whose key is not an approval key": (as_form(click_payload(actions=[
        {"action_id": "gpuops_approve", "type": "button",
         "value": button_value(str(uuid.uuid4()), "../../etc")}])), FORM),
}


@pytest.fixture
def door(slack_fake) -> Iterator[str]:
    conn = SlackConnection(bot_token="xoxb-test", signing_secret=SECRET,
                           base_url=slack_fake.base_url)
    port = free_port()
    runner = slack_fake.loop.run(serve_http(build_receiver(conn), "127.0.0.1", port))
    slack_fake.loop.on_stop(runner.cleanup)
    yield f"http://127.0.0.1:{port}/slack/events"


def post(url: str, body: bytes, content_type: str, *, secret: str | None = SECRET,
         timestamp: str | None = None) -> tuple[int, str]:
    ts = timestamp or str(int(time.time()))
    headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": ts}
    if secret is not None:
        headers["X-Slack-Signature"] = "v0=" + hmac.new(
            secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_signed_malformed_interaction_gets_400_with_one_log_line_and_no_traceback(
        door, case, caplog):
    body, content_type = MALFORMED[case]
    with caplog.at_level(logging.INFO):
        status, text = post(door, body, content_type)
    assert status == 400, text
    ours = [r for r in caplog.records if r.name == "gpuops.sensors.slack"]
    assert len(ours) == 1 and "malformed" in ours[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize("case", ["a payload that is not JSON", "no user", "not UTF-8"])
def test_an_unsigned_or_forged_malformed_interaction_stays_401(door, case):
    body, content_type = MALFORMED[case]
    assert post(door, body, content_type, secret=None)[0] == 401
    assert post(door, body, content_type, secret="forged")[0] == 401
    assert post(door, body, content_type, timestamp="soon")[0] == 401


def test_button_values_keep_their_shape_and_may_gain_fields():
    run_id = uuid.uuid4()
    assert json.loads(button_value(str(run_id), "approval")) == {
        "flow_run_id": str(run_id), "key": "approval"}
    extended = json.dumps({"flow_run_id": str(run_id), "key": "drain-1", "plan": "v2"})
    assert parse_button_value(extended) == (run_id, "drain-1")
    click = parse_click_payload(click_payload())
    assert (click.user, click.channel, click.message_ts, click.approved) == (
        "UALICE", "C0OPS", "1700000000.000100", True)
    with pytest.raises(MalformedInteraction, match="user.id"):
        parse_click_payload(click_payload(user={"name": "alice"}))


def test_there_is_no_default_signing_secret(monkeypatch):
    monkeypatch.delenv("GPUOPS_SLACK_SIGNING_SECRET", raising=False)
    assert get_settings(SlackSettings).signing_secret is None
    assert SlackConnection.from_settings().signing_secret is None


def test_the_receiver_cannot_be_built_without_a_signing_secret():
    with pytest.raises(ConfigError, match="GPUOPS_SLACK_SIGNING_SECRET.*Signing Secret"):
        build_receiver(SlackConnection(bot_token="xoxb-1-real"))
    fake = SlackConnection(bot_token="xoxb-1", base_url="http://127.0.0.1:9/api/")
    with pytest.raises(ConfigError, match="GPUOPS_SLACK_SIGNING_SECRET.*gpuops up"):
        build_receiver(fake)


def test_only_a_base_url_on_this_machine_means_the_local_slack_fake():
    def local(url: str | None) -> bool:
        return SlackConnection(bot_token="xoxb-1", base_url=url).uses_local_fake
    assert local("http://127.0.0.1:8765/api/") and local("http://localhost:1/api/")
    assert local("http://[::1]:8765/api/")
    assert not local(None) and not local("https://slack.com/api/")
    assert not local("http://127.0.0.1.example.com/api/")


def test_gpuops_sensor_slack_refuses_to_start_against_slack_without_a_signing_secret(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_SLACK_")}
    env["GPUOPS_SLACK_BOT_TOKEN"] = "xoxb-123-not-the-fake"
    proc = subprocess.Popen([sys.executable, "-m", "gpuops.deployments.cli", "sensor", "slack",
                             "--port", str(free_port())], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, out + err
    assert "GPUOPS_SLACK_SIGNING_SECRET" in err and "Signing Secret" in err
    assert "Traceback" not in err and "listening" not in out
    assert "xoxb-123-not-the-fake" not in out + err
