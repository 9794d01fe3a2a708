"""SimCluster: the one module that builds simcluster's parts and wires them together.

Every component is handed what it uses and nothing more: the store, the clock, the event
recorder, the log store, the fault registry, an informer-style index, its typed config
section (`config.py`). What two components share is a `core/` object built here once (the
owner index of the controllers and the API server's DELETE, the GPU allocations of the kubelet
and the DCGM exporter, the node index of the node pools and the node lifecycle controller, the
per-version model-load times the metrics engine's `slow-version` sets and the kubelet reads,
the pod proxy through which the API server reaches the metrics engine's vLLM servers);
no component reaches another. Components are built after the scenario is in the store and in
this order, which is also the order their store listeners are called in.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiohttp import web

from .admin import AdminApi
from .apiserver.server import ApiServer
from .cloud.nodepools import NodePoolController
from .cloud.pools import NodePools
from .config import DEFAULT_CLUSTER_NAME, Knobs, SimConfig
from .controllers.daemonset import DaemonSetController
from .controllers.deployment import DeploymentController
from .controllers.disruption import DisruptionController
from .controllers.garbagecollector import GarbageCollector
from .controllers.gateway import GatewayStatusController
from .controllers.job import JobController
from .controllers.leaderworkerset import LeaderWorkerSetController
from .controllers.nodelifecycle import NodeLifecycleController
from .controllers.replicaset import ReplicaSetController
from .controllers.statefulset import StatefulSetController
from .core.clock import VirtualClock
from .core.faults import FaultRegistry
from .core.gpus import GpuAllocations
from .core.logs import LogStore
from .core.nodeindex import NodeIndex
from .core.ownership import OwnerIndex
from .core.podproxy import PodProxy
from .core.recorder import Recorder
from .core.store import Store
from .core.versions import LoadTimes
from .kubelet.kubelet import Kubelet
from .kubelet.nodelease import NodeLeases
from .metrics.engine import MetricsEngine
from .metrics.resourcemetrics import ResourceMetricsApi
from .scenario import ParsedScenario, apply_scenario, parse_scenario, scenario_text
from .scheduler.scheduler import Scheduler

log = logging.getLogger("gpuops.simcluster")
# What stop() gives requests still in flight before cancelling them: watches are closed
# first, so what is left are streams that never end by themselves (a followed log).
SHUTDOWN_GRACE_S = 1.0


class Controller(Protocol):
    """A simulated cluster component: it runs a loop against the store until cancelled."""

    name: str

    async def run(self) -> None: ...


class SimCluster:
    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.name = self.config.cluster_name  # a scenario's cluster.name replaces the default
        self.knobs: Knobs = self.config.knobs
        self.clock = VirtualClock(self.config.speed)
        self.store = Store(self.clock, history_window=self.config.history_window)
        self.logs = LogStore()
        self.faults = FaultRegistry()
        self.recorder = Recorder(self.store, self.clock)
        self.controllers: list[Controller] = []
        self._tasks: list[asyncio.Task] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- wiring --------------------------------------------------------------------------------

    def assemble(self, scenario: ParsedScenario | None = None) -> web.Application:
        """Load `scenario` into the store, build every component and the HTTP app; nothing
        runs until `start`. The scenario's `sim:` and `demand:` knobs apply on top of the
        config's, its cluster name unless the config names the cluster."""
        if scenario is not None and self.config.cluster_name == DEFAULT_CLUSTER_NAME:
            self.name = scenario.scenario.cluster.name
        pools = NodePools(self.store, self.clock, self.recorder, self.name)
        if scenario is not None:
            apply_scenario(self.store, pools, scenario)
            self.knobs = self.config.knobs.merged(scenario.scenario.sim,
                                                  scenario.scenario.demand)
        store, clock, recorder, knobs = self.store, self.clock, self.recorder, self.knobs
        gpus = GpuAllocations(store, store.type("pods"), store.type("nodes"))
        load_times = LoadTimes()  # slow-version faults (metrics) -> model loads (kubelet)
        pod_proxy = PodProxy()  # pods' servers (metrics' vLLM) <- pods/proxy (API server)
        owners: OwnerIndex | None = None
        if self.config.controllers:
            self.controllers = [
                Scheduler(store, clock, recorder, knobs.scheduler()),
                Kubelet(store, clock, recorder, self.logs, self.faults, gpus,
                        knobs.kubelet.config(), load_times),
                NodeLeases(store, clock),
            ]
            owners = OwnerIndex(store)
            self.controllers += self._controller_manager(owners)
            self.controllers.append(GatewayStatusController(store, clock))
            self.controllers += self._cloud(pools)
        metrics = MetricsEngine(store, clock, self.faults, gpus, knobs.demand_model(),
                                seed=knobs.seed, load_times=load_times, pod_proxy=pod_proxy)
        if self.config.controllers:
            self.controllers.append(metrics)
        resource_metrics = ResourceMetricsApi(store, clock)
        resource_metrics.register(store.registry)
        api = ApiServer(store, clock, self.logs, self.faults,
                        has_dependents=None if owners is None else owners.has_dependents,
                        pod_proxy=pod_proxy)

        def load_scenario(text: str, source: str) -> dict[str, int]:
            """Into the running cluster: its knobs were applied at startup and stay."""
            return apply_scenario(store, pools, parse_scenario(text, source))

        app = web.Application(middlewares=[api.middleware], client_max_size=64 * 1024 * 1024)
        AdminApi(store, clock, self.faults, self.name, load_scenario).add_routes(app)
        app.router.add_get("/metrics", metrics.handle)
        resource_metrics.add_routes(app)  # metrics.k8s.io, before the API server's routes
        api.add_routes(app)
        return app

    def _controller_manager(self, owners: OwnerIndex) -> list[Controller]:
        store, clock, recorder = self.store, self.clock, self.recorder
        return [
            ReplicaSetController(store, clock, recorder, owners),
            DeploymentController(store, clock, recorder, owners),
            StatefulSetController(store, clock, recorder, owners),
            DaemonSetController(store, clock, recorder, owners),
            JobController(store, clock, recorder, owners),
            LeaderWorkerSetController(store, clock, recorder, owners),
            DisruptionController(store, clock, recorder),
            GarbageCollector(store, clock, owners),
        ]

    def _cloud(self, pools: NodePools) -> list[Controller]:
        """The node pools, and the node lifecycle controller that shares their node index."""
        store, clock, recorder = self.store, self.clock, self.recorder
        nodes = NodeIndex(store)
        config = self.knobs.node_pools(self.config.aws_endpoint)
        pool_controller = NodePoolController(store, clock, recorder, nodes, pools, config)
        lifecycle = NodeLifecycleController(store, clock, recorder, nodes,
                                            self.knobs.node_lifecycle())
        pool_controller.register_faults(self.faults)
        lifecycle.register_faults(self.faults)
        controllers: list[Controller] = [pool_controller, lifecycle]
        if config.aws_endpoint:
            from .cloud.aws import AwsPoolSync  # boto3 (~11 MB) only when AWS backs pools

            controllers.append(AwsPoolSync(clock, pool_controller, config.aws_endpoint,
                                           config.aws_poll_seconds))
        return controllers

    # --- running -------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = self.assemble(parse_scenario(*scenario_text(self.config.scenario)))
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                     shutdown_timeout=SHUTDOWN_GRACE_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # noqa: SLF001
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
        name = self.name
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


def fault_catalog() -> dict[str, dict[str, Any]]:
    """Every fault kind a cluster registers, described from its parameter model, without
    starting a cluster (for `gpuops sim fault --list`)."""
    cluster = SimCluster(SimConfig(scenario="empty"))
    cluster.assemble()
    return cluster.faults.describe()
