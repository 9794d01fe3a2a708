"""IntOrString fields (maxSurge, maxUnavailable, minAvailable) scaled as apimachinery does.

`GetScaledValueFromIntOrPercent`: an int is itself; "25%" of a total rounds up or down as
the caller says (rolling updates round surge up and unavailability down; PDBs round up).
"""

from __future__ import annotations

from typing import Any


def scaled_value(value: Any, total: int, *, round_up: bool) -> int:
    """The value of an IntOrString against `total`; ValueError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not value.endswith("%"):
            raise ValueError(f"invalid value for IntOrString: invalid type: string is not a "
                             f"percentage: {value!r}")
        try:
            percent = int(value[:-1])
        except ValueError:
            raise ValueError(f"invalid value for IntOrString: invalid value for percent: "
                             f"{value!r}") from None
        if round_up:
            return -(-percent * total // 100)
        return percent * total // 100
    raise ValueError(f"invalid value for IntOrString: invalid type: {value!r}")


def is_percent(value: Any) -> bool:
    return isinstance(value, str)
