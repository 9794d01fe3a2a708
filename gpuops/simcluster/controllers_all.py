"""Every simulated control-plane and node component, built for one SimCluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cluster import Controller, SimCluster


def build_controllers(cluster: SimCluster) -> list[Controller]:
    from .cloud import nodepools
    from .controllers import manager as workloads
    from .kubelet import kubelet
    from .metrics import engine as metrics
    from .scheduler import scheduler

    controllers: list[Controller] = []
    for module in (scheduler, kubelet, workloads, nodepools, metrics):
        controllers.extend(module.build(cluster))
    return controllers
