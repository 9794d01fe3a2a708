"""Secrets a pod prints in its log never leave gpuops: simcluster pods whose previous log
prints (a) a literal env value, (b) values from Secrets (`secretKeyRef`, `envFrom`), (c)
credentials recognisable only by shape, crash and restart; the real watcher reports them to a
real Prefect server and the restart-diagnostics flow posts them to the Slack fake. No value is
in the stored event payloads, the watcher's log, Slack or the report artifacts."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import string
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType

from gpuops.bench.credential_corpus import credentials
from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.flows.restart_diagnostics import restart_diagnostics
from gpuops.sensors.cluster_watcher import ClusterWatcher
from gpuops.sensors.pod_secrets import PodSecretReader, referenced_secrets
from gpuops.tasks.clients.kube import Kube
from tests.helpers import stored_events, wait_for

pytestmark = pytest.mark.timeout(300)

NS = "default"
CRASH = {"sim.gpuops.io/run-seconds": "1", "sim.gpuops.io/exit-code": "1"}
SHAPE_FORMATS = ("django-settings-dump", "mysql-cli", "openai-project-key-dict",
                 "azure-storage-connection-string", "slack-bot-token-dict", ("pem-openssh-"
                 "private-key"), "kubeconfig-sa-token", "pip-extra-index-url")


def plain_value(rng: random.Random, label: str) -> str:
    """A value with no secret shape at all: only knowing it can mask it."""
    return label + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(20))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def node() -> dict:
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {"metadata": {"name": "gpu-1"}, "status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True"}]}}


def crashing_pod(name: str, args: list[str], **container: object) -> dict:
    return {"metadata": {"name": name, "annotations": CRASH}, "spec": {
        "nodeName": "gpu-1", "containers": [{"name": "app", "image": "ghcr.io/acme/api:1.4.2",
                                             "command": ["/app/serve"], "args": args,
                                             **container}]}}


def stored_restart_events(since: datetime, cluster: str) -> list:
    return [e for e in stored_events("gpuops.pod.restarted", since)
            if e.payload.get("cluster") == cluster]


def artifacts_text() -> str:
    async def read() -> str:
        async with get_client() as c:
            arts = await c.read_artifacts(limit=200, artifact_filter=ArtifactFilter(
                type=ArtifactFilterType(any_=["markdown", "table"])))
        return "\n".join(str(a.data) for a in arts)
    return asyncio.run(read())


def save_blocks(sim, slack_fake, cluster: str) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    names = {"cluster_block": f"c-{suffix}", "slack_block": f"s-{suffix}",
             "policy_block": f"p-{suffix}"}

    async def save() -> None:
        await KubernetesCluster(cluster_name=cluster, kubeconfig_path=str(sim.kubeconfig)).save(
            names["cluster_block"])
        await SlackConnection(bot_token="xoxb-t", signing_secret="s",
                              base_url=slack_fake.base_url).save(names["slack_block"])
        await RestartPolicy(default_channel="#alerts").save(names["policy_block"])
    asyncio.run(save())
    return names


def test_no_value_a_pod_prints_reaches_events_logs_slack_or_artifacts(
        prefect_server, sim_factory, slack_fake, tmp_path: Path, caplog):
    caplog.set_level(logging.DEBUG)
    rng = random.Random(f"e2e:{uuid.uuid4()}")
    literal, from_key, from_env_from = (plain_value(rng, p) for p in ("lit", "key", "all"))
    config_value = plain_value(rng, "cfg")  # a ConfigMap value: configuration, kept
    shaped = [c for c in credentials(seed=rng.randint(0, 10**6))
              if c.format.name in SHAPE_FORMATS]
    cluster = f"sim-{uuid.uuid4().hex[:8]}"
    since = datetime.now(UTC)
    sim = sim_factory("empty", speed=10)
    v1 = client.CoreV1Api(sim.api)
    v1.create_node(node())
    v1.create_namespaced_secret(NS, {"metadata": {"name": "db"}, "data": {
        "password": b64(from_key), "unused": b64("never-in-this-pod-env")}})
    # `echo ... | base64` leaves a newline in the Secret; the log prints the value without it
    v1.create_namespaced_secret(NS, {"metadata": {"name": "api"}, "data": {
        "API_TOKEN": b64(from_env_from + "\n")}})
    v1.create_namespaced_config_map(NS, {"metadata": {"name": "cfg"},
                                         "data": {"mode": config_value}})
    v1.create_namespaced_pod(NS, crashing_pod(
        "literal", ["--opt", "$(OPT)"], env=[{"name": "OPT", "value": literal}]))
    v1.create_namespaced_pod(NS, crashing_pod(
        "from-secret", ["--key", "$(DB_PASSWORD)", "--all", "$(API_TOKEN)", "--mode",
                        "$(MODE)"],
        env=[{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db",
                                                                    "key": "password"}}},
             {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg",
                                                                "key": "mode"}}}],
        envFrom=[{"secretRef": {"name": "api"}}]))
    v1.create_namespaced_pod(NS, crashing_pod("log-only", [c.line for c in shaped]))
    pods = {"literal", "from-secret", "log-only"}

    blocks = save_blocks(sim, slack_fake, cluster)
    watcher = ClusterWatcher(Kube(sim.api, cluster_name=cluster),
                             state_file=tmp_path / "reported.json").start()
    try:
        wait_for(lambda: {e.payload["pod"] for e in stored_restart_events(since, cluster)
                          if e.payload["previous_log"]} >= pods,
                 timeout=120, interval=1, message="a restart with its log for every pod")
    finally:
        watcher.stop()
    events = stored_restart_events(since, cluster)
    payloads = json.dumps([e.payload for e in events])
    # the evidence is there (the command line was captured), the values are not
    assert "/app/serve --key [REDACTED] --all [REDACTED] --mode " + config_value in payloads
    for value in (literal, from_key, from_env_from):
        assert value not in payloads
        assert value not in caplog.text
    for credential in shaped:
        assert not credential.leaked_in(payloads), credential.format.name

    counts = asyncio.run(restart_diagnostics(**blocks, quiet_seconds=1.0))
    assert counts.get("posted", 0) >= len(pods)
    posted = json.dumps(slack_fake.messages()) + artifacts_text()
    assert "from-secret" in posted
    for value in (literal, from_key, from_env_from):
        assert value not in posted
    for credential in shaped:
        assert not credential.leaked_in(posted), credential.format.name


def test_a_storm_of_pods_sharing_a_secret_reads_it_once_and_a_missing_one_is_named_only(
        sim, caplog):
    v1 = client.CoreV1Api(sim.api)
    v1.create_namespaced_secret(NS, {"metadata": {"name": "shared"}, "data": {
        "token": b64("shared-value-1234")}})
    now = [0.0]
    reader = PodSecretReader(Kube(sim.api), ttl_s=60, clock=lambda: now[0])

    def pod(i: int, secret: str = "shared") -> dict:
        return {"metadata": {"name": f"p{i}", "namespace": NS}, "spec": {"containers": [{
            "name": "app", "envFrom": [{"secretRef": {"name": secret}}]}]}}
    for i in range(400):
        assert "shared-value-1234" in reader.values_for(pod(i))
    assert reader.stats.reads == 1
    now[0] = 61  # past the TTL: read again (a rotated Secret is seen within a minute)
    reader.values_for(pod(0))
    assert reader.stats.reads == 2

    with caplog.at_level(logging.WARNING, logger="gpuops.sensors.pod_secrets"):
        assert reader.values_for(pod(1, "gone")) == []
        reader.values_for(pod(2, "gone"))
    assert reader.stats.unreadable == 1
    assert [r.getMessage() for r in caplog.records] == [
        "Secret default/gone is unreadable (HTTP 404): its values are redacted by shape only"]


def test_a_pod_sees_only_the_keys_it_references_and_configmaps_are_not_read():
    pod = {"spec": {
        "containers": [{"env": [
            {"name": "A", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}],
            "envFrom": [{"secretRef": {"name": "api"}}, {"configMapRef": {"name": "cfg"}}]}],
        "initContainers": [{"env": [{"name": "C", "valueFrom": {"secretKeyRef": {
            "name": "db", "key": "user"}}}]}],
        "volumes": [{"name": "tls", "secret": {"secretName": "tls", "items": [
            {"key": "tls.key", "path": "k"}]}},
            {"name": "p", "projected": {"sources": [{"secret": {"name": "bundle"}},
                                                    {"serviceAccountToken": {"path": "t"}}]}},
            {"name": "c", "configMap": {"name": "cfg"}}]}}
    refs = {r.name: r.keys for r in referenced_secrets(pod)}
    assert refs == {"db": frozenset({"password", "user"}), "api": None,
                    "tls": frozenset({"tls.key"}), "bundle": None}


def test_the_setting_turns_secret_reading_off(monkeypatch):
    monkeypatch.setenv("GPUOPS_WATCHER_READ_POD_SECRETS", "false")
    assert ClusterWatcher(Kube(client.ApiClient())).secrets is None
    monkeypatch.delenv("GPUOPS_WATCHER_READ_POD_SECRETS")
    assert ClusterWatcher(Kube(client.ApiClient())).secrets is not None


def test_a_secret_value_in_a_watcher_log_line_or_traceback_is_masked(sim, caplog):
    from gpuops.sensors.pod_secrets import redact_watcher_logs

    v1 = client.CoreV1Api(sim.api)
    v1.create_namespaced_secret(NS, {"metadata": {"name": "db"}, "data": {
        "password": b64("zQ7wlog-line-value")}})
    reader = PodSecretReader(Kube(sim.api))
    reader.values_for({"metadata": {"namespace": NS}, "spec": {"containers": [{"envFrom": [
        {"secretRef": {"name": "db"}}]}]}})
    redact_watcher_logs()
    log = logging.getLogger("gpuops.sensors.watcher")
    with caplog.at_level(logging.INFO, logger="gpuops.sensors.watcher"):
        log.info("could not parse %s", "dsn with zQ7wlog-line-value inside")
        try:
            raise ValueError("bad value zQ7wlog-line-value; password=hunter2-x")
        except ValueError:
            log.exception("could not report restart %s", "uid/app/3")
    text = caplog.text
    assert "could not parse dsn with [REDACTED] inside" in text
    assert "ValueError: bad value [REDACTED]" in text and "Traceback" in text
    assert "zQ7wlog-line-value" not in text and "hunter2-x" not in text
