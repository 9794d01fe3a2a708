"""The record of an approval request, kept on the Prefect server as a flow run input
(`gpuops-approval-<key>`), so that every process can read it: the run itself after a
suspension, the Slack receiver when someone clicks, the approval sweeper.

A run writes it right after posting the request and before it waits; a click that finds no
record is refused. Each attempt of a run writes its own: a flow retry replaces the earlier
attempt's record.
"""

from __future__ import annotations

from uuid import UUID

from prefect.exceptions import PrefectHTTPStatusError
from prefect.input.actions import (
    acreate_flow_run_input,
    adelete_flow_run_input,
    aread_flow_run_input,
)

from gpuops.tasks.approvals.block_kit import AskedApproval

ASKED_INPUT_PREFIX = "gpuops-approval-"


def asked_input_key(key: str) -> str:
    return f"{ASKED_INPUT_PREFIX}{key}"


async def read_asked_approval(flow_run_id: UUID, key: str) -> AskedApproval | None:
    """The record of approval `key` of a flow run; None when there is none. An unreadable
    record raises `KeyError`, `TypeError` or `ValueError` naming what is wrong."""
    data = await aread_flow_run_input(asked_input_key(key), flow_run_id=flow_run_id)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError(f"approval record {asked_input_key(key)!r} is not a JSON object")
    return AskedApproval.from_json(data)


async def keep_asked_approval(flow_run_id: UUID, key: str, asked: AskedApproval) -> None:
    """Write the record; an earlier attempt's record (the flow was retried) is replaced."""
    try:
        await acreate_flow_run_input(asked_input_key(key), asked.to_json(),
                                     flow_run_id=flow_run_id)
    except PrefectHTTPStatusError as e:
        if e.response.status_code != 409:
            raise
        await adelete_flow_run_input(asked_input_key(key), flow_run_id=flow_run_id)
        await acreate_flow_run_input(asked_input_key(key), asked.to_json(),
                                     flow_run_id=flow_run_id)
