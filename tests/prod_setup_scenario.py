"""Run inside a process pointed (PREFECT_API_URL) at a Prefect server on PostgreSQL + Redis:
an approval-gated drain, resumed as the Prefect UI does, then read its audit events back.
Prints one JSON line with what happened (used by tests/test_production_setup.py)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid

from prefect.client.orchestration import get_client
from prefect.events.filters import EventFilter, EventNameFilter
from prefect.flow_runs import resume_flow_run

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.flows.drain_node import drain_node


def main() -> None:
    suffix = uuid.uuid4().hex[:6]

    async def save() -> dict[str, str]:
        names = {"cluster_block": f"c-{suffix}", "slack_block": f"s-{suffix}",
                 "policy_block": f"p-{suffix}"}
        await KubernetesCluster(cluster_name="pg", kubeconfig_path=os.environ["KUBECONFIG"]
                                ).save(names["cluster_block"])
        await SlackConnection(bot_token="xoxb-x", signing_secret="s",
                              base_url=os.environ["GPUOPS_SLACK_BASE_URL"]
                              ).save(names["slack_block"])
        await ApprovalPolicy(timeout_s=120, poll_interval_s=1).save(names["policy_block"])
        return names

    blocks = asyncio.run(save())
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(
        state=asyncio.run(drain_node(node="gpu-1", return_state=True, **blocks))))
    runner.start()

    async def paused_run() -> str | None:
        async with get_client() as client:
            for run in await client.read_flow_runs(limit=20):
                if run.state and run.state.is_paused():
                    return str(run.id)
        return None

    deadline = time.monotonic() + 90
    run_id = None
    while run_id is None and time.monotonic() < deadline:
        run_id = asyncio.run(paused_run())
        time.sleep(0.5)
    if run_id:
        resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "ops"})
    runner.join(120)

    async def audit() -> list[str]:
        async with get_client() as client:
            page = await client.read_events(filter=EventFilter(
                event=EventNameFilter(prefix=["gpuops."])), limit=50)
            return sorted({e.event for e in page.events})

    events: list[str] = []
    for _ in range(40):
        events = asyncio.run(audit())
        if "gpuops.action.cordon" in events:
            break
        time.sleep(0.5)
    state = result.get("state")
    print(json.dumps({"paused": run_id is not None, "state": state.name if state else None,
                      "events": events}))


if __name__ == "__main__":
    main()
