"""A restarted container's GPUs and its node's Xids from DCGM exporter series, for clusters
that record neither on the pod nor on the node (no `gpuops.io/gpu-index`, no Xid events):
the pure reading of the series, then the evidence capture against a real Prometheus scraping
simcluster's dcgm-exporter-shaped /metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from kubernetes import client

from gpuops.common.annotations import GPU_INDEX
from gpuops.deployments.services import host_port
from gpuops.sensors.evidence_capture import EvidenceCapture
from gpuops.sensors.restart_detector import DetectedRestart
from gpuops.simcluster.core.gpus import PCI_BUS_IDS, XID_ANNOTATION
from gpuops.tasks.clients.kube import Kube
from gpuops.tasks.clients.prometheus import Prometheus, RangeSeries
from gpuops.tasks.restarts.conditions import RestartFacts
from gpuops.tasks.restarts.dcgm_gpus import gpus_from_samples, xids_from_series
from tests.helpers import wait_for

T0 = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


def _labels(gpu: int, **extra: str) -> dict[str, str]:
    return {"gpu": str(gpu), "pci_bus_id": "0000" + PCI_BUS_IDS[gpu], "UUID": f"GPU-{gpu}",
            "Hostname": "gpu-1", **extra}


def test_the_containers_gpus_are_those_its_series_name_it_with() -> None:
    samples = [(_labels(3, pod="p", container="trainer"), 0.0),
               (_labels(5, pod="p", container="trainer"), 0.0),
               (_labels(6, pod="p", container="sidecar"), 0.0)]
    gpus = gpus_from_samples(samples, "trainer")
    assert [(g.index, g.pci_bus_id) for g in gpus] == [(3, "0000" + PCI_BUS_IDS[3]),
                                                        (5, "0000" + PCI_BUS_IDS[5])]
    # an exporter without the container label: every GPU of the pod
    unlabelled = [(_labels(1, pod="p"), 0.0)]
    assert [g.index for g in gpus_from_samples(unlabelled, "trainer")] == [1]


def _series(gpu: int, values: list[float]) -> RangeSeries:
    index = pd.DatetimeIndex([T0 + timedelta(minutes=i) for i in range(len(values))])
    return RangeSeries(_labels(gpu), pd.Series(values, index=index, dtype=float))


def test_an_xid_is_dated_by_the_first_sample_that_shows_it() -> None:
    xids = xids_from_series([_series(2, [0, 0, 79, 79, 79]), _series(4, [0, 0, 0, 0, 0])],
                            start=T0)
    assert [(x.xid, x.gpu, x.time) for x in xids] == [(79, 2, T0 + timedelta(minutes=2))]
    assert xids[0].pci_bus_id == "0000" + PCI_BUS_IDS[2]


def test_an_xid_already_there_when_the_look_back_starts_is_at_least_that_old() -> None:
    start = T0 - timedelta(days=1)
    [old, new] = xids_from_series([_series(1, [48, 48, 13, 13])], start=start)
    assert (old.xid, old.time) == (48, start)  # not "now": it may be a day old or more
    assert (new.xid, new.time) == (13, T0 + timedelta(minutes=2))


# --- against simcluster and a real Prometheus ------------------------------------------------

GPU = {"nvidia.com/gpu": "2"}


def _node(name: str) -> dict:
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100"}},
            "status": {"capacity": capacity, "allocatable": capacity,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str) -> dict:
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "trainer", "image": "ghcr.io/acme/train:1",
                                     "resources": {"limits": {**GPU, "memory": "8Gi"}}}]}}


def _as_a_real_cluster_shows_it(pod: dict) -> dict:
    """The pod without simcluster's scheduler record of its GPUs."""
    annotations = pod["metadata"].get("annotations") or {}
    annotations.pop(GPU_INDEX, None)
    return pod


@pytest.mark.timeout(240)
def test_capture_takes_the_gpus_and_xids_from_dcgm_when_the_cluster_records_neither(
        sim_factory, prometheus_scraping) -> None:
    sim = sim_factory("empty", speed=10)
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(_node("gpu-1"))
    v1.create_namespaced_pod("default", _pod("trainer-0"))
    wait_for(lambda: v1.read_namespaced_pod("trainer-0", "default").status.phase == "Running",
             timeout=60, message="the GPU pod running")
    kube = Kube(sim.api, cluster_name="test")
    held = [int(i) for i in kube.get_pod("default", "trainer-0")["metadata"]["annotations"][
        GPU_INDEX].split(",")]
    prometheus = Prometheus(prometheus_scraping(host_port(sim.url)))
    # more than a query step (15 s) of Xid-free samples first, so the Xid shows as a change
    wait_for(lambda: any(v >= 20 for _, v in prometheus.query(
        'count_over_time(DCGM_FI_DEV_XID_ERRORS{pod="trainer-0"}[1m])')), timeout=60,
        interval=1.0, message="20 s of the pod's GPU series in Prometheus")

    # A hardware Xid on one of the pod's GPUs; the container crashes and restarts.
    before = datetime.now(UTC)
    sim.fault("gpu-xid", "default/trainer-0", xid=79, gpu=held[1], after_seconds=0.5)
    wait_for(lambda: any(v == 79 for _, v in prometheus.query(
        'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-1"}')), timeout=30,
        message="Prometheus shows Xid 79")
    seen = datetime.now(UTC)

    def restarted() -> bool:
        statuses = v1.read_namespaced_pod("trainer-0", "default").status.container_statuses
        return bool(statuses) and statuses[0].restart_count >= 1
    wait_for(restarted, timeout=60, message="the container restarted")
    # A real cluster without node-problem-detector: no Xid event, no Xid annotation.
    v1.patch_node("gpu-1", {"metadata": {"annotations": {XID_ANNOTATION: None}}})
    for event in v1.list_namespaced_event(
            "default", field_selector="involvedObject.kind=Node").items:
        v1.delete_namespaced_event(event.metadata.name, "default")

    pod = _as_a_real_cluster_shows_it(kube.get_pod("default", "trainer-0"))
    restart = DetectedRestart(namespace="default", pod="trainer-0", pod_uid=pod["metadata"]["uid"],
                              container="trainer", kind="app", restart_count=1, missed=0)
    evidence = EvidenceCapture(kube, gpu_metrics=prometheus).capture(
        restart, pod, datetime.now(UTC).isoformat())

    assert sorted(g.pci_bus_id for g in evidence.gpus) == sorted(
        "0000" + PCI_BUS_IDS[i] for i in held)
    [xid] = [x for x in evidence.node_xids if x.xid == 79]
    assert xid.gpu == held[1] and xid.pci_bus_id == "0000" + PCI_BUS_IDS[held[1]]
    assert RestartFacts(evidence).xid_on_container_gpu(xid) is True
    # dated by the query step (15 s) in which Prometheus first saw it
    assert xid.time is not None
    assert before - timedelta(seconds=1) <= xid.time <= seen + timedelta(seconds=16)

    # Without Prometheus the same pod's evidence has neither: the Xid cannot be matched.
    bare = EvidenceCapture(kube).capture(restart, pod, datetime.now(UTC).isoformat())
    assert bare.gpus == [] and not [x for x in bare.node_xids if x.xid == 79]
