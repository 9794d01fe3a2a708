"""The whole `gpuops up`, as a user runs it: `gpuops up 2>&1 | tee up.log` from a shell that
had sourced an earlier stack's env.sh, then Ctrl-C to the whole process group after `tee`
is gone.

One `gpuops up` serves every test here (it takes about 20 s to start); the last test stops
it, so keep it last. What a test reads from the stack goes through the stack's own Prefect
API, env.sh, its files and its processes.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import select
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
from prefect.settings import PREFECT_API_URL, temporary_settings

from gpuops.deployments.served_runs import STOPPED_MESSAGE
from gpuops.deployments.services import free_port, start_prefect_server
from gpuops.deployments.up_inputs import FAKE_SLACK_TOKEN, SIGNING_SECRET_FILE
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(300)


class PipeReader:
    """The `tee` of `gpuops up 2>&1 | tee`: reads the pipe until told to die, then closes it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.output = b""
        self._die = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._die.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    break
                self.output += chunk
        os.close(self.fd)

    def die(self) -> None:
        self._die.set()
        self._thread.join(10)

    def text(self) -> str:
        return self.output.decode(errors="replace")


@dataclass
class Up:
    process: subprocess.Popen[bytes]
    pipe: PipeReader
    home: Path
    prefect_port: int
    stale_slack_url: str
    env: dict[str, str] = field(default_factory=dict)

    def env_sh(self) -> dict[str, str]:
        """The variables env.sh exports (`export NAME=value` lines, shell-quoted)."""
        found = {}
        for line in (self.home / "env.sh").read_text().splitlines():
            if line.startswith("export ") and "=" in line:
                name, _, value = line.removeprefix("export ").partition("=")
                found[name] = shlex.split(value)[0] if value else ""
        return found

    def prefect(self, coro_fn: Any) -> Any:
        """Run `coro_fn(client)` against this stack's Prefect server."""
        async def run() -> Any:
            async with get_client() as client:
                return await coro_fn(client)

        with temporary_settings(updates={PREFECT_API_URL: self.env_sh()["PREFECT_API_URL"]}):
            return asyncio.run(run())

    def child(self, module: str) -> psutil.Process:
        return next(p for p in psutil.Process(self.process.pid).children()
                    if module in " ".join(p.cmdline()))


@pytest.fixture(scope="module")
def up(tmp_path_factory) -> Iterator[Up]:
    root = tmp_path_factory.mktemp("up")
    home = root / "home"
    port = free_port()
    stale = f"http://127.0.0.1:{free_port()}/api/"  # an earlier stack's fake, long gone
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PREFECT_", "GPUOPS_"))}
    env.update(GPUOPS_HISTORY_DAYS="0",  # back-fill has its own tests; keep the start short
               GPUOPS_SLACK_BOT_TOKEN=FAKE_SLACK_TOKEN, GPUOPS_SLACK_BASE_URL=stale)
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuops.deployments.cli", "up", "--home", str(home),
         "--prefect-port", str(port)],
        cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=write_end, stderr=write_end,
        start_new_session=True)  # its own process group, as a shell job is
    os.close(write_end)
    stack = Up(process, PipeReader(read_end), home, port, stale, env)
    try:
        wait_for(lambda: "gpuops is up." in stack.pipe.text() or process.poll() is not None,
                 timeout=180, interval=0.2, message="gpuops is up")
        assert process.poll() is None, stack.pipe.text()[-3000:]
        yield stack
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGINT)  # the second one kills what is left
                process.wait(30)
        stack.pipe.die()


def test_gpuops_block_types_are_registered_on_the_stacks_prefect_server(up: Up) -> None:
    listed = subprocess.run([sys.executable, "-m", "prefect", "block", "type", "ls"],
                            env={**up.env, "PREFECT_API_URL": up.env_sh()["PREFECT_API_URL"]},
                            capture_output=True, text=True, timeout=60, check=True).stdout
    for slug in ("gpuops-approval-policy", "gpuops-slack-connection",
                 "gpuops-kubernetes-cluster", "gpuops-aws-connection",
                 "gpuops-restart-policy", "gpuops-capacity-config"):
        assert slug in listed


def test_the_local_stack_has_a_local_approver_and_the_flows_name_its_policy(up: Up) -> None:
    async def read(client: Any) -> tuple[Any, dict, dict]:
        from gpuops.blocks.policy import ApprovalPolicy

        policy = await ApprovalPolicy.aload("local-approvers", client=client)
        drain = await client.read_deployment_by_name("drain-node/on-demand")
        hourly = await client.read_deployment_by_name("capacity-prewarm/hourly")
        return policy, drain.parameters, hourly.parameters

    policy, drain, hourly = up.prefect(read)
    assert policy.approvers == ["U0LOCALOPS"]
    assert drain == {"policy_block": "local-approvers"}
    assert hourly == {"mode": "dry-run", "policy_block": "local-approvers"}
    banner = up.pipe.text()
    assert "approvals:    policy 'local-approvers' (approvers: U0LOCALOPS)" in banner
    assert "capacity-prewarm/hourly: dry-run" in banner


def _signed_post(url: str, secret: str) -> int:
    body = b"payload=%7B%7D"
    ts = str(int(time.time()))
    sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body,
                           hashlib.sha256).hexdigest()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_the_receiver_and_the_fake_share_a_private_per_install_signing_secret(up: Up) -> None:
    path = up.home / SIGNING_SECRET_FILE
    secret = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret not in (up.home / "env.sh").read_text()
    receiver = up.env_sh()["GPUOPS_SLACK_RECEIVER_URL"]

    assert _signed_post(receiver, secret) != 401
    assert _signed_post(receiver, "local-signing-secret") == 401
    fake_env = up.child("gpuops.deployments.slackfake").environ()
    assert fake_env["GPUOPS_SLACK_SIGNING_SECRET"] == secret
    assert fake_env["GPUOPS_SLACK_INTERACTIONS_URL"] == receiver
    assert fake_env["GPUOPS_SLACK_LOCAL_USER"] == "U0LOCALOPS"


def test_a_shell_that_sourced_an_earlier_env_sh_gets_a_fresh_slack_fake(up: Up) -> None:
    exported = up.env_sh()

    assert exported["GPUOPS_SLACK_BOT_TOKEN"] == FAKE_SLACK_TOKEN
    assert exported["GPUOPS_SLACK_BASE_URL"] != up.stale_slack_url
    fake = exported["GPUOPS_SLACK_BASE_URL"].removesuffix("api/")
    with urllib.request.urlopen(f"{fake}_fake/messages", timeout=10) as response:
        assert response.status == 200
    assert f"Slack (local fake): {fake}" in up.pipe.text()


def _restart_runs(client: Any) -> Any:
    return client.read_flow_runs(deployment_filter=DeploymentFilter(
        name=DeploymentFilterName(any_=["on-restart"])))


# Keep this test last: it stops the module's `gpuops up`.
def test_the_stacks_prometheus_scrapes_the_watchers_gpu_gauges(up: Up) -> None:
    """The GPU gauges can be graphed next to DCGM: the watcher serves them, Prometheus has them."""
    import json
    from urllib.parse import quote

    env = up.env_sh()
    watcher = f"http://127.0.0.1:{env['GPUOPS_WATCHER_METRICS_PORT']}/metrics"
    assert "gpuops_gpu_fragmentation" in urllib.request.urlopen(watcher, timeout=5).read().decode()

    def scraped() -> list:
        url = f"{env['GPUOPS_PROMETHEUS_URL']}/api/v1/query?query=" + quote(
            'gpuops_gpu_fragmentation{cluster="sim"}')
        return json.loads(urllib.request.urlopen(url, timeout=5).read())["data"]["result"]

    wait_for(scraped, timeout=60, interval=1, message="gpuops_gpu_fragmentation in Prometheus")


def test_ctrl_c_after_the_pipe_reader_died_stops_everything_and_cancels_own_runs(up: Up) -> None:
    standing = wait_for(lambda: next((r for r in up.prefect(_restart_runs)
                                      if r.state and r.state.is_running()), None),
                        timeout=90, interval=0.5, message="the standing restart run")
    children = psutil.Process(up.process.pid).children(recursive=True)
    commands = " ".join(" ".join(c.cmdline()) for c in children)
    for component in ("prefect server", "moto.server", "sim serve", "slackfake",
                      "sensor cluster", "sensor slack", "prometheus", "prefect.engine"):
        assert component in commands

    up.pipe.die()  # `tee` is gone: every later write to the pipe fails with EPIPE
    os.killpg(up.process.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
    assert up.process.wait(120) == 0

    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == []
    assert not (up.home / "up.pid").exists()

    # Right after the stop its Prefect server starts again on the same port (connections
    # in TIME_WAIT do not block it), and its history says how the standing run ended.
    prefect = start_prefect_server(up.home, port=up.prefect_port, timeout_s=120)
    try:
        ended = up.prefect(lambda c: c.read_flow_run(standing.id))
    finally:
        prefect.stop()
    assert ended.state.is_cancelled(), ended.state
    assert ended.state.message == STOPPED_MESSAGE
