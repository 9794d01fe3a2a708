"""kube-apiserver's table printers, one pure function per resource kind: object -> row.

`printer_for` picks a resource's printer: the built-in one for kube's own types, the
CRD-style columns for custom resources (from their CustomResourceDefinition when it is
stored, from the upstream CRD for those simcluster serves built in), and the generic NAME /
CREATED AT table for any other built-in.
"""

from __future__ import annotations

from typing import Any

from . import apps, coordination, core, custom, pods, policy
from .base import Printer

BUILTIN: dict[tuple[str, str], Printer] = {
    ("", "Pod"): pods.PRINTER, **core.PRINTERS, **apps.PRINTERS, **policy.PRINTERS,
    **coordination.PRINTERS}


def printer_for(group: str, version: str, kind: str, *, builtin: bool,
                crd: dict[str, Any] | None = None) -> Printer:
    """The printer of a resource type; `crd` is its stored CustomResourceDefinition, if any
    (consulted for custom resources only, as the apiextensions server does)."""
    if not builtin and crd is not None:
        return custom.crd_printer(custom.crd_columns(crd, version))
    printer = BUILTIN.get((group, kind))
    if printer is not None:
        return printer
    upstream = custom.UPSTREAM_COLUMNS.get((group, kind))
    if upstream is not None or not builtin:
        return custom.crd_printer(upstream or [])
    return custom.DEFAULT


__all__ = ["Printer", "printer_for"]
