"""Kubernetes quantities as the API server writes them, parsed exactly."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpuops.common.quantity import format_bytes, format_cpu, parse_quantity


@pytest.mark.parametrize(("text", "value"), [
    ("2", 2), ("0.5", Fraction(1, 2)), ("1e3", 1000), ("500m", Fraction(1, 2)),
    ("250u", Fraction(1, 4000)), ("16Gi", 16 * 2**30), ("1.5Ki", 1536), ("3k", 3000),
    ("2M", 2 * 10**6), (" 4 ", 4), (8, 8), (0.25, Fraction(1, 4)),
])
def test_every_form_parses_to_its_exact_value(text, value):
    assert parse_quantity(text) == value


def test_a_repeated_text_gives_the_same_value_each_time():
    # Parsed once and remembered: the second answer must equal the first, not alias a
    # mutated object (Fractions are immutable, so sharing is safe).
    first = parse_quantity("1536Mi")
    assert parse_quantity("1536Mi") == first == Fraction(1536 * 2**20)


@pytest.mark.parametrize("text", ["", "12x", "Gi", "1..5", "one"])
def test_a_bad_quantity_is_an_error_naming_it(text):
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)
    with pytest.raises(ValueError, match="quantity"):  # and again: errors are not remembered
        parse_quantity(text)


def test_formatting_round_trips():
    assert format_cpu(2000) == "2" and format_cpu(1500) == "1500m"
    assert format_bytes(16 * 2**30) == "16Gi" and parse_quantity(format_bytes(3 * 2**20)) == 3 * 2**20
