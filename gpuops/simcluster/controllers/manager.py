"""The kube-controller-manager part of simcluster: every workload controller, sharing one index.

ReplicaSet, Deployment, StatefulSet and Job controllers, the PodDisruptionBudget status
controller and the garbage collector. They share the owner index (`ownership.py`) so that each
sync reads only its own objects; each has its own dirty queue fed by store listeners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.ownership import OwnerIndex
from .deployment import DeploymentController
from .disruption import DisruptionController
from .garbagecollector import GarbageCollector
from .job import JobController
from .replicaset import ReplicaSetController
from .statefulset import StatefulSetController

if TYPE_CHECKING:
    from ..cluster import SimCluster
    from .loop import ControllerLoop


def build(cluster: SimCluster) -> list[ControllerLoop]:
    index = OwnerIndex(cluster.store)
    return [
        ReplicaSetController(cluster, index),
        DeploymentController(cluster, index),
        StatefulSetController(cluster, index),
        JobController(cluster, index),
        DisruptionController(cluster),
        GarbageCollector(cluster, index),
    ]
