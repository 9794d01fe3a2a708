"""`gpuops up`: the whole platform on one machine, with no outside accounts.

It starts, in order, a Prefect server (SQLite in `<home>/prefect`), moto for AWS, simcluster
(unless a real kubeconfig is given), the Slack fake (unless a real Slack token is set) and a
Prometheus scraping simcluster; writes `<home>/env.sh` so other shells can reach them; then
serves the project's deployments in the foreground. Ctrl-C or SIGTERM stops every child
process and removes `<home>/up.pid`. If a component dies while up, everything stops and the
error shows that component's log.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import psutil

from gpuops.deployments.history import backfill_history
from gpuops.deployments.services import (
    Service,
    ServiceExitedError,
    host_port,
    prometheus_data_dir,
    start_cluster_watcher,
    start_moto,
    start_prefect_server,
    start_prometheus,
    start_simcluster,
    start_slack_fake_server,
    start_slack_receiver,
)
from gpuops.deployments.settings import UpSettings, get_up_settings

FAKE_SLACK_TOKEN = "xoxb-gpuops-fake"  # the fake only checks that a token is present

# Credentials moto accepts; kept only when the user has none of their own in the environment.
AWS_DEFAULTS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


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


def start_components(
    *,
    home: Path,
    kubeconfig: Path | None,
    scenario: str,
    prefect_port: int,
    sim_port: int,
    settings: UpSettings,
    services: list[Service],
) -> dict[str, str]:
    """Start each component, appending it to `services` as soon as it is up (so that a later
    failure still stops it); return the environment a client of this stack needs."""
    timeout_s = settings.start_timeout_s
    prefect = start_prefect_server(home, port=prefect_port, timeout_s=timeout_s)
    services.append(prefect)
    moto = start_moto(home, timeout_s=timeout_s)
    services.append(moto)
    env = {"PREFECT_API_URL": prefect.url, "AWS_ENDPOINT_URL": moto.url}

    sim: Service | None = None
    if kubeconfig is None:
        kubeconfig = home / "simcluster" / "kubeconfig.yaml"
        sim = start_simcluster(home, kubeconfig=kubeconfig, port=sim_port, scenario=scenario,
                               speed=settings.sim_speed, aws_endpoint=moto.url,
                               timeout_s=timeout_s)
        services.append(sim)
    env["KUBECONFIG"] = str(Path(kubeconfig).resolve())

    if settings.slack_bot_token is None:
        slack = start_slack_fake_server(home, timeout_s=timeout_s)
        services.append(slack)
        env.update(GPUOPS_SLACK_BASE_URL=slack.url, GPUOPS_SLACK_BOT_TOKEN=FAKE_SLACK_TOKEN)

    env["GPUOPS_CLUSTER_NAME"] = settings.cluster_name
    services.append(start_cluster_watcher(home, env=env, timeout_s=timeout_s))
    receiver = start_slack_receiver(home, env=env, timeout_s=timeout_s)
    services.append(receiver)
    env["GPUOPS_SLACK_RECEIVER_URL"] = receiver.url

    if sim is not None:  # a real cluster has its own Prometheus: set GPUOPS_PROMETHEUS_URL
        filled = backfill_history(prometheus_data_dir(home), scenario,
                                  days=settings.history_days)
        if filled is not None:
            print(f"back-filled {filled.samples} samples of demand history into Prometheus "
                  f"({filled.seconds:.1f} s)", flush=True)
        prometheus = start_prometheus(home, targets=[host_port(sim.url)], timeout_s=timeout_s,
                                      retention_days=max(30, settings.history_days + 7))
        services.append(prometheus)
        env["GPUOPS_PROMETHEUS_URL"] = prometheus.url
    return env


def write_env_file(path: Path, env: dict[str, str]) -> Path:
    """A shell file to `source`: the stack's URLs, plus moto credentials unless you have some."""
    lines = [f"# Written by `gpuops up` at {time.strftime('%Y-%m-%d %H:%M:%S')}.",
             f"# `source {shlex.quote(str(path))}` to use the local stack from another shell."]
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


def serve_deployments() -> None:
    """Serve the deployments until Ctrl-C/SIGTERM. Prefect's runner handles the interrupt
    itself (pausing the deployments) and returns; `run_up` then stops every component."""
    from gpuops.deployments.serve import serve_all

    serve_all()


def _print_banner(home: Path, env: dict[str, str], prefect_port: int, simulated: bool) -> None:
    kubeconfig = env["KUBECONFIG"]
    print(f"\ngpuops is up.\n"
          f"  Prefect UI:   http://127.0.0.1:{prefect_port}\n"
          f"  kubeconfig:   {kubeconfig}\n"
          f"  environment:  source {home / 'env.sh'}\n"
          f"  logs:         {home / 'logs'}/")
    if simulated:
        print(f"Inject a fault:\n"
              f"  gpuops sim fault crashloop --target default/<pod> --kubeconfig {kubeconfig}")
    print("Press Ctrl-C to stop.\n", flush=True)


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_up(
    *,
    kubeconfig: Path | None = None,
    scenario: str = "default",
    home: Path = Path(".gpuops"),
    prefect_port: int = 4200,
    sim_port: int = 0,
    settings: UpSettings | None = None,
) -> None:
    """Start the local stack and block until Ctrl-C/SIGTERM; raise if a component fails."""
    settings = settings or get_up_settings()
    home = Path(home).resolve()
    pid_file = home / "up.pid"
    owner = _live_owner(pid_file)
    if owner is not None:
        raise AlreadyRunningError(f"gpuops is already running (pid {owner[0]}): UI at {owner[1]}")
    home.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()}\nhttp://127.0.0.1:{prefect_port}\n")

    services: list[Service] = []
    died: list[Service] = []
    stop_watching = threading.Event()
    # Explicit handlers: a shell's background job inherits SIGINT ignored, and the watchdog
    # needs SIGINT to reach this thread whatever the parent did.
    previous = {sig: signal.signal(sig, _raise_keyboard_interrupt)
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        env = start_components(home=home, kubeconfig=kubeconfig, scenario=scenario,
                               prefect_port=prefect_port, sim_port=sim_port,
                               settings=settings, services=services)
        write_env_file(home / "env.sh", env)
        os.environ.update(env)  # serve_all() below talks to this stack
        for name, value in AWS_DEFAULTS.items():
            os.environ.setdefault(name, value)
        _print_banner(home, env, prefect_port, simulated=kubeconfig is None)
        threading.Thread(target=_watch_children, args=(services, died, stop_watching),
                         name="gpuops-up-watchdog", daemon=True).start()
        serve_deployments()
    except KeyboardInterrupt:
        pass
    finally:
        stop_watching.set()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("stopping gpuops...", file=sys.stderr, flush=True)
        for service in reversed(services):
            service.stop()
        pid_file.unlink(missing_ok=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if died:
        raise ServiceExitedError("\n".join(s.exit_report() for s in died))
