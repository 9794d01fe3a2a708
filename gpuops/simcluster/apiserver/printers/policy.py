"""Printers of PodDisruptionBudgets (MIN AVAILABLE, MAX UNAVAILABLE as given or `N/A`, ALLOWED
DISRUPTIONS) and PriorityClasses (VALUE, GLOBAL-DEFAULT, PREEMPTIONPOLICY), with
kube-apiserver's columns."""

from __future__ import annotations

from .base import AGE, NAME, Cells, Column, Obj, Printer, age, integer, name, section

PDB_COLUMNS = (
    NAME, Column("Min Available", description="The minimum number of pods that must be "
                                              "available."),
    Column("Max Unavailable", description="The maximum number of pods that may be "
                                          "unavailable."),
    Column("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted "
                                             "at this time."),
    AGE,
)


def pdb_cells(pdb: Obj, now: float) -> Cells:
    spec = section(pdb, "spec")
    return [name(pdb), _int_or_string(spec.get("minAvailable")),
            _int_or_string(spec.get("maxUnavailable")),
            integer(section(pdb, "status").get("disruptionsAllowed")), age(pdb, now)]


def _int_or_string(value: object) -> str:
    return "N/A" if value is None else str(value)


PRIORITYCLASS_COLUMNS = (
    NAME, Column("Value", "integer", "The priority pods of this class get."),
    Column("Global-Default", "boolean", "Whether pods without a class get this one."),
    AGE,
    Column("PreemptionPolicy", description="Whether pods of this class may preempt others."),
)


def priorityclass_cells(pc: Obj, now: float) -> Cells:
    return [name(pc), integer(pc.get("value")), bool(pc.get("globalDefault")), age(pc, now),
            pc.get("preemptionPolicy") or "PreemptLowerPriority"]


PRINTERS: dict[tuple[str, str], Printer] = {
    ("policy", "PodDisruptionBudget"): Printer(PDB_COLUMNS, pdb_cells),
    ("scheduling.k8s.io", "PriorityClass"): Printer(PRIORITYCLASS_COLUMNS,
                                                    priorityclass_cells),
}
