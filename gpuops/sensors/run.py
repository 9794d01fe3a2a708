"""Entry points of the long-running sensors (`gpuops sensor cluster|slack`).

`gpuops sensor slack` also runs the approval sweeper: whatever receives the answers to
approvals also says "no" for those that got none (sensors/approval_sweeper.py)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.common.errors import ConfigError
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
    try:
        watcher = ClusterWatcher(cluster.kube(), state_file=state_file, workers=workers)
    except ConfigError as e:
        print(f"gpuops sensor cluster: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    metrics = _serve_gpu_metrics(watcher)
    watcher.start()
    print(f"cluster watcher for {cluster.cluster_name!r} running "
          f"(state: {state_file or 'in memory'}; {metrics})", flush=True)
    started = time.monotonic()
    try:
        _wait_for_signal()
    finally:
        watcher.stop()
        log.info("watcher stopped after %.0fs: %s", time.monotonic() - started, watcher.stats)


def _serve_gpu_metrics(watcher: ClusterWatcher) -> str:
    """The GPU gauges on `GPUOPS_WATCHER_METRICS_HOST:PORT` (port 0: not served); says where."""
    from gpuops.sensors.gpu_metrics import serve_metrics

    settings = watcher.gpu.settings if watcher.gpu else None
    if watcher.gpu is None or settings is None or not settings.metrics_port:
        return "no /metrics"
    try:
        serve_metrics(watcher.gpu.gauges.registry, host=settings.metrics_host,
                      port=settings.metrics_port)
    except OSError as e:
        print(f"gpuops sensor cluster: GPUOPS_WATCHER_METRICS_PORT: cannot serve /metrics on "
              f"{settings.metrics_host}:{settings.metrics_port} ({e}); choose a free port, or "
              "0 for none", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    return f"metrics on http://{settings.metrics_host}:{settings.metrics_port}/metrics"


def run_slack_receiver(*, host: str = "127.0.0.1", port: int = 3000, slack_block: str = "",
                       policy_block: str = "", socket_mode: bool = False,
                       sweep_interval_s: float = 15.0) -> None:
    """Serve Slack clicks until a signal. Exits with status 2 and one line when the Slack
    connection has no signing secret. `policy_block` is ignored: who may decide comes from
    each request's record (sensors/slack_receiver.py), never from the receiver."""
    from gpuops.sensors.approval_sweeper import run_sweeper
    from gpuops.sensors.slack_receiver import build_receiver, serve_http, serve_socket_mode

    conn = _load(SlackConnection, slack_block)
    if policy_block:
        log.warning("--policy-block %r is ignored: each approval request records who may "
                    "decide it", policy_block)
    try:
        receiver = build_receiver(conn)
    except ConfigError as e:
        print(f"gpuops sensor slack: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None

    async def main() -> None:
        sweeper = asyncio.create_task(run_sweeper(sweep_interval_s))
        try:
            if socket_mode:
                if conn.app_token is None:
                    raise SystemExit("Socket Mode needs an app-level token (SlackConnection."
                                     "app_token / GPUOPS_SLACK_APP_TOKEN)")
                await serve_socket_mode(receiver, conn.app_token.get_secret_value())
                return
            runner = await serve_http(receiver, host, port)
            against = "the local Slack fake" if conn.uses_local_fake else "Slack"
            print(f"Slack receiver listening on http://{host}:{port}/slack/events for "
                  f"{against} (approval sweeper every {sweep_interval_s:.0f} s)", flush=True)
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, stop.set)
            await stop.wait()
            await runner.cleanup()
        finally:
            sweeper.cancel()

    asyncio.run(main())
