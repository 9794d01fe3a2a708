"""Restart diagnostics: classify every reported restart and keep one Slack thread per
(cluster, workload, cause).

Triggered by `gpuops.pod.restarted` (and on a schedule, for recoveries and stragglers).
The deployment allows one run at a time and cancels newer triggered runs while one is
active: the active run drains every restart event not yet handled (a Prefect Variable holds
its cursor; each workload's timeline artifact holds the identities already handled), so a
storm is one run and Slack thread state is never written by two runs at once.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

from prefect import flow, get_run_logger
from prefect.variables import Variable

from gpuops.blocks.connections import KubernetesCluster, SlackConnection, load_block
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.tasks.restart_events import read_restart_events
from gpuops.tasks.restart_history import load_all_timelines
from gpuops.tasks.restart_reporter import RestartReporter, ensure_slack_rate_limit
from gpuops.tasks.restart_rules import default_rules, load_rules

CURSOR_VARIABLE = "gpuops-restarts-cursor"
OVERLAP = timedelta(minutes=2)  # events can arrive after a later one; identities dedupe


def _now() -> datetime:
    return datetime.now(UTC)


def _cursor_name(cluster: str) -> str:
    """Variable names allow lowercase letters, digits, dashes and underscores."""
    return f"{CURSOR_VARIABLE}-{re.sub(r'[^a-z0-9_-]+', '-', cluster.lower())}"[:255]


async def _cursor(cluster: str, default: datetime) -> datetime:
    value = await Variable.aget(_cursor_name(cluster), default=None)
    return datetime.fromisoformat(value) if value else default


@flow(name="restart-diagnostics", log_prints=True)
async def restart_diagnostics(event_id: str | None = None, cluster_block: str = "",
                              slack_block: str = "", policy_block: str = "",
                              quiet_seconds: float = 3.0, max_run_seconds: float = 600.0,
                              lookback_minutes: int = 60) -> dict:
    """Handle every restart event not yet handled; stay while more keep arriving."""
    log = get_run_logger()
    if event_id:
        log.info("triggered by event %s; handling every restart not yet handled", event_id)
    policy: RestartPolicy = await load_block(RestartPolicy, policy_block)
    rules = default_rules()
    if policy.extra_rules_yaml.strip():
        rules = load_rules(policy.extra_rules_yaml, base=rules)
    conn = await load_block(SlackConnection, slack_block)
    kube = (await load_block(KubernetesCluster, cluster_block)).kube()
    await ensure_slack_rate_limit(policy.slack_messages_per_minute)
    reporter = RestartReporter(policy, rules, conn, kube)
    started = _now()
    cursor = await _cursor(kube.cluster_name, started - timedelta(minutes=lookback_minutes))
    seen: set[str] = set()
    quiet_since = _now()
    while (_now() - started).total_seconds() < max_run_seconds:
        until = _now()
        events = [e for e in await read_restart_events(kube.cluster_name, cursor - OVERLAP,
                                                       until) if str(e.id) not in seen]
        for event in events:
            seen.add(str(event.id))
            await reporter.handle(event.payload, str(event.id))
        if events:
            cursor = max(cursor, max(e.occurred for e in events))
            await Variable.aset(_cursor_name(kube.cluster_name), cursor.isoformat(),
                                overwrite=True)
            quiet_since = _now()
        elif (_now() - quiet_since).total_seconds() >= quiet_seconds:
            break
        await asyncio.sleep(0.5)
    await reporter.check_recoveries(await load_all_timelines())
    log.info("restart diagnostics: %s", dict(reporter.counts))
    return dict(reporter.counts)
