"""Restart rendering: Slack parent/reply/recovered messages, the markdown report, timeline rows.
Slack's limits hold for any evidence, and planted secrets never come out."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.evidence import RestartEvidence, Workload
from gpuops.tasks.restarts.report import (
    FIELD_LIMIT,
    HEADER_LIMIT,
    SECTION_LIMIT,
    RestartLinks,
    SlackMessage,
    parent_blocks,
    recovered_blocks,
    reply_blocks,
    restart_markdown,
    restart_summary,
    thread_key,
    timeline_rows,
)
from tests import restart_fixtures as fx

LINKS = RestartLinks(flow_run_url="http://127.0.0.1:4200/runs/flow-run/3f2a",
                     artifact_url="http://127.0.0.1:4200/artifacts/artifact/9b1c",
                     timeline_url="http://127.0.0.1:4200/artifacts/key/restarts-trainer")


def restarts_of(make, count: int, *, minutes_apart: int = 6) -> list:
    out = []
    for i in range(count):
        ev = make().model_copy(update={
            "restart_count": 3 + i,
            "observed_at": f"2025-06-01T10:{i * minutes_apart:02d}:01Z",
            "pod_uid": "uid-1"})
        out.append((ev, diagnose(ev)))
    return out


def texts(message: SlackMessage) -> list[str]:
    """Every text Slack would show, block by block."""
    out = [message.text]
    for block in message.blocks:
        if "text" in block:
            out.append(block["text"]["text"])
        out += [f["text"] for f in block.get("fields", [])]
        out += [e["text"] for e in block.get("elements", []) if "text" in e]
    return out


def assert_within_slack_limits(message: SlackMessage) -> None:
    assert len(message.blocks) <= 50
    for block in message.blocks:
        if block["type"] == "header":
            assert len(block["text"]["text"]) <= HEADER_LIMIT
        if block["type"] == "section":
            if "text" in block:
                assert len(block["text"]["text"]) <= SECTION_LIMIT
            assert len(block.get("fields", [])) <= 10
            for f in block.get("fields", []):
                assert len(f["text"]) <= FIELD_LIMIT
        if block["type"] == "context":
            assert len(block["elements"]) <= 10
    for text in texts(message):
        assert text.count("```") % 2 == 0, "code blocks are closed"


# --- the parent message ----------------------------------------------------------------------

def test_parent_message_names_cause_workload_container_node_image_and_links():
    restarts = restarts_of(fx.oom_killed_limit, 6)
    message = parent_blocks(restarts, links=LINKS)
    header = message.blocks[0]
    assert header["type"] == "header"
    assert "OOMKilled: container memory limit reached" in header["text"]["text"]
    assert "Deployment/trainer" in header["text"]["text"]
    body = "\n".join(texts(message))
    assert "`oom-killed-limit`" in body
    assert "`trainer` (app)" in body
    assert "`gpu-node-a1`" in body
    assert "ghcr.io/acme/trainer:1.4.2" in body
    assert "*Event*\nRestart #8" in body
    assert "6× in 30 min, same cause" in body
    assert "lastState.terminated.reason=OOMKilled exitCode=137" in body
    # The restart's own report, not the (standing) run that handled hundreds of restarts.
    assert "<http://127.0.0.1:4200/artifacts/artifact/9b1c|Restart report>" in body
    assert "<http://127.0.0.1:4200/artifacts/key/restarts-trainer|Restart timeline>" in body
    assert "Prefect flow run" not in body
    assert "OOMKilled" in message.text and "Deployment/trainer" in message.text
    assert_within_slack_limits(message)


def test_parent_message_shows_the_last_20_log_lines_of_the_latest_restart():
    ev = fx.evidence(previous_log="\n".join(f"line {i}" for i in range(100)))
    message = parent_blocks([(ev, diagnose(ev))])
    log_block = next(t for t in texts(message) if "log lines" in t)
    assert "line 99" in log_block and "line 80" in log_block
    assert "line 79" not in log_block


def test_parent_counts_restarts_not_passed_in_and_says_when_it_is_the_first():
    restarts = restarts_of(fx.cuda_oom, 2, minutes_apart=15)
    assert restart_summary(restarts, total_restarts=5,
                           first_seen="2025-06-01T09:15:01Z") == "5× in 60 min, same cause"
    assert restart_summary(restarts[:1]) == "first restart with this cause"


def test_an_init_container_is_reported_as_one():
    ev = fx.app_error().model_copy(update={"container": "fetch-weights",
                                           "container_kind": "init"})
    body = "\n".join(texts(parent_blocks([(ev, diagnose(ev))])))
    assert "`fetch-weights` (init)" in body


def test_a_planned_termination_is_not_flagged_red():
    ev = fx.rollout_termination()
    message = parent_blocks([(ev, diagnose(ev))])
    assert not message.blocks[0]["text"]["text"].startswith("🔴")


def test_parent_without_a_previous_log_says_why():
    ev = fx.evidence(previous_log="", log_error="previous terminated container not found")
    body = "\n".join(texts(parent_blocks([(ev, diagnose(ev))])))
    assert "No previous log: previous terminated container not found" in body


def test_parent_needs_at_least_one_restart():
    with pytest.raises(ValueError, match="at least one"):
        parent_blocks([])


# --- Slack limits ------------------------------------------------------------------------------

def huge_evidence() -> RestartEvidence:
    long = "x" * 5000
    ev = fx.cuda_oom()
    return ev.model_copy(update={
        "image": "registry.example.com/" + "a" * 3000 + ":1",
        "previous_log": "\n".join([f"{i} {long}" for i in range(50)] + [fx.CUDA_OOM_LINE * 8]),
        "pod_events": [fx.event("Unhealthy", "Liveness probe failed: " + long)] * 3,
    })


def test_every_block_respects_slacks_caps_whatever_the_evidence():
    ev = huge_evidence()
    dx = diagnose(ev).model_copy(update={
        "evidence_lines": ["y" * 2900 for _ in range(12)], "explanation": "z" * 5000,
        "title": "t" * 400})
    for message in (parent_blocks([(ev, dx)] * 3, links=LINKS), reply_blocks([(ev, dx)], links=LINKS)):
        assert_within_slack_limits(message)


def test_a_cut_log_keeps_its_last_line_and_says_what_was_left_out():
    ev = fx.evidence(previous_log="\n".join(f"{i:03d} " + "w" * 280 for i in range(40))
                     + "\nfinal words")
    log_block = next(t for t in texts(parent_blocks([(ev, diagnose(ev))])) if "log lines" in t)
    assert log_block.rstrip("`").endswith("final words")
    assert "earlier lines not shown" in log_block
    assert len(log_block) <= SECTION_LIMIT


def test_log_text_cannot_ping_the_channel_or_break_the_code_block():
    ev = fx.evidence(previous_log="<!channel> deploy & pray\n```closing fence\n<@U123> hi")
    body = "\n".join(texts(parent_blocks([(ev, diagnose(ev))])))
    assert "<!channel>" not in body and "<@U123>" not in body
    assert "&lt;!channel&gt; deploy &amp; pray" in body
    assert "```closing" not in body


# --- replies -------------------------------------------------------------------------------

def test_a_reply_is_short_with_restart_count_evidence_and_a_log_tail():
    ev = fx.evidence(restart_count=9, previous_log="\n".join(f"step {i}" for i in range(50)))
    message = reply_blocks([(ev, diagnose(ev))], links=LINKS)
    body = "\n".join(texts(message))
    assert "*Restart #9*" in body
    assert "<!date^" in body and "2025-06-01 10:00:01 UTC" in body
    assert "`trainer-6d9c7b5f4-x2k8p/trainer` (app)" in body
    assert "step 49" in body and "step 41" not in body  # 8 lines by default
    assert len(message.blocks) <= 5
    assert_within_slack_limits(message)


def test_one_reply_carries_a_whole_batch_of_restarts_newest_last():
    batch = [fx.evidence(restart_count=n, observed_at=f"2025-06-01T10:{n:02d}:00Z",
                         previous_log=f"attempt {n} failed") for n in range(1, 16)]
    message = reply_blocks([(ev, diagnose(ev)) for ev in reversed(batch)], links=LINKS)
    body = "\n".join(texts(message))
    listed = re.findall(r"\*Restart #(\d+)\*", body)
    assert listed == [str(n) for n in range(4, 16)]  # the newest 12, oldest first
    assert "3 earlier restarts" in body
    assert "attempt 15 failed" in body and "attempt 14 failed" not in body  # latest's log
    assert message.text.startswith("15 restarts, latest Restart #15 of trainer-")
    assert_within_slack_limits(message)


def test_an_eviction_is_not_called_a_restart_nor_given_the_old_crash_as_its_exit():
    ev = fx.evicted_by_api_after_an_old_xid()
    reply = "\n".join(texts(reply_blocks([(ev, diagnose(ev))])))
    parent = "\n".join(texts(parent_blocks([(ev, diagnose(ev))])))
    for body in (reply, parent):
        assert "Restart #7" not in body and "GPU Xid" not in body
        assert "Evicted (Eviction API)" in body
        assert "none (the container was still running)" in body  # not lastState's exit 1


def test_a_planned_eviction_by_gpuops_is_quiet_and_names_the_run():
    ev = fx.evicted_by_api_after_an_old_xid(pod_annotations={
        "gpuops.io/evicted-by": "3c1e9b7a", "gpuops.io/evicted-by-run": "brave-otter",
        "gpuops.io/evicted-by-flow": "drain-node"})
    message = parent_blocks([(ev, diagnose(ev))])
    header = message.blocks[0]["text"]["text"]
    assert header.startswith("ℹ️ Planned: evicted by gpuops run brave-otter (drain-node)")
    assert "<!channel>" not in json.dumps(message.blocks) and "<!here>" not in message.text


def test_a_failed_job_pod_says_it_was_not_restarted_and_shows_its_own_log():
    ev = fx.job_pod_failed(fx.log_with(fx.CUDA_OOM_LINE), 1)
    body = "\n".join(texts(parent_blocks([(ev, diagnose(ev))])))
    assert "*Event*\nFailed, not restarted" in body
    assert "the instance that ended" in body and "CUDA out of memory" in body
    assert "Job/finetune-llama" in body


def test_a_jobs_failure_says_which_limit_it_reached_after_how_many_pods():
    from gpuops.tasks.restarts.evidence import JobFailure
    from gpuops.tasks.restarts.report import job_failure_blocks, job_failure_summary

    failure = JobFailure(cluster="prod-gpu", namespace="ml", name="finetune-llama",
                         uid="job-1", reason="BackoffLimitExceeded",
                         message="Job has reached the specified backoff limit", failed_pods=3,
                         backoff_limit=2, started_at="2025-06-01T09:00:00Z",
                         failed_at="2025-06-01T09:42:00Z", observed_at="2025-06-01T09:42:01Z")
    assert job_failure_summary(failure) == \
        "Job failed: backoffLimit (2) reached after 3 failed pods"
    deadline = failure.model_copy(update={"reason": "DeadlineExceeded", "failed_pods": 0,
                                          "active_deadline_seconds": 3600})
    assert job_failure_summary(deadline) == "Job failed: activeDeadlineSeconds (3600 s) passed"
    reply = job_failure_blocks(failure, in_thread=True, links=LINKS)
    assert reply.blocks[0]["type"] == "section", "a reply has no header"
    assert "after running 42 min" in reply.blocks[0]["text"]["text"]
    parent = job_failure_blocks(deadline, in_thread=False)
    assert parent.blocks[0]["text"]["text"].startswith("🔴 Job failed: activeDeadlineSeconds")
    assert_within_slack_limits(parent)


def test_a_report_is_titled_by_time_workload_container_cause_and_exit():
    from gpuops.tasks.restarts.report import report_title

    ev = fx.job_pod_failed(fx.log_with(fx.CUDA_OOM_LINE), 1)
    assert report_title(ev, diagnose(ev)) == (
        "2025-06-01 10:00:01 UTC · Job/finetune-llama · trainer · cuda-oom · "
        "exit 1 (Error), general application error")


def test_recovered_reply_says_how_long_the_workload_has_been_ready():
    message = recovered_blocks(cluster="prod-gpu", workload=Workload(
        kind="Deployment", name="llama-8b", namespace="ml"), ready_minutes=10, restarts=5)
    assert "Recovered" in message.text
    body = "\n".join(texts(message))
    assert "Deployment/llama-8b" in body and "Ready for 10 min" in body
    assert "after 5 restarts" in body


def test_thread_key_is_cluster_workload_and_cause():
    ev = fx.cuda_oom()
    assert thread_key(ev, diagnose(ev)) == "prod-gpu/ml/Deployment/trainer/cuda-oom"


# --- artifacts ---------------------------------------------------------------------------------

def test_the_markdown_report_has_everything_captured():
    ev = fx.gpu_xid(79, "unspecified launch failure").model_copy(update={
        "previous_log": "\n".join(f"log {i}" for i in range(300))})
    md = restart_markdown(ev, diagnose(ev), LINKS)
    # Time, workload and container first, then what happened, cause and exit.
    assert md.startswith("# 2025-06-01 10:00:01 UTC · Deployment/trainer · trainer: GPU Xid 79 "
                         "on gpu-node-a1: hardware or driver fault\n\n**Restart #3** · **cause** "
                         "`gpu-xid-hardware` · **exit** 1 (Error), general application error")
    for heading in ("## Evidence", "## Restart", "## Container state", "## Pod events",
                    "## Node events", "## Node conditions (gpu-node-a1)",
                    "## GPU Xids on the node", "## Previous log: last 200 of 300 lines",
                    "## Links"):
        assert heading in md, heading
    assert "| lastState.terminated.exitCode | 1 |" in md
    assert "| 2025-06-01T09:59:58Z | 79 | 3 |" in md
    assert "log 299" in md and "log 100" in md and "log 99\n" not in md
    assert "[Prefect flow run](http://127.0.0.1:4200/runs/flow-run/3f2a)" in md


def test_the_markdown_report_lists_alternatives_and_survives_backticks_and_pipes():
    ev = fx.liveness_kill().model_copy(update={
        "previous_log": "```\nshell | grep x\n````"})
    md = restart_markdown(ev, diagnose(ev))
    assert "## Other possible causes" in md and "| app-error | 0.50 |" in md
    assert "`````text" in md, "the fence is longer than any backtick run in the log"


def test_timeline_rows_are_ordered_and_carry_the_slack_link():
    restarts = list(reversed(restarts_of(fx.liveness_kill, 3)))
    first = min(restarts, key=lambda r: r[0].restart_count)[0]
    rows = timeline_rows(restarts, slack_links={first.identity: "https://slack/p1"})
    assert [r["restartCount"] for r in rows] == [3, 4, 5]
    assert rows[0] == {
        "time": "2025-06-01T10:00:01Z", "pod": "llama-8b-5f7d9c-q7wzt",
        "container": "vllm (app)", "restartCount": 3, "cause": "liveness-probe",
        "confidence": 0.94, "node": "gpu-node-a1", "exit": "137 (Error), killed (SIGKILL)",
        "event": "Restart #3", "slack": "https://slack/p1"}
    assert list(rows[0])[:4] == ["time", "container", "cause", "exit"]
    assert rows[1]["slack"] == ""


# --- secrets -----------------------------------------------------------------------------------

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVP"
SECRETS = ["AKIAIOSFODNN7EXAMPLE", JWT,
           "abcdef0123456789bearer", "hunter2pass", "sup3r-s3cret!", "s3cr3t-env-value-42"]
PLANTED_LOG = "\n".join([
    *fx.TRAINING_LOG,
    "DEBUG boto: using access key AKIAIOSFODNN7EXAMPLE for s3://weights",
    f"DEBUG http: Authorization: Bearer {JWT}",
    "DEBUG http: headers={'authorization': 'Bearer abcdef0123456789bearer'}",
    "INFO connecting to postgres://trainer:hunter2pass@db.internal:5432/runs",
    "WARNING config: password=sup3r-s3cret! (from env)",
    "INFO MODEL_TOKEN is s3cr3t-env-value-42",
    *fx.traceback("/app/db.py|3|connect|engine.connect()",
                  last="OperationalError: could not connect to "
                       "postgres://trainer:hunter2pass@db.internal:5432/runs"),
])


def planted() -> RestartEvidence:
    return fx.app_error(1, log=PLANTED_LOG).model_copy(update={
        "pod_events": [fx.event("Unhealthy", "Liveness probe failed: Get http://u:hunter2pass@"
                                "10.0.0.1/health with password=sup3r-s3cret!")],
        "last_state": fx.terminated(1, message="fatal: token AKIAIOSFODNN7EXAMPLE rejected"),
    })


def rendered_everything(known: list[str]) -> str:
    ev = planted()
    dx = diagnose(ev)
    outputs: list[Any] = [
        parent_blocks([(ev, dx)], links=LINKS, known_secrets=known),
        reply_blocks([(ev, dx)], links=LINKS, known_secrets=known),
        restart_markdown(ev, dx, LINKS, known_secrets=known),
        timeline_rows([(ev, dx)], known_secrets=known),
        dx.model_dump(),
    ]
    return json.dumps([o.__dict__ if isinstance(o, SlackMessage) else o for o in outputs],
                      ensure_ascii=False)


def test_planted_secrets_never_appear_in_any_rendered_output():
    out = rendered_everything(known=["s3cr3t-env-value-42"])
    for secret in SECRETS:
        assert secret not in out, secret
    assert "[REDACTED]" in out
    assert "could not connect to postgres://trainer:[REDACTED]@db.internal" in out


def test_secrets_are_masked_by_shape_even_without_known_values():
    out = rendered_everything(known=[])
    for secret in SECRETS[:-1]:  # the last one is only recognisable by its value
        assert secret not in out, secret
