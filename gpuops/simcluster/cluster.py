"""SimCluster: the store, the HTTP API and the simulated controllers in one asyncio process."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiohttp import web

from .core.clock import VirtualClock
from .core.faults import FaultRegistry
from .core.logs import LogStore
from .core.store import Store

log = logging.getLogger("gpuops.simcluster")


class Controller(Protocol):
    """A simulated cluster component: it runs a loop against the store until cancelled."""

    name: str

    async def run(self) -> None: ...


@dataclass
class SimConfig:
    cluster_name: str = "sim"
    scenario: str = "default"  # a name of a shipped scenario or a path to a YAML file
    speed: float = 1.0
    aws_endpoint: str | None = None  # moto's URL: node pools follow their node group / ASG
    history_window: int = 50_000
    controllers: bool = True  # False: a bare API server (for the scale benchmark)
    extra: dict[str, Any] = field(default_factory=dict)


class SimCluster:
    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.clock = VirtualClock(self.config.speed)
        self.store = Store(self.clock, history_window=self.config.history_window)
        self.logs = LogStore()
        self.faults = FaultRegistry()
        self.controllers: list[Controller] = []
        self._tasks: list[asyncio.Task] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        from .apiserver.server import build_app
        from .scenario import load_scenario

        load_scenario(self, self.config.scenario)
        if self.config.controllers:
            from .controllers_all import build_controllers
            self.controllers = build_controllers(self)
        app = build_app(self)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://{host}:{bound}"
        for controller in self.controllers:
            self._tasks.append(asyncio.create_task(self._supervise(controller),
                                                   name=controller.name))
        return self.url

    async def _supervise(self, controller: Controller) -> None:
        """Restart a crashed controller after a pause: a bug in one must not stop the cluster."""
        while True:
            try:
                await controller.run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller %s crashed; restarting", controller.name)
                await asyncio.sleep(1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.store.drop_all_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, user: str = "gpuops") -> dict[str, Any]:
        name = self.config.cluster_name
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": "simcluster"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": user,
                                                    "namespace": "default"}}],
        }

    def write_kubeconfig(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        tmp.replace(path)  # atomic: a reader never sees half a kubeconfig
        return path
