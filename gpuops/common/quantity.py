"""Kubernetes resource quantities (`500m`, `16Gi`, `1e3`) parsed once into exact numbers."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, int | Fraction] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(value: str | float) -> Fraction:
    """Parse a Kubernetes quantity into an exact Fraction; raise ValueError naming the text."""
    if isinstance(value, (int, float)):
        return Fraction(value)
    return _parse_text(str(value).strip())


# A cluster repeats a few dozen quantity strings over and over (a scan of 10,000 pods parses
# them hundreds of thousands of times): Fractions are immutable, so each text is parsed once.
@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    if not text:
        raise ValueError("empty quantity")
    try:
        return Fraction(Decimal(text))  # plain or exponent form: "2", "0.5", "1e3"
    except (InvalidOperation, ValueError):
        pass
    if text[-2:] in _BINARY:
        return _number(text[:-2], text) * Fraction(_BINARY[text[-2:]])
    if text[-1] in _DECIMAL:
        return _number(text[:-1], text) * Fraction(_DECIMAL[text[-1]])
    raise ValueError(f"invalid quantity {text!r}")


def _number(digits: str, whole: str) -> Fraction:
    try:
        return Fraction(Decimal(digits))
    except (InvalidOperation, ValueError):
        raise ValueError(f"invalid quantity {whole!r}") from None


def format_cpu(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def format_bytes(n: int) -> str:
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        if n and n % _BINARY[suffix] == 0:
            return f"{n // _BINARY[suffix]}{suffix}"
    return str(n)
