"""The credential corpus through redaction: no format survives, as text or inside a mapping;
ordinary GPU/ML log lines are left alone."""

from __future__ import annotations

import json

import pytest

from gpuops.bench.credential_corpus import FORMATS, credentials
from gpuops.bench.ordinary_log_corpus import ordinary_lines
from gpuops.common.redact import redact, redact_text

CREDENTIALS = credentials(seed=11)


def test_the_corpus_spans_many_formats_and_every_family_the_issue_names():
    assert len(FORMATS) >= 60
    assert len({f.name for f in FORMATS}) == len(FORMATS)
    families = {f.family for f in FORMATS}
    assert {"cloud", "ci", "registry", "ml", "database", "chat"} <= families


def test_values_are_generated_reproducibly_and_differ_between_seeds():
    again = credentials(seed=11)
    assert [c.line for c in again] == [c.line for c in CREDENTIALS]
    other = {v for c in credentials(seed=12) for v in c.values.values()}
    assert not other & {v for c in CREDENTIALS for v in c.values.values()}


@pytest.mark.parametrize("credential", CREDENTIALS, ids=lambda c: c.format.name)
def test_no_credential_survives_redaction_by_shape(credential):
    out = redact_text(credential.line)
    assert not credential.leaked_in(out), out


@pytest.mark.parametrize("credential", CREDENTIALS, ids=lambda c: c.format.name)
def test_no_credential_survives_redaction_inside_a_mapping(credential):
    """As an event payload or a settings dump holds them: a log line, and each value under
    the name an environment variable or a config file gives it."""
    data = {"previous_log": credential.line, "settings": {
        f"{name}_password": value for name, value in credential.values.items()}}
    out = json.dumps(redact(data))
    assert not credential.leaked_in(out), out


def test_known_values_are_masked_even_where_no_shape_would_find_them():
    for credential in CREDENTIALS:
        bare = " ".join(credential.values.values())  # the values alone, no context
        out = redact_text(f"starting with {bare} now", credential.values.values())
        assert not credential.leaked_in(out), (credential.format.name, out)


def test_ordinary_log_lines_are_left_alone():
    lines = ordinary_lines(seed=11)
    assert len(lines) >= 300
    changed = [line for line in lines if redact_text(line) != line]
    assert len(changed) <= len(lines) / 100, changed[:5]
