"""What a person starting a runbook types: a parameter value is data, never a template (no
code runs, no attribute is read, whatever the value says), and the deployment's form
refuses a bad value on the Prefect server before any flow run exists, as the UI's form
does (the UI creates runs through the same API). A real Prefect server, the Slack fake and
simcluster over HTTP."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.exceptions import PrefectHTTPStatusError

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.flows.run_runbook import runbook_deployments, runbook_flow
from gpuops.runbooks.loader import load_texts

pytestmark = pytest.mark.timeout(240)

ECHO = """\
name: echo-reason
parameters:
  reason: {type: string, required: true}
steps:
  - name: tell
    action: slack-post
    args: {channel: "#ops", text: "Drain: {{ reason }}"}
  - name: tell_alone
    action: slack-post
    args: {channel: "#ops", text: "{{ reason }}"}
"""


def _hostile(marker: Path) -> list[str]:
    """Values that, were they rendered as templates, would read Python internals, run a
    command, or compute."""
    return [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        f"{{{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}}}",
        "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
        f"{{{{ lipsum.__globals__['os'].system('touch {marker}') }}}}",
        "{{ reason.__class__ }} {{ steps }} {{ 7 * 7 }}",
        "{% raw %}{{ x }}{% endraw %}{#",
    ]


def test_a_parameter_value_is_never_rendered_as_a_template(prefect_server, sim, slack_fake,
                                                            tmp_path):
    suffix = uuid.uuid4().hex[:8]
    blocks = {"cluster_block": f"in-cluster-{suffix}", "slack_block": f"in-slack-{suffix}",
              "policy_block": f"in-policy-{suffix}"}

    async def save() -> None:
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(sim.kubeconfig)
                                ).save(blocks["cluster_block"], overwrite=True)
        await SlackConnection(bot_token="xoxb-test-token", signing_secret="s",
                              base_url=slack_fake.base_url, default_channel="#ops"
                              ).save(blocks["slack_block"], overwrite=True)
        await ApprovalPolicy(channel="#ops").save(blocks["policy_block"], overwrite=True)

    asyncio.run(save())
    registry = load_texts([("echo.yaml", ECHO)])
    flow = runbook_flow(registry.get("echo-reason"), registry)
    marker = tmp_path / "pwned"
    for value in _hostile(marker):
        state = asyncio.run(flow(reason=value, **blocks, return_state=True))
        assert state.is_completed(), state.message
        texts = [m["text"] for m in slack_fake.messages() if m.get("channel") == "#ops"][-2:]
        assert texts == [f"Drain: {value}", value]  # verbatim: nothing evaluated
    assert not marker.exists()
    # A dry run's plan shows the value as given too.
    plan = asyncio.run(flow(reason="{{ 7 * 7 }}", dry_run=True, **blocks, return_state=True))
    assert "post to #ops: Drain: {{ 7 * 7 }}" in plan.result()


FORM = """\
name: form-check
approval: {separate_approver: true}
parameters:
  node: {type: node, required: true}
  count: {type: int, minimum: 1, maximum: 8, default: 1}
  reason: {type: enum, values: [xid, ecc], default: xid}
  wait: {type: duration, default: 5m}
steps:
  - name: approve
    action: request-approval
    args: {title: "Cordon {{ node }}", summary: "{{ count }} {{ reason }}"}
  - {name: cordon, action: cordon-node, args: {node: "{{ node }}"}}
"""


async def _runs_of(deployment_id: uuid.UUID) -> int:
    async with get_client() as c:
        return len(await c.read_flow_runs(deployment_filter=DeploymentFilter(
            id=DeploymentFilterId(any_=[deployment_id]))))


def test_the_deployments_form_refuses_bad_values_before_a_run_exists(prefect_server):
    registry = load_texts([("form.yaml", FORM)])
    (deployment,) = runbook_deployments(registry)
    good = {"node": "gpu-1", "started_by": "UALICE"}
    bad: list[tuple[dict[str, Any], str]] = [
        ({"node": "GPU_1", "started_by": "UALICE"}, "node"),  # not a DNS name
        ({**good, "count": 0}, "count"),  # below its minimum
        ({**good, "count": 9}, "count"),  # above its maximum
        ({**good, "count": "three"}, "count"),  # not an integer
        ({**good, "reason": "fire"}, "reason"),  # not one of its values
        ({**good, "wait": "soon"}, "wait"),  # not a duration
        ({"started_by": "UALICE"}, "node"),  # required
        ({"node": "gpu-1"}, "started_by"),  # the runbook needs to know who starts it
        ({"node": "gpu-1", "started_by": " "}, "started_by"),
    ]

    async def check() -> None:
        deployment_id = await deployment.apply()
        async with get_client() as c:
            for parameters, field in bad:
                with pytest.raises(PrefectHTTPStatusError) as refused:
                    await c.create_flow_run_from_deployment(deployment_id,
                                                            parameters=parameters)
                assert refused.value.response.status_code == 409, parameters
                assert field in refused.value.response.text, (parameters,
                                                              refused.value.response.text)
            assert await _runs_of(deployment_id) == 0  # none of them started a run
            run = await c.create_flow_run_from_deployment(deployment_id, parameters=good)
            assert await _runs_of(deployment_id) == 1  # a good value does (nothing serves it)
            await c.delete_flow_run(run.id)

    asyncio.run(check())
