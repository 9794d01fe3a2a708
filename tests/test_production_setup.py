"""Prefect's production setup, as DESIGN.md runs it: the server on PostgreSQL with Redis
messaging. An approval-gated drain pauses, resumes and leaves its audit events there too."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from gpuops.deployments.services import Service, free_port, http_ok, spawn, wait_until_ready

pytestmark = pytest.mark.timeout(300)

PG = "postgres@127.0.0.1:5432"


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(f"postgresql://{PG}/test")
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def postgres_redis_server(tmp_path: Path):
    database = f"gpuops_test_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(f'CREATE DATABASE "{database}"'))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_DATABASE_CONNECTION_URL=f"postgresql+asyncpg://{PG}/{database}",
        PREFECT_MESSAGING_BROKER="prefect_redis.messaging",
        PREFECT_MESSAGING_CACHE="prefect_redis.messaging",
        PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE="prefect_redis.lease_storage",
        PREFECT_REDIS_MESSAGING_HOST="127.0.0.1", PREFECT_REDIS_MESSAGING_PORT="6379",
        PREFECT_SERVER_ANALYTICS_ENABLED="false")
    argv = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
            "--port", str(port)]
    process, log = spawn("prefect-pg", argv, home=tmp_path, env=env)
    wait_until_ready("prefect-pg", process, log,
                     lambda: http_ok(f"http://127.0.0.1:{port}/api/health"), timeout_s=120)
    try:
        yield f"http://127.0.0.1:{port}/api", database
    finally:
        Service("prefect-pg", "", process, log).stop()
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


def test_an_approval_gated_drain_runs_on_postgres_and_redis(postgres_redis_server, sim,
                                                            slack_fake, tmp_path: Path):
    api_url, database = postgres_redis_server
    v1 = client.CoreV1Api(sim.api)
    v1.create_node({"metadata": {"name": "gpu-1"},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    env = {**os.environ, "PREFECT_API_URL": api_url, "KUBECONFIG": str(sim.kubeconfig),
           "GPUOPS_SLACK_BASE_URL": slack_fake.base_url,
           "PREFECT_HOME": str(tmp_path / "client")}
    done = subprocess.run([sys.executable, "-m", "tests.prod_setup_scenario"], env=env, check=False,
                          capture_output=True, text=True, timeout=240,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["paused"] and outcome["state"] == "Completed", outcome
    assert v1.read_node("gpu-1").spec.unschedulable
    assert {"gpuops.approval.requested", "gpuops.approval.granted",
            "gpuops.action.cordon"} <= set(outcome["events"]), outcome
    # It really ran there: the run is a row in PostgreSQL, the events went through Redis.
    assert asyncio.run(_count_flow_runs(database)) >= 1
    import redis

    streams = [k for k in redis.Redis(host="127.0.0.1", port=6379).scan_iter(count=1000)
               if b"event" in k.lower()]
    assert streams, "no Redis stream carried the events"


async def _count_flow_runs(database: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(f"postgresql://{PG}/{database}")
    try:
        return await conn.fetchval("SELECT count(*) FROM flow_run")
    finally:
        await conn.close()
