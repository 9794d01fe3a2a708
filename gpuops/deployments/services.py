"""Start and stop the local components of `gpuops up` (and of tests) as child processes.

Each component runs in its own process and session, so a crash or a Ctrl-C in one cannot take
the others down, and `Service.stop()` can end the whole process group. Each `start_*` helper
returns only once the component answers its health check; if it exits or stays silent, the
error carries the tail of its log file (`<home>/logs/<name>.log`), which is where the cause is.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

LOCALHOST = "127.0.0.1"

# Health checks go straight to 127.0.0.1, never through an http_proxy from the environment.
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServiceError(RuntimeError):
    """A local component failed; the message says which, why, and what it logged."""


class ServiceStartError(ServiceError):
    """A component did not become ready."""


class ServiceExitedError(ServiceError):
    """A component that was ready has exited on its own."""


@dataclass
class Service:
    """A running component: its child process, the URL clients use, and its log file."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def is_running(self) -> bool:
        return self.process.poll() is None

    def exit_report(self) -> str:
        """Why this service is gone: its exit code and the end of its log."""
        return (f"{self.name} exited with code {self.process.poll()}; "
                f"last lines of {self.log_path}:\n{log_tail(self.log_path)}")

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, wait `grace_s`, then SIGKILL whatever is left."""
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait()
        _signal_group(self.process, signal.SIGKILL)  # helpers its main process left behind


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(process.pid, sig)  # start_new_session=True: the group id is the pid


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int, *, what: str, option: str, host: str = LOCALHOST) -> None:
    """Fail early and clearly when a fixed port is taken, instead of talking to a stranger.

    SO_REUSEADDR, as servers bind: connections of a server that just stopped (or crashed)
    linger in TIME_WAIT for up to a minute and must not block its restart; a listener,
    ours or a stranger's, still makes the bind fail."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            raise ServiceStartError(
                f"port {port} for the {what} is already in use on {host}; "
                f"stop whatever holds it or choose another with `{option}`"
            ) from e


def log_tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file, or a note that there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log file at {path})"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    """True when `GET url` answers 200; any connection problem counts as 'not yet'."""
    try:
        with _direct.open(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def read_kubeconfig_server(path: Path) -> str:
    """The API server URL of the first cluster in a kubeconfig (`clusters[0].cluster.server`)."""
    try:
        config = yaml.safe_load(Path(path).read_text())
        return str(config["clusters"][0]["cluster"]["server"]).rstrip("/")
    except FileNotFoundError as e:
        raise FileNotFoundError(f"kubeconfig {str(path)!r} does not exist") from e
    except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f"kubeconfig {str(path)!r} has no `clusters[0].cluster.server`") from e


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    home: Path,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `argv` in a new session with stdout and stderr appended to `<home>/logs/<name>.log`."""
    log_path = Path(home) / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    with log_path.open("ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env,
            start_new_session=True,
        )
    return process, log_path


def wait_until_ready(
    name: str,
    process: subprocess.Popen[bytes],
    log_path: Path,
    is_ready: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.2,
) -> None:
    """Poll `is_ready` until it is true; stop the process and raise if it exits or times out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if is_ready():
            return
        code = process.poll()
        if code is not None:
            raise ServiceStartError(
                f"{name} exited with code {code} before it was ready; "
                f"last lines of {log_path}:\n{log_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            Service(name, "", process, log_path).stop()
            raise ServiceStartError(
                f"{name} was not ready after {timeout_s:.0f} s; "
                f"last lines of {log_path}:\n{log_tail(log_path)}"
            )
        time.sleep(interval_s)


def _start(
    name: str,
    argv: Sequence[str],
    *,
    home: Path,
    url: str,
    is_ready: Callable[[], bool],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> Service:
    process, log_path = spawn(name, argv, home=home, env=env)
    wait_until_ready(name, process, log_path, is_ready, timeout_s=timeout_s)
    return Service(name, url, process, log_path)


def start_prefect_server(home: Path, *, port: int = 4200, timeout_s: float = 120.0,
                         settings: dict[str, str] | None = None) -> Service:
    """`prefect server start` on SQLite in `<home>/prefect`, unless `settings` (Prefect
    server settings, e.g. a PostgreSQL connection URL) say otherwise; `Service.url` is the
    API URL."""
    ensure_port_free(port, what="Prefect server", option="--prefect-port")
    env = dict(os.environ)
    for inherited in (
        "PREFECT_API_URL",  # the server must not point its UI at some other server
        "PREFECT_API_DATABASE_CONNECTION_URL",
        "PREFECT_SERVER_DATABASE_CONNECTION_URL",
    ):
        env.pop(inherited, None)
    env.update(
        PREFECT_HOME=str((Path(home) / "prefect").resolve()),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_UI_ENABLED="true",
    )
    # Events become readable when the persister flushes (every 5 s by default): restart
    # diagnostics reads them back, so flush every second unless told otherwise.
    env.setdefault("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL", "1")
    # A run refused its deployment's one slot tries again after this (30 s by default): the
    # next standing restart-diagnostics run takes over a few seconds after the last one ends.
    env.setdefault("PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS", "2")
    env.update(settings or {})
    base = f"http://{LOCALHOST}:{port}"
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", LOCALHOST,
            "--port", str(port)]
    return _start("prefect", argv, home=home, url=f"{base}/api", env=env, timeout_s=timeout_s,
                  is_ready=lambda: http_ok(f"{base}/api/health"))


def start_moto(home: Path, *, port: int | None = None, timeout_s: float = 60.0) -> Service:
    """moto's AWS server (EKS, Auto Scaling, EC2...) as its own process; `url` is the endpoint."""
    port = port or free_port()
    url = f"http://{LOCALHOST}:{port}"
    argv = [sys.executable, "-m", "moto.server", "-H", LOCALHOST, "-p", str(port)]
    return _start("moto", argv, home=home, url=url, timeout_s=timeout_s,
                  is_ready=lambda: http_ok(f"{url}/moto-api/"))


def prometheus_config(targets: Sequence[str], *, job_name: str = "gpuops") -> dict[str, object]:
    """A Prometheus config scraping `host:port/metrics` of every target every 5 s."""
    return {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "scrape_configs": [{
            "job_name": job_name,
            "metrics_path": "/metrics",
            "static_configs": [{"targets": list(targets)}],
        }],
    }


def prometheus_data_dir(home: Path) -> Path:
    """Where `start_prometheus` keeps its TSDB (and history is back-filled before it starts)."""
    return Path(home) / "prometheus" / "data"


def start_prometheus(
    home: Path,
    *,
    targets: Sequence[str],
    port: int | None = None,
    retention_days: int = 30,
    timeout_s: float = 60.0,
) -> Service:
    """A real Prometheus scraping `targets` (`host:port`), data in `<home>/prometheus/data`
    kept `retention_days` (Prometheus' own default, 15, is shorter than back-filled history)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise ServiceStartError(
            "the `prometheus` binary is not on PATH; install it with `make prometheus` "
            "(or `apt-get install prometheus`)"
        )
    prom_dir = prometheus_data_dir(home).parent
    (prom_dir / "data").mkdir(parents=True, exist_ok=True)
    config_path = prom_dir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(prometheus_config(targets), sort_keys=False))
    port = port or free_port()
    url = f"http://{LOCALHOST}:{port}"
    argv = [
        binary,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={prom_dir / 'data'}",
        f"--storage.tsdb.retention.time={retention_days}d",
        f"--web.listen-address={LOCALHOST}:{port}",
        "--web.enable-admin-api",
    ]
    return _start("prometheus", argv, home=home, url=url, timeout_s=timeout_s,
                  is_ready=lambda: http_ok(f"{url}/-/ready"))


def start_simcluster(
    home: Path,
    *,
    kubeconfig: Path,
    port: int = 0,
    scenario: str = "default",
    speed: float = 1.0,
    aws_endpoint: str | None = None,
    timeout_s: float = 60.0,
) -> Service:
    """The simulated cluster; ready when it has written `kubeconfig` and answers `/version`."""
    kubeconfig = Path(kubeconfig)
    kubeconfig.unlink(missing_ok=True)  # a stale file from a previous run is not readiness
    argv = [sys.executable, "-m", "gpuops.deployments.cli", "sim", "serve",
            "--host", LOCALHOST, "--port", str(port), "--kubeconfig", str(kubeconfig),
            "--scenario", scenario, "--speed", str(speed)]
    if aws_endpoint:
        argv += ["--aws-endpoint", aws_endpoint]

    def is_ready() -> bool:
        try:
            return http_ok(f"{read_kubeconfig_server(kubeconfig)}/version")
        except (FileNotFoundError, ValueError):
            return False  # not written yet

    process, log_path = spawn("simcluster", argv, home=home)
    wait_until_ready("simcluster", process, log_path, is_ready, timeout_s=timeout_s)
    return Service("simcluster", read_kubeconfig_server(kubeconfig), process, log_path)


def start_slack_fake_server(
    home: Path, *, port: int | None = None, timeout_s: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> Service:
    """The local Slack Web API fake; `Service.url` is the `base_url` for `slack_sdk.WebClient`.
    `env` is added to its environment (the receiver's signing secret and URL, for its page)."""
    port = port or free_port()
    origin = f"http://{LOCALHOST}:{port}"
    argv = [sys.executable, "-m", "gpuops.deployments.slackfake", "--host", LOCALHOST,
            "--port", str(port)]
    return _start("slackfake", argv, home=home, url=f"{origin}/api/", timeout_s=timeout_s,
                  env={**os.environ, **(env or {})},
                  is_ready=lambda: http_ok(f"{origin}/_fake/messages"))


def start_cluster_watcher(home: Path, *, env: Mapping[str, str],
                          timeout_s: float = 60.0) -> Service:
    """`gpuops sensor cluster`, keeping its reported restarts in `<home>/watcher-state.json`."""
    argv = [sys.executable, "-m", "gpuops.deployments.cli", "sensor", "cluster",
            "--state-file", str(Path(home) / "watcher-state.json")]
    process, log_path = spawn("watcher", argv, home=home, env={**os.environ, **env})
    wait_until_ready("watcher", process, log_path,
                     lambda: "cluster watcher for" in log_path.read_text(errors="replace"),
                     timeout_s=timeout_s)
    return Service("watcher", "", process, log_path)


def slack_receiver_url(port: int) -> str:
    """Slack's interactivity URL for a receiver on `port` of this machine."""
    return f"http://{LOCALHOST}:{port}/slack/events"


def start_slack_receiver(home: Path, *, env: Mapping[str, str], port: int | None = None,
                         policy_block: str = "", timeout_s: float = 60.0) -> Service:
    """`gpuops sensor slack`: Slack's interactivity URL is `Service.url`."""
    port = port or free_port()
    url = slack_receiver_url(port)
    argv = [sys.executable, "-m", "gpuops.deployments.cli", "sensor", "slack",
            "--port", str(port)]
    if policy_block:
        argv += ["--policy-block", policy_block]
    return _start("slack-receiver", argv, home=home, url=url, timeout_s=timeout_s,
                  env={**os.environ, **env},
                  is_ready=lambda: "Slack receiver listening" in (
                      Path(home) / "logs" / "slack-receiver.log").read_text(errors="replace"))


def host_port(url: str) -> str:
    """`http://127.0.0.1:8080/x` -> `127.0.0.1:8080`: the form Prometheus targets take."""
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return f"{parts.hostname}:{parts.port or default}"
