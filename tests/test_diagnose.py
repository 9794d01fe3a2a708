"""Restart diagnosis: each cause classified from realistic evidence, with the exact lines behind it;
rule files validated with field and line; the rule registry refuses duplicates."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuops.common.errors import ConfigError
from gpuops.tasks.restarts import conditions as restart_conditions
from gpuops.tasks.restarts.conditions import EVALUATORS, condition
from gpuops.tasks.restarts.diagnose import (
    Diagnosis,
    default_rules,
    diagnose,
    exit_meaning,
    load_rules,
)
from gpuops.tasks.restarts.evidence import ContainerState, TerminatedState
from gpuops.tasks.restarts.rules import CONDITION_KEYS
from tests import restart_fixtures as fx

BRIEF_CAUSES = {
    "oom-killed-limit", "oom-killed-node-pressure", "liveness-probe", "startup-probe",
    "cuda-oom", "nccl-error", "gpu-xid-application", "gpu-xid-hardware", "evicted",
    "preempted", "node-not-ready", "node-shutdown", "image-pull", "config-error", "app-error",
    "rollout-termination", "completed",
}


def has_line(diagnosis: Diagnosis, text: str) -> bool:
    return any(text in line for line in diagnosis.evidence_lines)


# --- one case per cause ----------------------------------------------------------------------

CASES = [
    (fx.oom_killed_limit, "oom-killed-limit",
     ["lastState.terminated.reason=OOMKilled exitCode=137", "limits.memory=64Gi"]),
    (fx.oom_killed_node_pressure, "oom-killed-node-pressure",
     ["lastState.terminated.reason=OOMKilled exitCode=137",
      "node condition MemoryPressure=True reason=KubeletHasInsufficientMemory",
      "node event SystemOOM: System OOM encountered, victim process: python, pid: 41321"]),
    (fx.evicted_under_memory_pressure, "oom-killed-node-pressure",
     ["pod status.phase=Failed reason=Evicted", "node condition MemoryPressure=True"]),
    (fx.liveness_kill, "liveness-probe",
     ["lastState.terminated.reason=Error exitCode=137",
      "pod event Killing: Container vllm failed liveness probe, will be restarted",
      'pod event Unhealthy (×3): Liveness probe failed: Get "http://10.42.3.17:8000/health"']),
    (fx.startup_kill, "startup-probe",
     ["pod event Killing: Container vllm failed startup probe, will be restarted",
      "Startup probe failed: HTTP probe failed with statuscode: 503"]),
    (fx.cuda_oom, "cuda-oom", [fx.CUDA_OOM_LINE, "lastState.terminated.reason=Error exitCode=1"]),
    (fx.nccl_timeout, "nccl-error", [fx.NCCL_LINE, "exitCode=134"]),
    (lambda: fx.gpu_xid(79, "unspecified launch failure"), "gpu-xid-hardware",
     ["node Xid 79 on GPU 3 at 2025-06-01T09:59:58Z: Xid 79: GPU has fallen off the bus",
      "RuntimeError: CUDA error: unspecified launch failure"]),
    (lambda: fx.gpu_xid(13, "an illegal instruction was encountered"), "gpu-xid-application",
     ["node Xid 13 on GPU 3", "RuntimeError: CUDA error: an illegal instruction was encountered"]),
    (fx.evicted, "evicted",
     [("pod status.phase=Failed reason=Evicted message=\"The node was low on resource: "
      "ephemeral-storage."), "pod event Evicted: The node was low on resource"]),
    (fx.preempted, "preempted",
     ["pod event Preempted: Preempted by pod 8a1bc2d4",
      "pod condition DisruptionTarget=True reason=PreemptionByScheduler"]),
    (fx.node_not_ready, "node-not-ready",
     [("node condition Ready=Unknown reason=NodeStatusUnknown: Kubelet stopped posting node "
      "status."), "pod event NodeNotReady: Node is not ready"]),
    (fx.node_shutdown, "node-shutdown",
     ['message="Pod was terminated in response to imminent node shutdown."']),
    (fx.image_pull, "image-pull",
     ["state.waiting.reason=ErrImagePull", ('pod event Failed: Failed to pull image '
      '"ghcr.io/acme/trainer:1.5.0"')]),
    (fx.config_missing_configmap, "config-error",
     ["state.waiting.reason=CreateContainerConfigError", 'configmap "trainer-config" not found']),
    (fx.config_key_error_at_start, "config-error", ["KeyError: 'MODEL_NAME'", "ran 1 s"]),
    (fx.app_error, "app-error",
     ["lastState.terminated.reason=Error exitCode=1",
      "ConnectionRefusedError: [Errno 111] Connection refused"]),
    (fx.rollout_termination, "rollout-termination",
     ["exitCode=143", "pod is being deleted", "Deployment/trainer is rolling out"]),
    (fx.completed, "completed", ["lastState.terminated.reason=Completed exitCode=0"]),
]


@pytest.mark.parametrize(("make", "cause", "lines"), CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_each_cause_is_classified_with_its_evidence_lines(make, cause, lines):
    diagnosis = diagnose(make())
    assert diagnosis.cause == cause, diagnosis
    for line in lines:
        assert has_line(diagnosis, line), (line, diagnosis.evidence_lines)
    assert 0 < diagnosis.confidence <= 1
    assert diagnosis.title and diagnosis.explanation and diagnosis.rule_id
    assert "{" not in diagnosis.title, "every placeholder in a title is filled"


def test_the_shipped_rules_cover_every_cause_of_the_brief():
    assert BRIEF_CAUSES <= set(default_rules().causes())


def test_a_cuda_oom_line_is_cited_exactly_as_logged():
    diagnosis = diagnose(fx.cuda_oom())
    assert fx.CUDA_OOM_LINE in diagnosis.evidence_lines


# --- 137 disambiguation -------------------------------------------------------------------------

def test_exit_137_without_oomkilled_next_to_a_liveness_failure_is_the_probe_not_oom():
    diagnosis = diagnose(fx.liveness_kill())
    assert diagnosis.cause == "liveness-probe"
    assert not diagnosis.cause.startswith("oom")
    assert all(not cause.startswith("oom") for cause, _ in diagnosis.alternatives)
    assert "not OOMKilled" in diagnosis.explanation


def test_exit_137_with_oomkilled_is_the_memory_limit():
    diagnosis = diagnose(fx.oom_killed_limit())
    assert diagnosis.cause == "oom-killed-limit"
    assert "64Gi" in diagnosis.explanation


def test_exit_137_with_neither_oomkilled_nor_a_probe_failure_is_an_external_kill():
    diagnosis = diagnose(fx.app_error(137, log=""))
    assert (diagnosis.cause, diagnosis.rule_id) == ("app-error", "app-error-sigkill")
    assert "SIGKILL" in diagnosis.title


def test_oomkilled_wins_over_liveness_events_because_the_kernel_said_so():
    ev = fx.liveness_kill().model_copy(update={"last_state": fx.terminated(137, "OOMKilled"),
                                               "limits": {"memory": "24Gi"}})
    assert diagnose(ev).cause == "oom-killed-limit"


def test_oomkilled_with_node_memory_pressure_is_node_pressure_with_the_limit_as_alternative():
    diagnosis = diagnose(fx.oom_killed_node_pressure())
    assert diagnosis.cause == "oom-killed-node-pressure"
    assert "oom-killed-limit" in dict(diagnosis.alternatives)


def test_oomkilled_without_any_memory_limit_is_node_memory_not_a_limit():
    ev = fx.oom_killed_limit().model_copy(update={"limits": {"nvidia.com/gpu": "8"}})
    assert diagnose(ev).cause == "oom-killed-node-pressure"


def test_a_liveness_kill_of_another_container_in_the_pod_is_not_this_containers_evidence():
    ev = fx.liveness_kill()
    other = [e.model_copy(update={"field_path": "spec.containers{proxy}",
                                  "message": e.message.replace("vllm", "proxy")})
             for e in ev.pod_events]
    diagnosis = diagnose(ev.model_copy(update={"pod_events": other}))
    assert diagnosis.cause == "app-error"
    assert diagnosis.rule_id == "app-error-sigkill"


def test_probe_failures_an_hour_before_the_kill_do_not_explain_it():
    ev = fx.liveness_kill()
    old = [e.model_copy(update={"last_seen": "2025-06-01T08:55:00Z"}) for e in ev.pod_events]
    assert diagnose(ev.model_copy(update={"pod_events": old})).cause == "app-error"


# --- GPU Xids --------------------------------------------------------------------------------

def test_xid_79_is_hardware_and_advises_cordoning_the_node():
    diagnosis = diagnose(fx.gpu_xid(79, "unspecified launch failure"))
    assert diagnosis.cause == "gpu-xid-hardware"
    assert "79" in diagnosis.title and "gpu-node-a1" in diagnosis.title
    assert "cordon" in diagnosis.explanation


def test_xid_13_is_the_application():
    diagnosis = diagnose(fx.gpu_xid(13, "an illegal instruction was encountered"))
    assert diagnosis.cause == "gpu-xid-application"
    assert "Xid 13" in diagnosis.title


def test_an_old_xid_does_not_explain_an_unrelated_crash_hours_later():
    ev = fx.gpu_xid(79, "unspecified launch failure", time="2025-06-01T06:00:00Z")
    assert diagnose(ev).cause == "app-error"


def test_a_gpu_still_missing_after_a_hardware_xid_earlier_that_day_is_hardware():
    ev = fx.gpu_xid(79, "no CUDA-capable device is detected", time="2025-06-01T06:00:00Z")
    diagnosis = diagnose(ev)
    assert (diagnosis.cause, diagnosis.rule_id) == ("gpu-xid-hardware", "gpu-lost-after-xid")
    assert has_line(diagnosis, "RuntimeError: CUDA error: no CUDA-capable device is detected")


# --- planned terminations and exit codes ---------------------------------------------------------

@pytest.mark.parametrize("exit_code", [0, 143, 137])
def test_a_rollout_termination_is_not_a_fault(exit_code):
    diagnosis = diagnose(fx.rollout_termination(exit_code))
    assert diagnosis.cause == "rollout-termination"
    assert diagnosis.fault is False


def test_a_completed_container_is_not_a_fault_and_a_crash_is():
    assert diagnose(fx.completed()).fault is False
    assert diagnose(fx.app_error()).fault is True


def test_a_preempted_pod_is_preemption_even_though_it_is_being_deleted():
    diagnosis = diagnose(fx.preempted())
    assert diagnosis.cause == "preempted"
    assert "pod-deleted" in dict(diagnosis.alternatives)


def test_an_eviction_is_caused_by_the_eviction_not_by_the_pods_old_xid_crash():
    """A pod still carrying a hardware-Xid crash in `lastState` (restart #7) and evicted
    by a drain of that node: the old termination is not this event's cause."""
    diagnosis = diagnose(fx.evicted_by_api_after_an_old_xid())
    assert diagnosis.cause == "evicted"
    assert "gpu-xid-hardware" not in dict(diagnosis.alternatives)
    assert not any("lastState" in line for line in diagnosis.evidence_lines)
    assert any("EvictionByEvictionAPI" in line for line in diagnosis.evidence_lines)


def test_an_eviction_gpuops_recorded_on_the_pod_is_planned_and_names_the_run():
    ev = fx.evicted_by_api_after_an_old_xid(pod_annotations={
        "gpuops.io/evicted-by": "3c1e9b7a-0f5d-4e2b-9a61-2d8f4c7b1e03",
        "gpuops.io/evicted-by-run": "brave-otter", "gpuops.io/evicted-by-flow": "drain-node"})
    diagnosis = diagnose(ev)
    assert diagnosis.cause == "planned-eviction" and diagnosis.fault is False
    assert diagnosis.title == "Planned: evicted by gpuops run brave-otter (drain-node)"
    assert any("gpuops.io/evicted-by=3c1e9b7a" in line for line in diagnosis.evidence_lines)


def test_a_gpuops_annotation_on_a_pod_that_crashed_by_itself_is_not_a_planned_eviction():
    """The mark counts only for the pod's eviction: a crash of its container later (say
    the eviction was refused and the mark stayed) is diagnosed from the container."""
    ev = fx.cuda_oom().model_copy(update={"pod_annotations": {
        "gpuops.io/evicted-by": "3c1e9b7a", "gpuops.io/evicted-by-run": "brave-otter"}})
    assert diagnose(ev).cause == "cuda-oom"


@pytest.mark.parametrize(("make", "cause", "line"), [
    (lambda: fx.job_pod_failed(fx.log_with(fx.CUDA_OOM_LINE), 1), "cuda-oom",
     "torch.OutOfMemoryError: CUDA out of memory"),
    (lambda: fx.job_pod_failed(fx.nccl_timeout().previous_log, 134), "nccl-error",
     "Watchdog caught collective operation timeout"),
])
def test_a_failed_job_pod_is_diagnosed_from_its_current_termination_and_log(make, cause, line):
    diagnosis = diagnose(make())
    assert diagnosis.cause == cause
    assert has_line(diagnosis, line)
    assert not any("lastState" in e for e in diagnosis.evidence_lines)


@pytest.mark.parametrize(("code", "words"), [
    (1, "exit code 1"), (2, "bad arguments"), (126, "not executable"),
    (127, "command not found"), (134, "SIGABRT"), (137, "SIGKILL"), (139, "SIGSEGV"),
    (143, "SIGTERM"), (42, "exit code 42"),
])
def test_app_errors_are_named_by_exit_code_and_signal(code, words):
    diagnosis = diagnose(fx.app_error(code, log=""))
    assert diagnosis.cause == "app-error"
    assert words in diagnosis.title, diagnosis.title


def test_the_python_exception_is_found_behind_launcher_prefixes():
    log = "\n".join(f"[rank1]: {line}" for line in fx.traceback(
        "/workspace/train.py|12|main|run()", last="ValueError: bad shard index 17"))
    diagnosis = diagnose(fx.app_error(1, log=log))
    assert "[rank1]: ValueError: bad shard index 17" in diagnosis.evidence_lines


def test_exit_meaning_reads_signals_from_codes_above_128():
    assert exit_meaning(137) == "killed (SIGKILL)"
    assert exit_meaning(135) == "ended by signal 7 (SIGBUS)"
    assert exit_meaning(3) == "application-defined error"


def test_a_config_error_seen_only_in_the_log_is_less_certain_than_one_kubernetes_reports():
    from_log = diagnose(fx.config_key_error_at_start())
    from_api = diagnose(fx.config_missing_configmap())
    assert from_log.confidence < 0.8 < from_api.confidence


def test_a_key_error_after_hours_of_running_is_not_called_a_config_error():
    ev = fx.config_key_error_at_start().model_copy(
        update={"last_state": fx.terminated(1, started="2025-06-01T07:00:00Z")})
    assert diagnose(ev).cause == "app-error"


def test_with_no_matching_rule_the_diagnosis_is_unknown_with_the_termination_facts():
    ev = fx.evidence(last_state=ContainerState(terminated=TerminatedState(reason="Unknown")),
                     state=ContainerState(), previous_log="last words", pod_events=[])
    diagnosis = diagnose(ev)
    assert diagnosis.cause == "unknown"
    assert diagnosis.confidence <= 0.2
    assert "lastState.terminated.reason=Unknown exitCode=None" in diagnosis.evidence_lines
    assert "last words" in diagnosis.evidence_lines


def test_evidence_lines_are_redacted():
    ev = fx.app_error(1, log="\n".join(fx.traceback(
        "/app/db.py|3|connect|engine.connect()",
        last="OperationalError: could not connect to postgres://app:hunter2pass@db:5432/main")))
    diagnosis = diagnose(ev)
    assert not any("hunter2pass" in line for line in diagnosis.evidence_lines)
    assert has_line(diagnosis, "OperationalError: could not connect to postgres://app:")


def test_diagnosis_is_frozen():
    diagnosis = diagnose(fx.completed())
    with pytest.raises(Exception, match="frozen"):
        diagnosis.cause = "other"  # type: ignore[misc]


# --- operator rule files ----------------------------------------------------------------------

TRITON_RULE = """\
rules:
  - id: triton-model-load
    cause: model-load-error
    title: "Triton could not load model"
    confidence: 0.95
    explanation: "The model repository for {container} is broken."
    when:
      log_regex: ["failed to load '[^']+' version \\\\d+"]
      terminated.exit_code: ["1-255"]
"""


def test_an_operator_rule_file_adds_a_cause():
    rules = load_rules(TRITON_RULE)
    ev = fx.app_error(1, log="E0601 10:00:00.1 model_lifecycle.cc:638] failed to load "
                             "'llama' version 1: Internal: unable to open weights")
    diagnosis = diagnose(ev, rules)
    assert diagnosis.cause == "model-load-error"
    assert diagnosis.explanation == "The model repository for trainer is broken."
    assert has_line(diagnosis, "failed to load 'llama' version 1")
    assert "app-error" in dict(diagnosis.alternatives)
    assert diagnose(ev).cause == "app-error", "the shipped rules are unchanged"


def test_rules_load_from_a_file_path(tmp_path: Path):
    path = tmp_path / "rules.yaml"
    path.write_text(TRITON_RULE)
    assert "triton-model-load" in load_rules(path).ids()
    assert "triton-model-load" in load_rules(str(path)).ids()


def test_a_duplicate_rule_id_is_refused_loudly_with_its_line():
    text = "- id: cuda-oom\n  cause: cuda-oom\n  title: t\n  confidence: 0.5\n" \
           "  when: {log_regex: x}\n"
    with pytest.raises(ConfigError, match="already defined.*override: true") as err:
        load_rules(text)
    assert err.value.line == 1


def test_override_replaces_a_shipped_rule_and_can_switch_it_off():
    text = ("- id: completed\n  override: true\n  enabled: false\n  cause: completed\n"
            "  title: t\n  confidence: 0.5\n  when: {terminated.exit_code: [0]}\n")
    rules = load_rules(text)
    assert len(rules) == len(default_rules())
    assert diagnose(fx.completed(), rules).cause != "completed"


def test_override_of_an_unknown_id_is_refused():
    text = "- id: complted\n  override: true\n  cause: c\n  title: t\n  confidence: 0.5\n" \
           "  when: {pod_deleting: true}\n"
    with pytest.raises(ConfigError, match="no rule with that id"):
        load_rules(text)


def test_the_same_id_twice_in_one_file_is_refused():
    rule = "- id: mine\n  cause: c\n  title: t\n  confidence: 0.5\n  when: {pod_deleting: true}\n"
    with pytest.raises(ConfigError, match="appears twice.*line 1") as err:
        load_rules(rule + rule)
    assert err.value.line == 6


@pytest.mark.parametrize(("text", "field", "line", "words"), [
    (("rules:\n  - id: a\n    cause: c\n    title: t\n    confidence: 1.5\n"
     "    when: {pod_deleting: true}\n"), "rules[0].confidence", 5, "less than or equal to 1"),
    ("- id: a\n  cause: c\n  title: t\n  confidence: 0.5\n  when:\n    log_regexp: [x]\n",
     "rules[0].when.log_regexp", 6, "known conditions: terminated.reason"),
    ("- id: a\n  cause: c\n  title: t\n  confidence: 0.5\n  when:\n    log_regex: ['(']\n",
     "rules[0].when.log_regex[0]", 6, "not a valid regular expression"),
    (("- id: a\n  cause: c\n  title: t\n  confidence: 0.5\n  when:\n"
     "    terminated.exit_code: [abc]\n"), "rules[0].when.terminated.exit_code", 6,
     "not an exit code"),
    ("- id: a\n  title: t\n  confidence: 0.5\n  when: {pod_deleting: true}\n",
     "rules[0].cause", 1, "Field required"),
    ("- id: a\n  cause: c\n  title: t\n  confidence: 0.5\n  when: {}\n", "rules[0].when", 5,
     "at least one condition"),
    (("- id: a\n  cause: c\n  title: t\n  confidence: 0.5\n  when:\n"
     "    node_condition: {typ: Ready}\n"), "rules[0].when.node_condition[0].typ", 6,
     "unknown field"),
    (("- id: ok\n  cause: c\n  title: t\n  confidence: 0.5\n  when: {pod_deleting: true}\n"
     "- id: Bad Id\n  cause: c\n  title: t\n  confidence: 0.5\n  when: {pod_deleting: true}\n"),
     "rules[1].id", 6, "should match pattern"),
])
def test_a_bad_rule_file_names_the_field_and_the_line(text, field, line, words):
    with pytest.raises(ConfigError) as err:
        load_rules(text)
    assert err.value.field == field
    assert err.value.line == line
    assert words in str(err.value)
    assert f"line {line}" in str(err.value)


def test_invalid_yaml_names_its_line():
    with pytest.raises(ConfigError) as err:
        load_rules("- id: a\n  when: {log_regex: [x\n  cause: c\n")
    assert err.value.line is not None and err.value.line >= 2


def test_a_rule_file_error_names_the_file(tmp_path: Path):
    path = tmp_path / "mine.yaml"
    path.write_text("- id: a\n  cause: c\n  title: t\n  confidence: 2\n"
                    "  when: {pod_deleting: true}\n")
    with pytest.raises(ConfigError, match=r"mine\.yaml:4:3: rules\[0\]\.confidence"):
        load_rules(path)


def test_every_condition_in_the_schema_has_exactly_one_check():
    assert set(CONDITION_KEYS.values()) == set(EVALUATORS)


def test_registering_a_condition_twice_is_an_error():
    with pytest.raises(ValueError, match="registered twice"):
        condition("log_regex")(lambda value, facts, window: None)
    assert EVALUATORS["log_regex"] is restart_conditions._log_regex
