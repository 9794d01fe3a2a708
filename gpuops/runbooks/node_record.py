"""A runbook run's undos for a node, kept on the node itself as well as in the journal.

Why on the object too: the journal lives on the Prefect server; a person looking at a
cordoned node (`kubectl describe node`) should see which run cordoned it and what undoes
it, and `gpuops runbook recover RUN` should still find the undos when the journal is gone
(another Prefect server, a deleted variable). So each node an undo names (its `node`
argument) carries `gpuops.io/runbook-undo-<run id>`: JSON with the runbook, the run and the
undo calls about that node, each with its place in the run's order (`seq`), so the undos of
a run that touched several nodes are put back in one order. Written with a merge patch (the
same value twice changes nothing), removed when the run ends or is recovered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpuops.common.annotations import PREFIX
from gpuops.common.errors import KubeNotFound
from gpuops.tasks.clients.kube import Kube

UNDO_PREFIX = PREFIX + "runbook-undo-"


def undo_key(run_id: str) -> str:
    return UNDO_PREFIX + run_id.lower()


def by_node(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The journal `body` as the records its nodes carry (pure): node -> that node's part."""
    parts: dict[str, dict[str, Any]] = {}
    for seq, entry in enumerate(body.get("undo") or []):
        node = (entry.get("args") or {}).get("node")
        if isinstance(node, str) and node:
            part = parts.setdefault(node, {"runbook": body.get("runbook"),
                                           "flow_run": body.get("flow_run"), "undo": []})
            part["undo"].append({**entry, "seq": seq})
    return parts


def merge_records(records: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Nodes' records of one run as one journal body, undos in the run's order (pure)."""
    found = list(records)
    if not found:
        return None
    entries = sorted((e for r in found for e in r.get("undo") or []),
                     key=lambda e: int(e.get("seq", 0)))
    unique = list({int(e.get("seq", 0)): e for e in entries}.values())
    return {"runbook": found[0].get("runbook"), "flow_run": found[0].get("flow_run"),
            "undo": [{k: v for k, v in e.items() if k != "seq"} for e in unique],
            "source": "nodes"}


def record_on_nodes(kube: Kube, run_id: str, body: Mapping[str, Any]) -> list[str]:
    """Write each node's part of the journal on it; the nodes written."""
    written = []
    for node, part in by_node(body).items():
        text = json.dumps(part, sort_keys=True, separators=(",", ":"))
        try:
            kube.merge_patch_node(node, {"metadata": {"annotations": {undo_key(run_id): text}}})
        except KubeNotFound:
            continue  # the node is gone: nothing there to undo
        written.append(node)
    return written


def read_from_nodes(kube: Kube, run_id: str) -> dict[str, Any] | None:
    """The run's undos as its nodes carry them, or None when no node does."""
    key = undo_key(run_id)
    records = []
    for node in kube.list_nodes():
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(key)
        if text:
            try:
                records.append(json.loads(text))
            except ValueError:
                continue  # not ours to read (edited by hand): left for a person
    return merge_records(records)


def forget_on_nodes(kube: Kube, run_id: str) -> None:
    """Take the run's record off every node that carries it (absent already: nothing)."""
    key = undo_key(run_id)
    for node in kube.list_nodes():
        if key in ((node.get("metadata") or {}).get("annotations") or {}):
            try:
                kube.merge_patch_node(node["metadata"]["name"],
                                      {"metadata": {"annotations": {key: None}}})
            except KubeNotFound:
                pass
