"""coordination.k8s.io Leases (NAME, HOLDER, AGE), with kube-apiserver's columns: what
`kubectl get leases -n kube-node-lease` shows of each node's heartbeat."""

from __future__ import annotations

from .base import AGE, NAME, Cells, Column, Obj, Printer, age, name, section

LEASE_COLUMNS = (
    NAME, Column("Holder", description="holderIdentity contains the identity of the holder of "
                                       "a current lease."),
    AGE,
)


def lease_cells(lease: Obj, now: float) -> Cells:
    return [name(lease), section(lease, "spec").get("holderIdentity") or "", age(lease, now)]


PRINTERS: dict[tuple[str, str], Printer] = {
    ("coordination.k8s.io", "Lease"): Printer(LEASE_COLUMNS, lease_cells),
}
