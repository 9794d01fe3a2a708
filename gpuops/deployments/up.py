"""`gpuops up`: the whole platform on one machine, with no outside accounts.

It checks its inputs (`up_inputs`), then starts, in order, a Prefect server (SQLite in
`<home>/prefect`: run history persists between starts), registers gpuops' Block types there,
saves the local approval policy if missing and ends the runs an earlier stop left unfinished
(`block_setup`, `served_runs`); then moto for AWS, simcluster (unless a real kubeconfig is
given; it starts afresh every time), the Slack fake (unless a real Slack token is set) and a
Prometheus scraping simcluster; writes `<home>/env.sh` so other shells can reach them; then
serves the project's deployments in the foreground. Ctrl-C, SIGTERM or SIGHUP stops
everything and removes `<home>/up.pid`, whatever happened to standard output; a second one
kills what is left (`stopping`). If a component dies while up, everything stops and the error
shows that component's log.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gpuops.common.settings import KubeSettings, UpSettings, get_settings
from gpuops.deployments.history import backfill_history
from gpuops.deployments.services import (
    Service,
    ServiceExitedError,
    free_port,
    host_port,
    prometheus_data_dir,
    slack_receiver_url,
    start_cluster_watcher,
    start_moto,
    start_prefect_server,
    start_prometheus,
    start_simcluster,
    start_slack_fake_server,
    start_slack_receiver,
)
from gpuops.deployments.stdio import protect_stdio, say
from gpuops.deployments.stopping import Stopper
from gpuops.deployments.up_inputs import (
    FAKE_SLACK_TOKEN,
    SlackChoice,
    UpInputError,
    check_up_inputs,
    choose_slack,
)

# Credentials moto accepts; kept only when the user has none of their own in the environment.
AWS_DEFAULTS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
END_RUNS_TIMEOUT_S = 20.0


class AlreadyRunningError(RuntimeError):
    """Another `gpuops up` holds this home directory."""


def _live_owner(pid_file: Path) -> tuple[int, str] | None:
    """The pid and UI URL of a live `gpuops up` recorded in `pid_file`, if there is one."""
    try:
        pid_line, _, url = pid_file.read_text().partition("\n")
        pid = int(pid_line)
        command = " ".join(psutil.Process(pid).cmdline())
    except (FileNotFoundError, ValueError, psutil.Error):
        return None
    if pid == os.getpid() or "gpuops" not in command:
        return None  # a stale file whose pid now belongs to some other program
    return pid, url.strip()


@dataclass
class Stack:
    """What the started stack tells its clients: `env` goes into env.sh; `secret_env` only
    into the environment of the processes that need it (never into a file others read)."""

    env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict)
    approval_policy: str = ""
    approvers: list[str] = field(default_factory=list)
    orphans_ended: int = 0
    slack_page: str | None = None


def load_up_settings(**options: object) -> UpSettings:
    """The environment's settings with the command line's options (`None`: not given) over
    them; a bad value is an `UpInputError` naming the option and its variable."""
    from pydantic import ValidationError

    given: dict[str, Any] = {name: value for name, value in options.items()
                             if value is not None}
    try:
        return UpSettings(**given) if given else get_settings(UpSettings)
    except ValidationError as e:
        problems = "; ".join(
            f"--{'-'.join(str(p) for p in err['loc']).replace('_', '-')} / GPUOPS_"
            f"{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']} "
            f"(got {err.get('input')!r})" for err in e.errors())
        raise UpInputError(problems) from None


def prepare_prefect(approval_policy: str) -> tuple[str, list[str], int]:
    """Block types registered, the approval policy there, orphaned runs ended; returns the
    policy's name and approvers, and how many orphans were ended. PREFECT_API_URL must point
    at the new server before this (it is the first thing here that imports Prefect)."""
    from gpuops.deployments.block_setup import (
        LOCAL_POLICY,
        ApprovalPolicyNotFound,
        ensure_approval_policy,
        register_block_types,
    )
    from gpuops.deployments.serve import served_deployment_names
    from gpuops.deployments.served_runs import ORPHANED_MESSAGE, end_unfinished_runs

    served = served_deployment_names()  # outside the loop: to_deployment() is sync here

    async def prepare() -> tuple[list[str], int]:
        await register_block_types()
        policy = await ensure_approval_policy(approval_policy)
        orphans = await end_unfinished_runs(served, end_as="Crashed", message=ORPHANED_MESSAGE)
        return list(policy.approvers), len(orphans)

    try:
        approvers, orphans = asyncio.run(prepare())
    except ApprovalPolicyNotFound as e:
        raise UpInputError(str(e)) from None
    return approval_policy or LOCAL_POLICY, approvers, orphans


def end_own_runs() -> None:
    """On stop: cancel gpuops' runs still going, so the next start finds none orphaned."""
    from gpuops.deployments.serve import served_deployment_names
    from gpuops.deployments.served_runs import STOPPED_MESSAGE, end_unfinished_runs

    served = served_deployment_names()

    async def end() -> None:
        await asyncio.wait_for(end_unfinished_runs(
            served, end_as="Cancelled", message=STOPPED_MESSAGE), END_RUNS_TIMEOUT_S)

    asyncio.run(end())


def start_components(
    *,
    home: Path,
    kubeconfig: Path | None,
    settings: UpSettings,
    slack: SlackChoice,
    services: list[Service],
) -> Stack:
    """Start each component, appending it to `services` as soon as it is up (so that a later
    failure still stops it); return what a client of this stack needs."""
    timeout_s = settings.start_timeout_s
    scenario, prefect_port = settings.scenario, settings.prefect_port
    prefect = start_prefect_server(home, port=prefect_port, timeout_s=timeout_s)
    services.append(prefect)
    os.environ["PREFECT_API_URL"] = prefect.url
    stack = Stack(secret_env={"GPUOPS_SLACK_SIGNING_SECRET":
                              slack.signing_secret.get_secret_value()})
    stack.approval_policy, stack.approvers, stack.orphans_ended = prepare_prefect(
        settings.approval_policy)

    moto = start_moto(home, timeout_s=timeout_s)
    services.append(moto)
    env = stack.env
    env.update(PREFECT_API_URL=prefect.url, AWS_ENDPOINT_URL=moto.url)

    sim: Service | None = None
    if kubeconfig is None:
        kubeconfig = home / "simcluster" / "kubeconfig.yaml"
        sim = start_simcluster(home, kubeconfig=kubeconfig, port=settings.sim_port, scenario=scenario,
                               speed=settings.sim_speed, aws_endpoint=moto.url,
                               timeout_s=timeout_s)
        services.append(sim)
    env["KUBECONFIG"] = str(Path(kubeconfig).resolve())

    receiver_port = free_port()
    # The watcher polls DCGM in Prometheus and serves the GPU gauges Prometheus scrapes: both
    # ports are chosen before either starts.
    prometheus_port, metrics_port = free_port(), free_port()
    env["GPUOPS_WATCHER_METRICS_PORT"] = os.environ.get("GPUOPS_WATCHER_METRICS_PORT") or str(
        metrics_port)
    if sim is not None:
        env["GPUOPS_PROMETHEUS_URL"] = f"http://127.0.0.1:{prometheus_port}"
    if slack.local_fake:
        from gpuops.deployments.block_setup import LOCAL_APPROVER

        fake = start_slack_fake_server(home, timeout_s=timeout_s, env={
            **stack.secret_env,  # the page signs its clicks as Slack would
            "GPUOPS_SLACK_INTERACTIONS_URL": slack_receiver_url(receiver_port),
            "GPUOPS_SLACK_LOCAL_USER": LOCAL_APPROVER})
        services.append(fake)
        env.update(GPUOPS_SLACK_BASE_URL=fake.url, GPUOPS_SLACK_BOT_TOKEN=FAKE_SLACK_TOKEN)
        stack.slack_page = fake.url.removesuffix("api/")

    env["GPUOPS_CLUSTER_NAME"] = get_settings(KubeSettings).cluster_name
    services.append(start_cluster_watcher(home, env=env, timeout_s=timeout_s))
    receiver = start_slack_receiver(home, env={**env, **stack.secret_env}, port=receiver_port,
                                    policy_block=stack.approval_policy, timeout_s=timeout_s)
    services.append(receiver)
    env["GPUOPS_SLACK_RECEIVER_URL"] = receiver.url

    if sim is not None:  # a real cluster has its own Prometheus: set GPUOPS_PROMETHEUS_URL
        filled = backfill_history(prometheus_data_dir(home), scenario,
                                  days=settings.history_days)
        if filled is not None:
            say(f"back-filled {filled.samples} samples of demand history into Prometheus "
                f"({filled.seconds:.1f} s)")
        targets = [host_port(sim.url)] + ([f"127.0.0.1:{env['GPUOPS_WATCHER_METRICS_PORT']}"]
                                          if env["GPUOPS_WATCHER_METRICS_PORT"] != "0" else [])
        prometheus = start_prometheus(home, targets=targets, port=prometheus_port,
                                      timeout_s=timeout_s,
                                      retention_days=max(30, settings.history_days + 7))
        services.append(prometheus)
        env["GPUOPS_PROMETHEUS_URL"] = prometheus.url
    return stack


def write_env_file(path: Path, env: dict[str, str]) -> Path:
    """A shell file to `source`: the stack's URLs, plus moto credentials unless you have some."""
    lines = [f"# Written by `gpuops up` at {time.strftime('%Y-%m-%d %H:%M:%S')}.",
             f"# `source {shlex.quote(str(path))}` to use the local stack from another shell."]
    if env.get("GPUOPS_SLACK_BOT_TOKEN") == FAKE_SLACK_TOKEN:
        lines.append("# GPUOPS_SLACK_BOT_TOKEN is the local Slack fake's: a `gpuops up` started "
                     "from this shell knows it and starts a fresh fake.")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    lines += [f'export {name}="${{{name}:-{value}}}"' for name, value in AWS_DEFAULTS.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _watch_children(services: list[Service], died: list[Service], stop: threading.Event) -> None:
    """Interrupt the main thread when a component dies, so `up` never half-runs silently."""
    while not stop.wait(1.0):
        gone = [s for s in services if not s.is_running()]
        if gone:
            died.extend(gone)
            os.kill(os.getpid(), signal.SIGINT)
            return


def serve_deployments(*, approval_policy: str, capacity_mode: str,
                      when_registered: Callable[[], None]) -> None:
    """Serve the deployments until Ctrl-C/SIGTERM. Prefect's runner handles the interrupt
    itself (pausing the deployments) and returns; `run_up` then stops every component.
    `when_registered` runs once every deployment exists on the server."""
    from gpuops.deployments.serve import serve_all

    serve_all(approval_policy=approval_policy, capacity_mode=capacity_mode,
              when_registered=when_registered)


def _banner(home: Path, stack: Stack, prefect_port: int, simulated: bool,
            capacity_mode: str) -> str:
    kubeconfig = stack.env["KUBECONFIG"]
    lines = ["", "gpuops is up.",
             f"  Prefect UI:   http://127.0.0.1:{prefect_port}",
             f"  kubeconfig:   {kubeconfig}" + ("  (simulated: starts afresh every time)"
                                                if simulated else ""),
             f"  environment:  source {home / 'env.sh'}",
             f"  logs:         {home / 'logs'}/"]
    if stack.slack_page:
        lines.append(f"  Slack (local fake): {stack.slack_page}")
    approvers = ", ".join(stack.approvers) or "none: approve in the Prefect UI"
    lines.append(f"  approvals:    policy {stack.approval_policy!r} (approvers: {approvers})")
    lines.append(f"  capacity-prewarm/hourly: {capacity_mode}"
                 + ("  (`--capacity-mode apply` changes node pools)"
                    if capacity_mode == "dry-run" else ""))
    if stack.orphans_ended:
        lines.append(f"  ended {stack.orphans_ended} run(s) an earlier stop left unfinished")
    if simulated:
        lines += ["Inject a fault (`gpuops sim fault --list` shows every kind):",
                  (f"  .venv/bin/gpuops sim fault crashloop --target inference/llama-3-8b "
                   f"--param once=true --kubeconfig {kubeconfig}")]
    lines += ["Press Ctrl-C to stop.", ""]
    return "\n".join(lines)


def run_up(*, kubeconfig: Path | None = None, settings: UpSettings | None = None) -> None:
    """Start the local stack and block until Ctrl-C/SIGTERM; raise if a component fails.
    Everything but a real cluster's kubeconfig comes from `settings` (the environment's, with
    the command line's options over them: `load_up_settings`). Bad inputs raise
    `UpInputError` before anything starts (or, for a named approval policy, before anything
    is announced)."""
    settings = settings or get_settings(UpSettings)
    home = Path(settings.home).resolve()
    scenario, prefect_port, sim_port = settings.scenario, settings.prefect_port, settings.sim_port
    pid_file = home / "up.pid"
    owner = _live_owner(pid_file)
    if owner is not None:
        raise AlreadyRunningError(f"gpuops is already running (pid {owner[0]}): UI at {owner[1]}")
    check_up_inputs(kubeconfig=kubeconfig, scenario=scenario, prefect_port=prefect_port,
                    sim_port=sim_port)
    home.mkdir(parents=True, exist_ok=True)
    slack = choose_slack(settings, home)

    services: list[Service] = []
    died: list[Service] = []
    stop_watching = threading.Event()
    stopper = Stopper(services, pid_file)
    with protect_stdio():
        prefect_up = False
        try:
            # Our handlers and up.pid only inside the try: a signal at any moment from here
            # on ends in the `finally` below (one between installing the handlers and
            # entering the try would have left up.pid behind).
            stopper.install()
            pid_file.write_text(f"{os.getpid()}\nhttp://127.0.0.1:{prefect_port}\n")
            stack = start_components(home=home, kubeconfig=kubeconfig, settings=settings,
                                     slack=slack, services=services)
            prefect_up = True
            write_env_file(home / "env.sh", stack.env)
            os.environ.update(stack.env)  # serve_all() below talks to this stack
            os.environ.update(stack.secret_env)
            for name, value in AWS_DEFAULTS.items():
                os.environ.setdefault(name, value)
            threading.Thread(target=_watch_children, args=(services, died, stop_watching),
                             name="gpuops-up-watchdog", daemon=True).start()
            banner = _banner(home, stack, prefect_port, simulated=kubeconfig is None,
                             capacity_mode=settings.capacity_mode)
            serve_deployments(approval_policy=stack.approval_policy,
                              capacity_mode=settings.capacity_mode,
                              when_registered=lambda: say(banner))
        except KeyboardInterrupt:
            pass
        finally:
            stop_watching.set()
            stopper.stop(end_runs=end_own_runs if prefect_up else None)
            stopper.restore()
    if died:
        raise ServiceExitedError("\n".join(s.exit_report() for s in died))
