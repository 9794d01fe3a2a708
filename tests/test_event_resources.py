"""Every gpuops event names its resource the DESIGN.md way, built by common/events: one
Prefect server serving many clusters tells their objects apart by `k8s.<cluster>.`."""

from __future__ import annotations

from gpuops.common.events import flow_run_related, flow_run_resource, workload_related
from gpuops.tasks.actions.nodepools import (
    SetAsgDesiredCapacity,
    SetAsgWarmPool,
    SetNodeGroupMinSize,
)


def test_node_pool_actions_are_about_the_pool_of_their_cluster():
    actions = [SetNodeGroupMinSize(None, "eks-prod", "ng-h100", "h100", 3, cluster_name="prod"),
               SetAsgDesiredCapacity(None, "asg-h100", "h100", 3, cluster_name="prod"),
               SetAsgWarmPool(None, "asg-h100", "h100", 1, cluster_name="prod")]
    for action in actions:
        resource = action.resource()
        assert resource["prefect.resource.id"] == "k8s.prod.nodepool._.h100"
        assert resource["gpuops.cluster"] == "prod" and resource["gpuops.kind"] == "NodePool"


def test_a_pods_workload_and_its_flow_run_are_related_resources():
    assert workload_related("prod", "Deployment", "ml", "trainer") == {
        "prefect.resource.id": "k8s.prod.deployment.ml.trainer",
        "prefect.resource.role": "workload", "prefect.resource.name": "ml/trainer"}
    assert flow_run_related("1234") == {"prefect.resource.id": "prefect.flow-run.1234",
                                        "prefect.resource.role": "flow-run"}
    assert flow_run_resource("1234", **{"gpuops.approval-key": "k"}) == {
        "prefect.resource.id": "prefect.flow-run.1234", "gpuops.approval-key": "k"}
