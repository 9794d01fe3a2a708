"""Redaction by shape: the gaps found while building restart reports, and its cost on big logs."""

from __future__ import annotations

import time

import pytest

from gpuops.common.redact import MASK, redact, redact_text

PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"


@pytest.mark.parametrize(("text", "secret", "kept"), [
    ("postgres://app:hunter2@db:5432/main", "hunter2", "postgres://app:"),
    ("redis://:hunter2@cache:6379/0", "hunter2", "@cache:6379/0"),
    ("postgres://app:ab/cd@ef@db:5432/main", "ab/cd", "@db:5432/main"),
    ('password="correct horse battery"', "horse battery", 'password="'),
    ("PASSWORD: 'correct horse'", "horse", "PASSWORD: '"),
    ('{"db_password": "s3cr3t value", "user": "app"}', "s3cr3t", '"user": "app"'),
    ("python serve.py --api-key sk9f8e7d6c5b4a --port 8000", "sk9f8e7d6c5b4a", "--port 8000"),
    ("--password=hunter2", "hunter2", "--password="),
    ("Authorization: Bearer abcdefghijklmnop123", "abcdefghijklmnop123", "Authorization"),
    ("clone https://github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz@github.com/x",
     "github_pat_11ABCDEFG0123456789", "github.com/x"),
    ("GITLAB=glpat-abcdefghij0123456789", "glpat-abcdefghij0123456789", "GITLAB="),
    ("key AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890", "key "),
    ("post to https://hooks.slack.com/services/T0001/B0002/abcdefXYZ", "abcdefXYZ",
     "hooks.slack.com/services/"),
])
def test_secret_shapes_are_masked(text, secret, kept):
    out = redact_text(text)
    assert secret not in out
    assert kept in out
    assert MASK in out


def test_a_private_key_inside_json_is_masked_whole():
    text = ('{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
            f'{PEM_BODY}\\n{PEM_BODY}\\n-----END PRIVATE KEY-----\\n"}}')
    out = redact_text(text)
    assert PEM_BODY not in out
    assert '"type": "service_account"' in out


@pytest.mark.parametrize("text", [
    f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY}",  # log cut before END
    f"{PEM_BODY}\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----",  # tail kept without BEGIN
])
def test_a_private_key_cut_by_log_truncation_is_still_masked(text):
    assert PEM_BODY not in redact_text(text)


@pytest.mark.parametrize("text", [
    "max_num_batched_tokens=8192",
    "Avg prompt throughput: 1812.0 tokens/s",
    'Error: configmap "trainer-config" not found',
    'Error: secret "db-creds" not found',
    "token expired for serviceaccount default",
    "http://10.42.3.17:8000/health",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
])
def test_ordinary_log_lines_are_left_alone(text):
    assert redact_text(text) == text


def test_redaction_is_idempotent():
    text = ('password="a b" postgres://u:p@h token 0123456789abcdef '
            '{"api_key": "x"} --secret y')
    once = redact_text(text)
    assert redact_text(once) == once


def test_known_values_are_masked_before_shapes():
    assert redact_text("MODEL_TOKEN is s3cr3t-env-42", ["s3cr3t-env-42"]) == \
        f"MODEL_TOKEN is {MASK}"


def test_redact_walks_json_like_structures():
    out = redact({"log": ["password=x"], "n": 3}, [])
    assert out == {"log": [f"password={MASK}"], "n": 3}


@pytest.mark.parametrize("text", [
    "a.b-c_d" * 150_000,
    "a://b:" * 170_000,
    "a://b:@" * 150_000,
    "--password " * 90_000,
    "token " + "a" * 1_000_000,
    ("A" * 64 + "\n") * 16_000,
    'password: "' + "a" * 1_000_000,
])
def test_a_megabyte_of_hostile_log_is_redacted_in_linear_time(text):
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 5, "a pattern went quadratic"
