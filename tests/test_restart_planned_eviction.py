"""An eviction gpuops performs (the drain's `EvictPod` through `perform()`) is reported as
planned and names the run that did it, not as the pod's last crash: simcluster over HTTP,
the real watcher, the Prefect server, the flow, the Slack fake."""

from __future__ import annotations

import asyncio
import json

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType

from gpuops.tasks.actions.kube import EvictPod
from gpuops.tasks.actions.perform import perform
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.restarts.history import load_timeline
from tests.helpers import wait_for
from tests.test_restart_diagnostics import (  # noqa: F401 - `cluster` is a fixture
    cluster,
    parents,
    pod,
    run_flow,
    save_blocks,
    text_of,
)

pytestmark = pytest.mark.timeout(300)


@flow(name="maintenance-evict")
async def evict_in_a_flow_run(kubeconfig: str, cluster_name: str, name: str, uid: str
                              ) -> str:
    from prefect.runtime import flow_run

    kube = Kube.from_kubeconfig(kubeconfig, cluster_name=cluster_name)
    await perform(EvictPod(kube, "default", name, uid, "gpu-1"), dry_run=False)
    return str(flow_run.name)


def crashed_once_on_a_hardware_xid(sim, v1, name: str) -> str:
    """A pod whose container died on Xid 79 (its `lastState`) and runs again; its uid."""
    v1.create_namespaced_pod("default", pod(name))
    wait_for(lambda: v1.read_namespaced_pod(name, "default").status.phase == "Running",
             timeout=30, message=f"{name} running")
    sim.fault("gpu-xid", f"default/{name}", xid=79, after_seconds=0.3, once=True)

    def restarted() -> bool:
        statuses = v1.read_namespaced_pod(name, "default").status.container_statuses or []
        return any(s.restart_count >= 1 and s.last_state.terminated for s in statuses)
    wait_for(restarted, timeout=60, message=f"{name} restarted after the Xid")
    return v1.read_namespaced_pod(name, "default").metadata.uid


def reports() -> list:
    async def read() -> list:
        async with get_client() as c:
            return await c.read_artifacts(limit=200, artifact_filter=ArtifactFilter(
                type=ArtifactFilterType(any_=["markdown"])))
    return asyncio.run(read())


def test_an_eviction_gpuops_performed_is_planned_and_names_its_run_not_the_old_xid(
        cluster, slack_fake):  # noqa: F811 - the fixture
    sim, v1 = cluster
    skipping = save_blocks(sim, slack_fake, sim.name)  # the default policy: planned = quiet
    posting = save_blocks(sim, slack_fake, sim.name, ignore_planned=False)
    uids = {name: crashed_once_on_a_hardware_xid(sim, v1, name)
            for name in ("drained-a", "drained-b")}
    wait_for(lambda: run_flow(skipping).get("posted", 0) >= 2, timeout=60, interval=1,
             message="the two Xid restarts reported")
    xid_parents = len(parents(slack_fake))

    def evict(name: str) -> str:
        return asyncio.run(evict_in_a_flow_run(str(sim.kubeconfig), sim.name, name,
                                               uids[name]))

    def handled(blocks: dict, name: str) -> list:
        run_flow(blocks)
        timeline = asyncio.run(load_timeline(f"{sim.name}/default/Pod/{name}"))
        return [r for r in timeline.rows if "pod-failed" in r.identity]

    # Default policy: recorded as planned, nothing posted, nobody paged.
    run_a = evict("drained-a")
    (row,) = wait_for(lambda: handled(skipping, "drained-a"), timeout=60, interval=1,
                      message="drained-a's eviction handled")
    assert row.cause == "planned-eviction"
    assert row.reported == "skipped: planned (planned-eviction)"
    assert len(parents(slack_fake)) == xid_parents
    (report,) = [a for a in reports()
                 if "· Pod/drained-a · main · planned-eviction · " in (a.description or "")]
    assert f"Planned: evicted by gpuops run {run_a} (maintenance-evict)" in str(report.data)
    assert "gpuops.io/evicted-by" in str(report.data)

    # A policy that posts planned terminations: a quiet (ℹ️) parent naming the run.
    run_b = evict("drained-b")
    (row,) = wait_for(lambda: handled(posting, "drained-b"), timeout=60, interval=1,
                      message="drained-b's eviction handled")
    assert row.reported == "posted"
    (planned,) = [m for m in parents(slack_fake) if "drained-b" in m["text"]
                  and "Planned" in m["text"]]
    header = planned["blocks"][0]["text"]["text"]
    assert header.startswith(f"ℹ️ Planned: evicted by gpuops run {run_b} "
                             "(maintenance-evict)")
    everything = json.dumps(slack_fake.messages())
    assert "Restart #" not in json.dumps(planned) and "GPU Xid" not in json.dumps(planned)
    assert "<!channel>" not in everything and "<!here>" not in everything


def test_an_eviction_a_disruption_budget_refuses_leaves_no_claim_on_the_pod(prefect_server,
                                                                            sim):
    """The pod stays, so the "evicted by gpuops" mark must not: a later eviction by someone
    else would be reported as gpuops' planned one."""
    from kubernetes import client as k8s

    from gpuops.common.errors import KubeTooManyRequests
    from tests.test_restart_diagnostics import node

    v1 = k8s.CoreV1Api(sim.api)
    v1.create_node(node("gpu-1"))
    v1.create_namespaced_pod("default", pod("guarded"))
    k8s.PolicyV1Api(sim.api).create_namespaced_pod_disruption_budget("default", {
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in
                         v1.read_namespaced_pod("guarded", "default").status.conditions or []),
             timeout=30, message="guarded ready")
    uid = v1.read_namespaced_pod("guarded", "default").metadata.uid

    @flow(name="maintenance-evict-refused")
    async def refused() -> None:
        kube = Kube(sim.api, cluster_name="sim")
        await perform(EvictPod(kube, "default", "guarded", uid, "gpu-1"), dry_run=False,
                      attempts=1)

    with pytest.raises(KubeTooManyRequests):
        asyncio.run(refused())
    guarded = v1.read_namespaced_pod("guarded", "default")
    assert not guarded.metadata.deletion_timestamp
    assert not any(k.startswith("gpuops.io/evicted") for k in guarded.metadata.annotations or {})


def test_the_eviction_mark_goes_on_that_pod_instance_only(prefect_server, sim):
    """The mark is patched with the pod's uid, which the API server takes as a
    precondition (kube-apiserver and simcluster alike): a same-named replacement (a
    StatefulSet's) is refused, never marked or evicted."""
    from kubernetes import client as k8s

    from gpuops.common.errors import KubeConflict

    v1 = k8s.CoreV1Api(sim.api)
    v1.create_namespaced_pod("default", pod("web-0"))
    old_uid = v1.read_namespaced_pod("web-0", "default").metadata.uid
    v1.delete_namespaced_pod("web-0", "default", grace_period_seconds=0)
    wait_for(lambda: not v1.list_namespaced_pod("default").items, timeout=30,
             message="web-0 gone")
    v1.create_namespaced_pod("default", pod("web-0"))
    with pytest.raises(KubeConflict, match="Precondition failed: UID"):
        EvictPod(Kube(sim.api), "default", "web-0", old_uid).apply()
    replacement = v1.read_namespaced_pod("web-0", "default")
    assert replacement.metadata.uid != old_uid
    assert not replacement.metadata.deletion_timestamp
    assert not any(k.startswith("gpuops.io/") for k in replacement.metadata.annotations or {})
