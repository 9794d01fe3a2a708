"""Moving from kubectl's client-side apply to server-side apply, as kube-apiserver eases it.

A client-side `kubectl apply` records its configuration in the
`kubectl.kubernetes.io/last-applied-configuration` annotation and owns its fields as the
updater `kubectl-client-side-apply`. The first `kubectl apply --server-side` of a changed
manifest would conflict with that updater on every field it changes; kube lets kubectl's
applier (field manager `kubectl` only) take the fields whose live value is still the one the
annotation recorded, and keeps the annotation up to date on every later server-side apply, so
going back to client-side apply computes its patch from the right configuration.
"""

from __future__ import annotations

import json
from typing import Any

from . import updater
from .entries import Managed
from .fieldset import FieldSet
from .schema import TypedError, Types
from .typed import compare, to_set

Obj = dict[str, Any]

ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
KUBECTL = "kubectl"


def apply(types: Types, live: Obj, config: Obj, managed: Managed, manager: str, *,
          api_version: str, force: bool, **options: Any) -> tuple[Obj | None, Managed]:
    """`updater.apply`, with kubectl's conflicts on fields its client-side apply set (and
    left as set) allowed, and its annotation kept up to date."""
    try:
        new, managed = updater.apply(types, live, config, managed, manager,
                                     api_version=api_version, force=force, **options)
    except updater.Conflicts as e:
        allowed = _allowed(types, live, api_version) if manager == KUBECTL else None
        if allowed is None:
            raise
        left = [c for c in e.conflicts if not allowed.has(c.path)]
        if left:
            raise updater.Conflicts(left) from None
        new, managed = updater.apply(types, live, config, managed, manager,
                                     api_version=api_version, force=True, **options)
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    if manager == KUBECTL and annotations.get(ANNOTATION):
        new = _with_last_applied(new if new is not None else live, config)
    return new, managed


def _allowed(types: Types, live: Obj, api_version: str) -> FieldSet | None:
    """The fields the recorded client-side configuration set to what they still are."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not text:
        return None
    try:
        last = json.loads(text)
        if not isinstance(last, dict) or last.get("apiVersion") != api_version:
            return None
        owned = to_set(types, last, strict=True)
        c = compare(types, last, live)
    except (ValueError, TypedError):
        return None
    return owned.difference(c.modified).difference(c.added).difference(c.removed)


def _with_last_applied(obj: Obj, config: Obj) -> Obj:
    recorded = json.loads(json.dumps(config))
    notes = (recorded.get("metadata") or {}).get("annotations")
    if isinstance(notes, dict):
        notes.pop(ANNOTATION, None)
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}),
                           ANNOTATION: json.dumps(recorded, separators=(",", ":"),
                                                  sort_keys=True)}
    return {**obj, "metadata": meta}
