"""The serving rollout's entry points: `gpuops rollout start|status|abort POOL` and the served
deployment `serving-rollout/on-demand`, whose form in the Prefect UI is the rollout's
parameters. On simcluster (fast clock), a real Prometheus, a real Prefect server, `serve_all()`
in its own process as `gpuops up` runs it, and the Slack fake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prefect.utilities.callables import parameter_schema
from typer.testing import CliRunner

from gpuops.common.annotations import ROLLOUT_LAST
from gpuops.deployments.cli import app
from gpuops.deployments.serve import served_deployment_names
from gpuops.deployments.services import host_port
from gpuops.flows.serving_rollout import serving_rollout
from tests.helpers import wait_for
from tests.serving_rollout.stack import (
    MODEL,
    NS,
    RolloutThread,
    approval_request,
    new_pool_of,
    save_blocks,
    timeline,
)
from tests.test_approvals import run_id_of, wait_paused

pytestmark = pytest.mark.timeout(240)
runner = CliRunner()


def _options(blocks: dict[str, str]) -> list[str]:
    return [part for key, name in blocks.items()
            for part in (f"--{key.replace('_', '-')}", name)]


def test_the_served_deployments_form_is_the_rollouts_parameters():
    assert "serving-rollout/on-demand" in served_deployment_names()
    assert "serving-rollout-abort/on-demand" in served_deployment_names()
    schema = parameter_schema(serving_rollout.fn).model_dump()
    props = schema["properties"]
    assert schema["required"] == ["pool"]
    for name in ("pool", "image", "model", "args", "steps", "gates", "window_s",
                 "min_requests", "mode", "approve", "dry_run", "rollout_block"):
        assert props[name].get("description"), name  # from the docstring's Args
    modes = [s for s in props["mode"]["anyOf"] if "enum" in s]
    assert modes[0]["enum"] == ["auto", "blue-green", "fixed-capacity"]
    approvals = [s for s in props["approve"]["anyOf"] if "enum" in s]
    assert approvals[0]["enum"] == ["final", "every-step", "none"]
    for name, values in (("baseline", ["auto", "none", "fresh-copy"]),
                         ("no_room", ["fixed-capacity", "prewarm"]),
                         ("prewarm_fallback", ["fixed-capacity", "fail"])):
        assert props[name].get("description"), name
        assert next(s for s in props[name]["anyOf"] if "enum" in s)["enum"] == values


def test_a_bad_parameter_on_the_command_line_is_one_line_and_changes_nothing(
        stack, slack_fake, prefect_server):
    stack.deploy()
    blocks = save_blocks(stack, "http://127.0.0.1:9", slack_fake)
    before = stack.snapshot()
    for extra, line in (
            (["--steps", "1,5,50"], ("error: steps: must end at 100 (the new version serving "
                                    "everything), ends at 50")),
            (["--steps", "1,five"], "error: steps: must be percentages separated by commas"),
            (["--gates", '[{"metric": "ttft_p95", "factor": 1.2}]'],
             "error: gates[0].metric: unknown metric 'ttft_p95'"),
            (["--mode", "canary"], ("error: mode: must be one of auto, blue-green, "
                                   "fixed-capacity, got 'canary'")),
            (["--no-room", "wait"], ("error: no_room: must be one of fixed-capacity, prewarm, "
                                     "got 'wait'"))):
        result = runner.invoke(app, ["rollout", "start", f"{NS}/{MODEL}", "--image",
                                     "vllm/vllm-openai:v0.12.0", *extra, *_options(blocks)])
        assert result.exit_code == 2, result.output
        (error,) = result.stderr.strip().splitlines()
        assert error.startswith(line), error
    assert stack.snapshot() == before


async def _deployed(name: str) -> bool:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    async with get_client() as c:
        try:
            await c.read_deployment_by_name(name)
        except ObjectNotFound:
            return False
    return True


def test_a_rollout_started_from_the_cli_runs_as_the_served_deployment_to_100_percent(
        stack, prometheus_scraping, slack_fake, prefect_server, serve_deployments):
    stack.deploy()
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake)
    serve_deployments()  # `serve_all()` in its own process, as `gpuops up` runs it
    wait_for(lambda: asyncio.run(_deployed("serving-rollout/on-demand")), timeout=90,
             message="the served deployment registered")

    result = runner.invoke(app, ["rollout", "start", f"{NS}/{MODEL}", "--image",
                                 "vllm/vllm-openai:v0.12.0", "--steps", "5,50,100", "--wait",
                                 *_options(blocks)])

    assert result.exit_code == 0, result.output
    assert "of serving-rollout/on-demand" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("Completed: llama-3-8b -> ")
    new = new_pool_of(stack)
    assert stack.weights() == {MODEL: 0, new: 100}
    status = runner.invoke(app, ["rollout", "status", f"{NS}/{new}", "--cluster-block",
                                 blocks["cluster_block"]])
    assert status.exit_code == 0, status.output
    lines = status.stdout.strip().splitlines()
    assert lines[0] == f"HTTPRoute {NS}/{MODEL}: {MODEL} 0 %, {new} 100 %"
    assert lines[1] == "rollout: none in progress"
    assert lines[2].startswith("last: completed ") and f"{MODEL} -> {new}" in lines[2]


def test_abort_rolls_back_a_rollout_waiting_for_approval(stack, served_stack_blocks):
    blocks, slack_fake = served_stack_blocks
    run = RolloutThread(pool=f"{NS}/{MODEL}", image="vllm/vllm-openai:v0.12.0", **blocks)
    message = approval_request(slack_fake)  # at 50 %, waiting before 100 %
    wait_paused(run_id_of(message))
    new = new_pool_of(stack)
    status = runner.invoke(app, ["rollout", "status", f"{NS}/{MODEL}", "--cluster-block",
                                 blocks["cluster_block"]])
    assert "shifting at 50 % (judged, passed)" in status.stdout, status.output
    assert "(Paused)" in status.stdout or "(Suspended)" in status.stdout

    result = runner.invoke(app, ["rollout", "abort", f"{NS}/{MODEL}", "--reason",
                                 "latency complaints", "--cluster-block",
                                 blocks["cluster_block"], "--rollout-block",
                                 blocks["rollout_block"]])

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Aborted: flow run ")
    state = run.result(timeout=120)
    assert state.name == "Aborted" and state.is_cancelled(), state.message
    assert "latency complaints" in state.message
    assert timeline(state)[-1] == (100, "rejected")
    assert stack.weights() == {MODEL: 100, new: 0}
    annotations = stack.route()["metadata"]["annotations"]
    assert annotations[ROLLOUT_LAST].startswith("aborted ")
    assert stack.deployments()[new] == 0 and stack.ready_pods(MODEL) == 2
    again = runner.invoke(app, ["rollout", "abort", f"{NS}/{MODEL}", "--cluster-block",
                                blocks["cluster_block"]])
    assert again.exit_code == 0 and again.stdout.startswith("NothingToAbort: ")


@pytest.fixture
def served_stack_blocks(stack, prometheus_scraping, slack_fake, prefect_server
                        ) -> tuple[dict[str, str], Any]:
    stack.deploy()
    blocks = save_blocks(stack, prometheus_scraping(host_port(stack.sim.url)), slack_fake,
                         approve="final", steps=[5, 50, 100])
    return blocks, slack_fake


def test_a_start_without_block_options_leaves_the_served_deployments_own_to_apply(monkeypatch):
    """`gpuops up` serves the rollout with its approval policy as a deployment parameter: a
    CLI start that names no Block must not override it with an empty name (the request then
    had no Slack approvers)."""
    from gpuops.deployments import rollout_cli

    sent: dict[str, Any] = {}

    async def check(params: dict[str, Any]) -> None:
        return None

    async def start(params: dict[str, Any]) -> Any:
        sent.update(params)

        class Run:
            name, id = "a-run", "00000000-0000-0000-0000-000000000000"
        return Run()

    monkeypatch.setattr(rollout_cli, "check_parameters", check)
    monkeypatch.setattr(rollout_cli, "start_run", start)
    result = runner.invoke(app, ["rollout", "start", f"{NS}/{MODEL}",
                                 "--image", "vllm/vllm-openai:v0.12.0"])

    assert result.exit_code == 0, result.output
    assert sent["image"] == "vllm/vllm-openai:v0.12.0"
    assert not {"policy_block", "slack_block", "cluster_block", "rollout_block"} & set(sent)
