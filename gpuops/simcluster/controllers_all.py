"""Every simulated control-plane and node component, built for one SimCluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .server import Controller, SimCluster


def build_controllers(cluster: SimCluster) -> list[Controller]:
    from . import kubelet, metrics, nodepools, scheduler, workloads

    controllers: list[Controller] = []
    for module in (scheduler, kubelet, workloads, nodepools, metrics):
        controllers.extend(module.build(cluster))
    return controllers
