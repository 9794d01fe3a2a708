"""What a printer is, and the cell formats kube-apiserver's printers share.

A printer turns one stored object into one table row: pure functions of the object and of
`now` (the cluster's virtual clock, in epoch seconds), so a row can be checked without a
server. The server always prints the wide cells too (kube-apiserver generates tables with
`Wide: true`); kubectl hides the columns whose priority is above 0 unless `-o wide`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

Obj = dict[str, Any]
Cells = list[Any]

NAME_DOC = "Name must be unique within a namespace."
AGE_DOC = ("CreationTimestamp is a timestamp representing the server time when this object "
           "was created.")


@dataclass(frozen=True)
class Column:
    """A meta.k8s.io/v1 TableColumnDefinition."""

    name: str
    type: str = "string"
    description: str = ""
    priority: int = 0
    format: str = ""

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "format": self.format,
                "description": self.description, "priority": self.priority}


NAME = Column("Name", format="name", description=NAME_DOC)
AGE = Column("Age", description=AGE_DOC)


def wide(name: str, description: str = "") -> Column:
    return Column(name, description=description, priority=1)


@dataclass(frozen=True)
class Printer:
    """The columns of a resource's table and the function that fills one row."""

    columns: tuple[Column, ...]
    cells: Callable[[Obj, float], Cells]
    # a row's conditions (pods: Completed for Succeeded and Failed ones)
    conditions: Callable[[Obj], list[dict[str, Any]]] | None = None


def human_duration(seconds: float) -> str:
    """apimachinery's `duration.HumanDuration`: about two significant figures."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y{rest}d" if rest else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


@lru_cache(maxsize=4096)
def epoch(timestamp: str) -> float | None:
    """An RFC 3339 timestamp in epoch seconds (None when it does not parse); many objects
    share a timestamp, so each text is parsed once."""
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return None


def since(timestamp: Any, now: float) -> str:
    """`translateTimestampSince`: how long ago, `<unknown>` for no time."""
    if not timestamp or not isinstance(timestamp, str):
        return "<unknown>"
    at = epoch(timestamp)
    return "<invalid>" if at is None else human_duration(now - at)


def age(obj: Obj, now: float) -> str:
    return since((obj.get("metadata") or {}).get("creationTimestamp"), now)


def name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def section(obj: Obj, *path: str) -> Obj:
    """A nested mapping, empty where any level is missing or null."""
    for key in path:
        value = obj.get(key) if isinstance(obj, dict) else None
        obj = value if isinstance(value, dict) else {}
    return obj


def integer(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def format_labels(labels: Mapping[str, Any] | None) -> str:
    """`labels.FormatLabels`: `k=v` sorted by key, `<none>` for none."""
    if not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def selector_string(selector: Any) -> str:
    """`metav1.LabelSelectorAsSelector(s).String()`: requirements sorted by key, `in`/`notin`
    values sorted; an empty selector is empty, a null one selects nothing (also empty)."""
    if not isinstance(selector, dict):
        return ""
    parts: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        parts.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key", ""), expr.get("operator", "")
        values = ",".join(sorted(set(expr.get("values") or [])))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                "Exists": key, "DoesNotExist": f"!{key}"}.get(op)
        if text is None:
            return "<error>"
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts, key=lambda p: p[0]))


def format_selector(selector: Any) -> str:
    """`metav1.FormatLabelSelector`: the selector string, `<none>` when empty."""
    return selector_string(selector) or "<none>"


def containers_and_images(template_spec: Obj) -> tuple[str, str]:
    """`layoutContainerCells`: container names and images, comma-separated."""
    containers = template_spec.get("containers") or []
    return (",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers))
