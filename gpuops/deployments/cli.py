"""The `gpuops` command: start everything locally, drive the simulated cluster, run benchmarks.

Commands stay thin: they parse options and call one function elsewhere, importing it inside
the command so that `gpuops --help` stays fast and a broken part cannot break the others.
Bad input (a missing file or Block, a bad scenario or rule file) is one `error:` line and
exit status 2 (cli_errors.py).
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpuops.deployments.cli_errors import UserErrorsGroup, require_blocks
from gpuops.deployments.runbook_cli import runbook_app

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State

app = typer.Typer(
    cls=UserErrorsGroup,
    name="gpuops",
    help="Workflow and runbook automation for Kubernetes GPU clusters, on Prefect.",
    no_args_is_help=True,
    add_completion=False,
)
sim_app = typer.Typer(
    help="The simulated GPU cluster: serve it, inject faults, move its clock.",
    no_args_is_help=True,
)
app.add_typer(sim_app, name="sim")
sensor_app = typer.Typer(
    help="Long-running bridges into Prefect: the cluster watcher, the Slack receiver.",
    no_args_is_help=True,
)
app.add_typer(sensor_app, name="sensor")
plan_app = typer.Typer(
    help="Plan (and apply) on demand what the scheduled flows do.",
    no_args_is_help=True,
)
app.add_typer(plan_app, name="plan")
rules_app = typer.Typer(
    help="Restart cause rules: put a rule file into a restart policy Block.",
    no_args_is_help=True,
)
app.add_typer(rules_app, name="restart-rules")
rollout_app = typer.Typer(
    help="Serving rollouts between InferencePools: start one, see how one goes, abort one.",
    no_args_is_help=True,
)
app.add_typer(rollout_app, name="rollout")
app.add_typer(runbook_app, name="runbook")

KubeconfigOption = Annotated[
    Path,
    typer.Option(envvar="KUBECONFIG", help="kubeconfig written by simcluster (`gpuops up`)."),
]
# Kinds the help names: a test keeps them in step with what simcluster registers.
HELP_FAULT_KINDS = ("crashloop", "oom", "cuda-oom", "nccl-timeout", "gpu-xid", "liveness",
                    "image-pull", "config-error", "evict", "node-notready", "recover")


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def up(
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Use this real cluster instead of starting simcluster.")] = None,
    scenario: Annotated[str | None, typer.Option(
        help="simcluster scenario. [default: $GPUOPS_SCENARIO or default]")] = None,
    home: Annotated[Path | None, typer.Option(
        help="State, logs and env.sh. [default: $GPUOPS_HOME or ./.gpuops]")] = None,
    prefect_port: Annotated[int | None, typer.Option(
        help="Prefect server and UI port. [default: $GPUOPS_PREFECT_PORT or 4200]")] = None,
    sim_port: Annotated[int | None, typer.Option(
        help="simcluster port, 0 = any free one. [default: $GPUOPS_SIM_PORT or 0]")] = None,
    approval_policy: Annotated[str | None, typer.Option(
        help="Saved approval policy Block the flows and the Slack receiver use. [default: "
             "$GPUOPS_APPROVAL_POLICY or local-approvers]")] = None,
    capacity_mode: Annotated[str | None, typer.Option(
        help="What capacity-prewarm/hourly does: dry-run or apply. [default: "
             "$GPUOPS_CAPACITY_MODE or dry-run]")] = None,
) -> None:
    """Start Prefect, moto, simcluster, the Slack fake and Prometheus; stop them on Ctrl-C."""
    from gpuops.deployments.services import ServiceError
    from gpuops.deployments.up import AlreadyRunningError, UpInputError, load_up_settings, run_up

    try:
        settings = load_up_settings(scenario=scenario or None, home=home,
                                    prefect_port=prefect_port, sim_port=sim_port,
                                    approval_policy=approval_policy,
                                    capacity_mode=capacity_mode)
        run_up(kubeconfig=kubeconfig, settings=settings)
    except UpInputError as e:
        _fail(str(e), code=2)
    except (AlreadyRunningError, ServiceError) as e:
        _fail(str(e))


@sim_app.command("serve")
def sim_serve(
    kubeconfig: Annotated[Path, typer.Option(help="Where to write the kubeconfig.")],
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 0,
    scenario: Annotated[str, typer.Option(help="Shipped scenario name or YAML path.")] = "default",
    speed: Annotated[float, typer.Option(help="Clock speed; 1 is real time.")] = 1.0,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    aws_endpoint: Annotated[str | None, typer.Option(
        help="moto's URL: node pools follow their EKS node groups / ASGs there.")] = None,
) -> None:
    """Serve a simulated Kubernetes GPU cluster until interrupted."""
    from gpuops.simcluster.server import serve_forever

    serve_forever(host=host, port=port, kubeconfig=kubeconfig, scenario=scenario, speed=speed,
                  aws_endpoint=aws_endpoint)


def _post_to_sim(kubeconfig: Path, path: str, body: dict[str, Any]) -> None:
    from gpuops.deployments.simadmin import SimAdminError, post_admin

    try:
        answer = post_admin(kubeconfig, path, body)
    except SimAdminError as e:
        _fail(str(e), code=2 if e.bad_request else 1)
    except ValueError as e:  # a kubeconfig without a server
        _fail(str(e), code=2)
    typer.echo(json.dumps(answer, indent=2))


@sim_app.command("fault")
def sim_fault(
    kind: Annotated[str | None, typer.Argument(
        help=f"Fault kind: {', '.join(HELP_FAULT_KINDS)}, ... (`--list` shows every kind, "
             "what it does and its parameters).", show_default=False)] = None,
    kubeconfig: Annotated[Path | None, typer.Option(
        envvar="KUBECONFIG", help="kubeconfig written by simcluster (`gpuops up` prints it; "
        "`source .gpuops/env.sh` sets KUBECONFIG).")] = None,
    target: Annotated[str | None, typer.Option(
        help="What the fault hits: `namespace/name` of a pod or workload (a pod first, then "
             "a Deployment, StatefulSet, DaemonSet, ReplicaSet or Job of that name), "
             "`kind/namespace/name` (`deployment/inference/llama-3-8b`) to say which, a "
             "namespace with `--param selector=app=x`, or a node name for node faults. A "
             "workload or selector also hits the pods created later, until `recover`.")] = None,
    param: Annotated[list[str] | None, typer.Option(
        help="Fault parameter `key=value` (JSON values keep their type); repeatable. "
             "`--list` shows each kind's parameters.")] = None,
    list_kinds: Annotated[bool, typer.Option(
        "--list", help="List every fault kind: what it does, its target, its parameters "
                       "(types, ranges, defaults). Needs no cluster.")] = False,
) -> None:
    """Inject a fault into the simulated cluster (POST /admin/faults) and print its answer."""
    from gpuops.deployments.simadmin import format_fault_kinds, parse_params

    if list_kinds:
        from gpuops.simcluster.cluster import fault_catalog

        typer.echo(format_fault_kinds(fault_catalog()), nl=False)
        return
    if kind is None:
        _fail("give a fault KIND (`gpuops sim fault --list` shows them)", code=2)
    if kubeconfig is None:
        _fail("give --kubeconfig (or set KUBECONFIG): the kubeconfig `gpuops up` wrote",
              code=2)
    try:
        params = parse_params(param or [])
    except ValueError as e:
        _fail(str(e), code=2)
    _post_to_sim(kubeconfig, "/admin/faults", {"kind": kind, "target": target, "params": params})


@sim_app.command("clock")
def sim_clock(
    kubeconfig: KubeconfigOption,
    advance: Annotated[float | None, typer.Option(help="Jump the clock by SECONDS.")] = None,
    speed: Annotated[float | None, typer.Option(help="Set the clock speed.")] = None,
) -> None:
    """Jump the simulated clock forward or change its speed (POST /admin/clock)."""
    if (advance is None) == (speed is None):
        _fail("give exactly one of `--advance SECONDS` or `--speed X`", code=2)
    body = {"advance": advance} if advance is not None else {"speed": speed}
    _post_to_sim(kubeconfig, "/admin/clock", body)


@sensor_app.command("cluster")
def sensor_cluster(
    cluster_block: Annotated[str, typer.Option(help="A saved `gpuops-kubernetes-cluster` "
                                               "Block; empty: KUBECONFIG and GPUOPS_*.")] = "",
    state_file: Annotated[Path | None, typer.Option(help="Where reported restarts are kept "
                                                    "across restarts of the watcher.")] = None,
    workers: Annotated[int, typer.Option(help="Evidence capture workers.")] = 8,
) -> None:
    """Watch pods and nodes; emit `gpuops.pod.restarted` with evidence (Ctrl-C stops)."""
    from gpuops.blocks.connections import KubernetesCluster
    from gpuops.sensors.run import run_cluster_watcher

    require_blocks((KubernetesCluster, cluster_block))
    run_cluster_watcher(cluster_block=cluster_block, state_file=state_file, workers=workers)


@sensor_app.command("slack")
def sensor_slack(
    port: Annotated[int, typer.Option(help="HTTP port for Slack's interactivity URL.")] = 3000,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    slack_block: Annotated[str, typer.Option(help="A saved Slack connection Block.")] = "",
    policy_block: Annotated[str, typer.Option(help="A saved approval policy Block.")] = "",
    socket_mode: Annotated[bool, typer.Option(help="Use Socket Mode (no ingress).")] = False,
) -> None:
    """Receive Approve/Reject clicks and resume the paused flow runs."""
    from gpuops.blocks.connections import SlackConnection
    from gpuops.sensors.run import run_slack_receiver

    require_blocks((SlackConnection, slack_block))
    run_slack_receiver(host=host, port=port, slack_block=slack_block,
                       policy_block=policy_block, socket_mode=socket_mode)


@plan_app.command("capacity")
def plan_capacity_command(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan and report; change "
                                          "nothing (the default without --apply).")] = False,
    apply: Annotated[bool, typer.Option("--apply", help="Apply the targets (changes above "
                                        "the cost threshold wait for approval).")] = False,
    config_block: Annotated[str, typer.Option(help="A saved capacity config Block.")] = "",
    aws_block: Annotated[str, typer.Option(help="A saved AWS connection Block.")] = "",
    cluster_block: Annotated[str, typer.Option(help="A saved cluster Block.")] = "",
    slack_block: Annotated[str, typer.Option(help="A saved Slack connection Block.")] = "",
    policy_block: Annotated[str, typer.Option(help="A saved approval policy Block.")] = "",
    now: Annotated[str | None, typer.Option(help="Plan as of this time (ISO 8601, UTC), "
                                            "e.g. to replay a past day.")] = None,
) -> None:
    """Run capacity pre-warm once: forecast, plan, and (with --apply) pre-warm node pools."""
    if dry_run and apply:
        _fail("give `--dry-run` or `--apply`, not both", code=2)
    import asyncio
    from datetime import datetime

    try:
        as_of = datetime.fromisoformat(now) if now else None
    except ValueError as e:
        _fail(f"--now: {e}; give an ISO 8601 time such as `2026-03-15T10:30:00Z`", code=2)

    from gpuops.blocks.capacity import CapacityConfig
    from gpuops.blocks.connections import AwsConnection, KubernetesCluster, SlackConnection
    from gpuops.blocks.policy import ApprovalPolicy
    from gpuops.flows.capacity_prewarm import capacity_prewarm

    # A missing or bad Block is a line naming it before the run starts, not a failed run.
    require_blocks((CapacityConfig, config_block), (AwsConnection, aws_block),
                   (KubernetesCluster, cluster_block), (SlackConnection, slack_block),
                   (ApprovalPolicy, policy_block))
    state: State[Any] = asyncio.run(capacity_prewarm(  # type: ignore[arg-type]  # a coroutine
        mode="apply" if apply else "dry-run", config_block=config_block, aws_block=aws_block,
        cluster_block=cluster_block, slack_block=slack_block, policy_block=policy_block,
        now=as_of, return_state=True))
    typer.echo(f"{state.name}: {state.message}")
    if not state.is_completed():
        raise typer.Exit(1)


@rules_app.command("load")
def restart_rules_load(
    file: Annotated[Path, typer.Argument(help="A rule file (YAML), as restart_rules.yaml.")],
    policy_block: Annotated[str, typer.Option(help="The `gpuops-restart-policy` Block to put "
                                              "the rules into; created if missing.")],
) -> None:
    """Check a rule file (errors name file:line:column) and save its rules into a restart
    policy Block's `extra_rules_yaml`, replacing the rules it had."""
    import asyncio

    from gpuops.deployments.rule_files import load_rule_file

    count, created = asyncio.run(load_rule_file(file, policy_block))
    what = "created" if created else "updated"
    typer.echo(f"{count} rule(s) from {file} saved in Block gpuops-restart-policy/"
               f"{policy_block} ({what})")


PoolArgument = Annotated[str, typer.Argument(help="The InferencePool, `namespace/name`.",
                                             show_default=False)]


@rollout_app.command("start")
def rollout_start(
    pool: PoolArgument,
    image: Annotated[str | None, typer.Option(help="The new vLLM image.")] = None,
    model: Annotated[str | None, typer.Option(help="The model the new version loads "
                                              "(--model); the served name stays.")] = None,
    arg: Annotated[list[str] | None, typer.Option(help="An engine flag to set, `--arg "
                                                  "--max-num-seqs=512`; repeatable.")] = None,
    steps: Annotated[str | None, typer.Option(help="Traffic % per step, e.g. 1,5,25,50,100 "
                                              "[default: the rollout Block's]")] = None,
    gates: Annotated[str | None, typer.Option(help="Gates as JSON, e.g. "
                                              "'[{\"metric\": \"ttft_p90\", \"factor\": 1.2}]'")
                     ] = None,
    window_s: Annotated[float | None, typer.Option(help="Analysis window, seconds.")] = None,
    min_requests: Annotated[int | None, typer.Option(help="Requests per side before a window "
                                                     "is judged.")] = None,
    mode: Annotated[str | None, typer.Option(help="auto, blue-green or fixed-capacity.")] = None,
    approve: Annotated[str | None, typer.Option(help="final, every-step or none.")] = None,
    baseline: Annotated[str | None, typer.Option(
        help="auto, none, or fresh-copy: a copy of the old version as large as the new one, "
        "given its weight below 50 % so both are judged equally busy (blue-green; needs its "
        "GPUs too); auto: fresh-copy when there is room [default: the rollout Block's]")
    ] = None,
    no_room: Annotated[str | None, typer.Option(
        help="fixed-capacity, or prewarm: without spare GPUs ask the capacity side for nodes "
        "and wait, then blue-green [default: the rollout Block's]")] = None,
    prewarm_fallback: Annotated[str | None, typer.Option(
        help="After a pre-warm timed out: fixed-capacity or fail.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check and plan; change "
                                          "nothing.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run to end and print "
                                       "how it ended.")] = False,
    local: Annotated[bool, typer.Option("--local", help="Run the flow in this process "
                                        "instead of as a run of the served deployment.")] = False,
    rollout_block: Annotated[str, typer.Option(help="A saved rollout policy Block.")] = "",
    cluster_block: Annotated[str, typer.Option(help="A saved cluster Block.")] = "",
    slack_block: Annotated[str, typer.Option(help="A saved Slack connection Block.")] = "",
    policy_block: Annotated[str, typer.Option(help="A saved approval policy Block.")] = "",
) -> None:
    """Roll POOL's model server out to a new version: a run of serving-rollout/on-demand
    (served by `gpuops up`), or of the flow here with --local."""
    import asyncio

    from gpuops.blocks.connections import KubernetesCluster, SlackConnection
    from gpuops.blocks.policy import ApprovalPolicy
    from gpuops.blocks.rollout import RolloutPolicy
    from gpuops.deployments.rollout_cli import (
        check_parameters,
        parse_gates_option,
        parse_steps_option,
        start_run,
        wait_final,
    )

    require_blocks((RolloutPolicy, rollout_block), (KubernetesCluster, cluster_block),
                   (SlackConnection, slack_block), (ApprovalPolicy, policy_block))
    params: dict[str, Any] = {
        "pool": pool, "image": image, "model": model, "args": arg or None,
        "steps": parse_steps_option(steps), "gates": parse_gates_option(gates),
        "window_s": window_s, "min_requests": min_requests, "mode": mode, "approve": approve,
        "baseline": baseline, "no_room": no_room, "prewarm_fallback": prewarm_fallback,
        "dry_run": dry_run, "rollout_block": rollout_block, "cluster_block": cluster_block,
        "slack_block": slack_block, "policy_block": policy_block}
    # Unset options (None, or a Block not named) are left out, so the served deployment's
    # own parameters apply: `gpuops up` names its approval policy there.
    params = {k: v for k, v in params.items() if v is not None and v != ""}
    asyncio.run(check_parameters(params))  # a bad one: `error: field: ...`, exit 2
    if local:
        from gpuops.flows.serving_rollout import serving_rollout

        state: State[Any] = asyncio.run(serving_rollout(  # type: ignore[arg-type]
            **params, return_state=True))
    else:
        run = asyncio.run(start_run(params))
        typer.echo(f"started flow run {run.name} ({run.id}) of serving-rollout/on-demand")
        if not wait:
            return
        state = asyncio.run(wait_final(run.id))
    typer.echo(f"{state.name}: {state.message}")
    if not state.is_completed():
        raise typer.Exit(1)


@rollout_app.command("status")
def rollout_status(
    pool: PoolArgument,
    cluster_block: Annotated[str, typer.Option(help="A saved cluster Block.")] = "",
) -> None:
    """POOL's route and weights, the rollout recorded on it (and its run), the last one."""
    from gpuops.blocks.connections import KubernetesCluster
    from gpuops.deployments.rollout_cli import status_lines

    require_blocks((KubernetesCluster, cluster_block))
    typer.echo(status_lines(pool, cluster_block))


@rollout_app.command("abort")
def rollout_abort(
    pool: PoolArgument,
    reason: Annotated[str, typer.Option(help="Why (kept on the route).")] = "",
    wait_s: Annotated[float, typer.Option(help="How long a running rollout gets to roll "
                                          "back.")] = 300.0,
    cluster_block: Annotated[str, typer.Option(help="A saved cluster Block.")] = "",
    rollout_block: Annotated[str, typer.Option(help="A saved rollout policy Block.")] = "",
) -> None:
    """Stop POOL's rollout and roll it back: the run going rolls back itself (an approval it
    waits on is answered no); what a dead run left is rolled back here."""
    import asyncio
    import getpass

    from gpuops.blocks.connections import KubernetesCluster
    from gpuops.blocks.rollout import RolloutPolicy
    from gpuops.flows.serving_rollout import serving_rollout_abort

    require_blocks((KubernetesCluster, cluster_block), (RolloutPolicy, rollout_block))
    state: State[Any] = asyncio.run(serving_rollout_abort(  # type: ignore[arg-type]
        pool=pool, reason=reason, requested_by=f"{getpass.getuser()} (gpuops rollout abort)",
        wait_s=wait_s, cluster_block=cluster_block, rollout_block=rollout_block,
        return_state=True))
    typer.echo(f"{state.name}: {state.message}")
    if not state.is_completed():
        raise typer.Exit(1)


def available_benches() -> list[str]:
    """Bench names (`sim-scale`) of the modules in `gpuops/bench/` that define `main`."""
    package = importlib.import_module("gpuops.bench")
    names = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"gpuops.bench.{info.name}")
        if callable(getattr(module, "main", None)):
            names.append(info.name.replace("_", "-"))
    return sorted(names)


def parse_extra_options(args: list[str]) -> dict[str, Any]:
    """`--pods 1000 --fast --label=x` -> `{"pods": 1000, "fast": True, "label": "x"}`."""
    options: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ValueError(f"unexpected argument {arg!r}; bench options look like `--name value`")
        key, sep, raw = arg[2:].partition("=")
        if not sep:
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                raw, i = args[i + 1], i + 1
            else:
                raw = "true"
        try:
            options[key.replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.replace("-", "_")] = raw
        i += 1
    return options


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Benchmark name, e.g. sim-scale.")],
    json_output: Annotated[bool, typer.Option(
        "--json", help="Print only the figures, as one JSON object.")] = False,
) -> None:
    """Run a benchmark from `gpuops/bench/`; extra `--option value` pairs go to its `main`."""
    module_name = name.replace("-", "_")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", module_name):
        _fail(f"{name!r} is not a bench name; available: {', '.join(available_benches())}", 2)
    try:
        module = importlib.import_module(f"gpuops.bench.{module_name}")
    except ModuleNotFoundError as e:
        if e.name != f"gpuops.bench.{module_name}":
            raise
        available = ", ".join(available_benches()) or "(none yet)"
        _fail(f"unknown bench {name!r}; available benches: {available}", code=2)
    main = getattr(module, "main", None)
    if not callable(main):
        _fail(f"gpuops.bench.{module_name} defines no `main(json_output, **options)`", code=2)
    try:
        options = parse_extra_options(list(ctx.args))
        inspect.signature(main).bind(json_output=json_output, **options)
    except (ValueError, TypeError) as e:
        _fail(f"bench {name!r}: {e}", code=2)
    main(json_output=json_output, **options)


if __name__ == "__main__":
    app(prog_name="gpuops")
