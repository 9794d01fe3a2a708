"""NodeMetrics and PodMetrics as a meta.k8s.io Table, the columns metrics-server gives
`kubectl get nodes.metrics.k8s.io` / `pods.metrics.k8s.io`: Name, one column per resource
(`cpu`, `memory`, sorted; a pod's the sum over its containers) and Window.

Pure: the metrics objects in, the Table out. Rows carry the object as `includeObject` asks
(Metadata by default, as kube-apiserver's tables do; Object; None).
"""

from __future__ import annotations

from typing import Any

from gpuops.common.quantity import format_bytes, parse_quantity

Obj = dict[str, Any]
RESOURCES = ("cpu", "memory")


def metrics_table(items: list[Obj], api_version: str, include: str) -> Obj:
    columns = [{"name": "Name", "type": "string", "format": "name",
                "description": "Name of the resource", "priority": 0}]
    columns += [{"name": r, "type": "string", "format": "quantity", "description": "",
                 "priority": 0} for r in RESOURCES]
    columns.append({"name": "Window", "type": "string", "format": "duration",
                    "description": "", "priority": 0})
    rows = []
    for item in items:
        usage = item.get("usage") or _summed(item.get("containers") or [])
        row: Obj = {"cells": [item["metadata"]["name"], *(usage.get(r, "0") for r in RESOURCES),
                              item.get("window", "")]}
        if include == "Object":
            row["object"] = item
        elif include == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": api_version,
                             "metadata": item["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": api_version, "metadata": {"resourceVersion": ""},
            "columnDefinitions": columns, "rows": rows}


def cpu_quantity(nanocores: int) -> str:
    """Nanocores in Quantity's canonical form (the largest decimal suffix that keeps it
    whole): `250m`, `136250u`, `2`."""
    for suffix, size in (("", 10**9), ("m", 10**6), ("u", 10**3)):
        if nanocores % size == 0:
            return f"{nanocores // size}{suffix}"
    return f"{nanocores}n"


def _summed(containers: list[Obj]) -> dict[str, str]:
    total: dict[str, int] = {}
    for container in containers:
        for resource, text in (container.get("usage") or {}).items():
            value = parse_quantity(text)
            scale = 10**9 if resource == "cpu" else 1
            total[resource] = total.get(resource, 0) + int(value * scale)
    return {r: cpu_quantity(v) if r == "cpu" else format_bytes(v) for r, v in total.items()}
