"""Slack's answers reach gpuops as gpuops errors, like Kubernetes' and AWS's: callers catch
a kind (a thread that is gone, trouble worth retrying), never an error string. Over the
local Slack fake's HTTP API."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError

from gpuops.blocks.connections import SlackConnection
from gpuops.common.errors import (
    PermanentError,
    SlackArchived,
    SlackNotFound,
    SlackRefused,
    SlackUnavailable,
    TemporaryError,
)
from gpuops.tasks.clients import slack


@pytest.fixture
def conn(slack_fake) -> SlackConnection:
    return SlackConnection(bot_token="xoxb-test-token", base_url=slack_fake.base_url)


def test_a_message_that_is_gone_is_not_found_and_keeps_slacks_answer(conn):
    with pytest.raises(SlackNotFound) as error:
        slack.update_message(conn, slack.PostedMessage("C1", "1.000001"), "x", [])
    assert error.value.code == "message_not_found" and error.value.method == "chat.update"
    assert isinstance(error.value, PermanentError)
    assert isinstance(error.value.__cause__, SlackApiError)


@pytest.mark.parametrize(("answer", "kind", "temporary"), [
    ("is_archived", SlackArchived, False),
    ("channel_not_found", SlackNotFound, False),
    ("invalid_blocks", SlackRefused, False),
    ("internal_error", SlackUnavailable, True),
    ("service_unavailable", SlackUnavailable, True),
])
def test_each_slack_answer_maps_to_one_kind(slack_fake, conn, answer, kind, temporary):
    slack_fake.post("/_fake/fail", {"method": "chat.postMessage", "error": answer})
    with pytest.raises(kind) as error:
        slack.post_message(conn, "#ops", "hi", [])
    assert error.value.code == answer
    assert isinstance(error.value, TemporaryError) is temporary
