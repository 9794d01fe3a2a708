"""The pool-resizing runbook against simcluster's node pools backed by moto: EKS node groups
sized by minSize, an Auto Scaling group by its desired capacity, the group's own bounds
checked before anything changes, the plan shown at approval."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.flow_runs import resume_flow_run

from gpuops.flows.run_runbook import load_runbooks, runbook_flow
from gpuops.runbooks.loader import load_texts, shipped_files
from tests import helpers
from tests import test_capacity_prewarm as prewarm
from tests.helpers import wait_for

CLUSTER = prewarm.CLUSTER
# The capacity tests' fixtures: simcluster's pools backed by moto, Blocks saved.
env_factory, moto_url, prometheus = prewarm.env_factory, prewarm.moto_url, prewarm.prometheus

pytestmark = pytest.mark.timeout(240)

RESIZE_ONLY = """\
name: resize-only
parameters:
  pool: {type: nodepool, required: true}
  size: {type: int, required: true}
steps:
  - name: resize
    action: scale-node-pool
    args: {pool: "{{ pool }}", size: "{{ size }}"}
"""


def _blocks(env: Any) -> dict[str, str]:
    wanted = ("cluster_block", "slack_block", "policy_block", "aws_block")
    return {"capacity_block": env.blocks["config_block"],
            **{k: env.blocks[k] for k in wanted}}


def _run(flow: Any, **params: Any) -> Any:
    return asyncio.run(flow(**params, return_state=True))


def _resize_only() -> Any:
    registry = load_texts([("r.yaml", RESIZE_ONLY)])
    return runbook_flow(registry.get("resize-only"), registry)


def test_resizing_an_eks_pool_sets_its_min_size_and_an_asg_its_desired_capacity(env_factory):
    env = env_factory()
    before = env.groups()
    flow = _resize_only()
    assert _run(flow, pool="a100", size=2, **_blocks(env)).is_completed()
    assert _run(flow, pool="l4", size=3, **_blocks(env)).is_completed()
    after = env.groups()
    assert after["a100"][0] == 2 and after["a100"][2] >= 2  # minSize, desired raised to it
    assert after[f"{CLUSTER}-l4"][2] == 3
    assert {k: v for k, v in after.items() if k not in ("a100", f"{CLUSTER}-l4")} == \
        {k: v for k, v in before.items() if k not in ("a100", f"{CLUSTER}-l4")}


def test_a_size_beyond_the_groups_bounds_is_refused_before_anything_changes(env_factory):
    env = env_factory()
    before = env.groups()
    state = _run(_resize_only(), pool="a100", size=9, dry_run=True, **_blocks(env))
    assert state.is_failed()
    assert "size: 9 is above a100's maxSize 4" in state.message
    assert env.groups() == before


def test_the_shipped_resize_runbook_dry_run_says_what_it_would_set(env_factory):
    env = env_factory()
    before = env.groups()
    state = _run(runbook_flow(load_runbooks().get("resize-node-pool"), load_runbooks()),
                 pool="a100", size=2, dry_run=True, **_blocks(env))
    assert state.name == "DryRun", state.message
    assert state.message == "2 change(s) planned"  # the approval and the resize
    assert env.groups() == before


def test_the_shipped_resize_runbook_resizes_after_approval(env_factory, slack_fake):
    env = env_factory(slack_url=slack_fake.base_url)
    registry = load_texts([(str(p), p.read_text()) for p in shipped_files()])
    flow = runbook_flow(registry.get("resize-node-pool"), registry)

    class Run(helpers.FlowThread):
        def run_flow(self, **params: Any) -> Any:
            return _run(flow, **params)

    run = Run(pool="a100", size=2, reason="launch", **_blocks(env))
    request = wait_for(lambda: next((m for m in slack_fake.messages()
                                     if "Approval needed" in json.dumps(m.get("blocks"))),
                                    None), timeout=60, message="the approval request")
    shown = json.dumps(request["blocks"])
    # What it will set, and what the new size costs against now, from the Block's prices.
    assert ("set EKS node group a100 minSize to 2 (pool a100): 2 x p4d.24xlarge at "
            "$21.96/h = $43.92/h (now 0: $0.00/h, +$43.92/h)") in shown
    run_id = json.loads(next(e["value"] for b in request["blocks"] if b["type"] == "actions"
                             for e in b["elements"]))["flow_run_id"]

    async def paused() -> bool:
        async with get_client() as c:
            flow_run = await c.read_flow_run(uuid.UUID(run_id))
        return bool(flow_run.state and flow_run.state.is_paused())

    wait_for(lambda: asyncio.run(paused()), timeout=60, message="the pause")
    resume_flow_run(uuid.UUID(run_id), run_input={"approved": True, "approver": "alice"})
    state = run.result(180)
    assert state.is_completed() and state.name == "Completed", state.message
    assert env.groups()["a100"][0] == 2


def test_a_size_over_the_gpu_quota_or_the_pools_own_limits_is_refused_naming_it(env_factory):
    pools = [p.model_dump() for p in prewarm.config("").pools]
    for pool in pools:
        if pool["name"] == "a100":
            pool["max_size"] = 3  # below the node group's maxSize 4
    env = env_factory(quotas=[{"family": "p4d", "max_gpus": 16}], pools=pools)
    before = env.groups()
    flow = _resize_only()
    over = _run(flow, pool="a100", size=3, **_blocks(env))
    assert over.is_failed()
    assert "size: 3 nodes x 8 GPUs + 0 GPUs in other 'p4d' pools = 24, above the account " \
        "quota of 16 GPUs (quotas['p4d'].max_gpus)" in over.message
    above = _run(flow, pool="a100", size=4, dry_run=True, **_blocks(env))
    assert "size: 4 is outside pool a100's limits 0..3 (the capacity Block's " \
        "min_size/max_size)" in above.message
    assert env.groups() == before
    # Within the quota it goes ahead, and the plan shows the quota it leaves.
    dry = _run(flow, pool="a100", size=2, dry_run=True, **_blocks(env))
    assert dry.name == "DryRun" and "GPU quota p4d: 16 of 16 GPUs" in str(dry.result())
