"""Entry points of the long-running sensors (`gpuops sensor cluster|slack`).

`gpuops sensor slack` also runs the approval sweeper: whatever receives the answers to
approvals also says "no" for those that got none (sensors/approval_sweeper.py)."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from pathlib import Path

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.sensors.cluster_watcher import ClusterWatcher

log = logging.getLogger("gpuops.sensors")


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def _load(block_cls, name: str):
    return block_cls.load(name) if name else block_cls.from_settings()


def run_cluster_watcher(*, cluster_block: str = "", state_file: Path | None = None,
                        workers: int = 8) -> None:
    cluster = _load(KubernetesCluster, cluster_block)
    watcher = ClusterWatcher(cluster.kube(), state_file=state_file, workers=workers).start()
    print(f"cluster watcher for {cluster.cluster_name!r} running "
          f"(state: {state_file or 'in memory'})", flush=True)
    started = time.monotonic()
    try:
        _wait_for_signal()
    finally:
        watcher.stop()
        log.info("watcher stopped after %.0fs: %s", time.monotonic() - started, watcher.stats)


def run_slack_receiver(*, host: str = "127.0.0.1", port: int = 3000, slack_block: str = "",
                       policy_block: str = "", socket_mode: bool = False,
                       sweep_interval_s: float = 15.0) -> None:
    from gpuops.sensors.approval_sweeper import run_sweeper
    from gpuops.sensors.slack_receiver import build_receiver, serve_http, serve_socket_mode

    conn = _load(SlackConnection, slack_block)
    policy = _load(ApprovalPolicy, policy_block)

    async def main() -> None:
        app = build_receiver(conn, policy)
        sweeper = asyncio.create_task(run_sweeper(sweep_interval_s))
        try:
            if socket_mode:
                if conn.app_token is None:
                    raise SystemExit("Socket Mode needs an app-level token (SlackConnection."
                                     "app_token / GPUOPS_SLACK_APP_TOKEN)")
                await serve_socket_mode(app, conn.app_token.get_secret_value())
                return
            runner = await serve_http(app, host, port)
            print(f"Slack receiver listening on http://{host}:{port}/slack/events "
                  f"(approval sweeper every {sweep_interval_s:.0f} s)", flush=True)
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, stop.set)
            await stop.wait()
            await runner.cleanup()
        finally:
            sweeper.cancel()

    asyncio.run(main())
