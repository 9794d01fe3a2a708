"""Bad Block documents: the run's state names the Block and the field, never a value; rule
YAML is checked when a policy is saved and when it is loaded; a Block never reads a file."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuops.blocks.capacity import CapacityConfig
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.flows.restart_diagnostics import restart_diagnostics

pytestmark = pytest.mark.timeout(180)

SECRET = "hunter2-s3cr3t"
BAD_RULES = ("- id: mine\n  cause: c\n  title: t\n  explanation: 'token=" + SECRET + "'\n"
             "  confidence: 2\n  when: {pod_deleting: true}\n")


def _saved_without_validation(block) -> str:
    """What a document edited in the UI, or saved by an older gpuops, can look like."""
    name = f"bad-{uuid.uuid4().hex[:8]}"
    block.save(name)  # outside an event loop: the sync form
    return name


def _run(**blocks: str):
    return asyncio.run(restart_diagnostics(**blocks, quiet_seconds=0.1, return_state=True))


def test_rule_yaml_is_refused_when_the_policy_is_built_naming_line_and_column():
    with pytest.raises(ValidationError) as err:
        RestartPolicy(extra_rules_yaml=BAD_RULES)

    (problem,) = err.value.errors()
    assert problem["loc"] == ("extra_rules_yaml",)
    assert "line 5, column 3: rules[0].confidence" in problem["msg"]
    assert SECRET not in str(err.value)


def test_a_bad_policy_document_fails_the_run_naming_the_block_and_field_not_the_value(
        prefect_server, caplog):
    name = _saved_without_validation(RestartPolicy.model_construct(extra_rules_yaml=BAD_RULES))

    state = _run(policy_block=name)

    assert state.is_failed()
    assert f"Block gpuops-restart-policy/{name}: extra_rules_yaml: line 5, column 3: " \
           "rules[0].confidence" in state.message
    assert "failed validation" not in state.message
    assert SECRET not in state.message and SECRET not in caplog.text


def test_a_policy_pointing_at_a_file_is_refused_and_the_file_is_never_read(
        prefect_server, tmp_path: Path, caplog):
    secrets = tmp_path / "credentials.yaml"
    secrets.write_text(f"aws_secret_access_key: {SECRET}\n")
    name = _saved_without_validation(
        RestartPolicy.model_construct(extra_rules_yaml=str(secrets)))

    with caplog.at_level(logging.DEBUG):
        state = _run(policy_block=name)

    assert state.is_failed()
    assert "extra_rules_yaml: this looks like a file path" in state.message
    assert "gpuops restart-rules load FILE" in state.message
    assert SECRET not in state.message and SECRET not in caplog.text
    with pytest.raises(ValidationError, match="looks like a file path"):
        RestartPolicy(extra_rules_yaml=str(secrets))


def test_a_missing_block_fails_the_run_naming_it(prefect_server):
    state = _run(policy_block="no-such-policy")

    assert state.is_failed()
    assert "Block gpuops-restart-policy/no-such-policy: name: no such Block is saved" \
           in state.message


def test_a_bad_capacity_config_names_the_field_without_echoing_values():
    with pytest.raises(ValidationError) as err:
        CapacityConfig(pools=[{"name": "h100", "instance_type": "p5.48xlarge",
                               "gpus_per_node": 8, "price_per_hour": SECRET, "max_size": 4}],
                       models=[{"name": "m"}])

    assert "pools.0.price_per_hour" in str(err.value).replace("\n  ", ".")
    assert SECRET not in str(err.value)
