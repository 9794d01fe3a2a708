"""Creating and deleting a controller's pods the way kube-controller-manager's PodControl does.

Pods are built from the owner's template (`GetPodFromTemplate`: labels, annotations and
finalizers from the template, the controller reference, `generateName: <owner>-`) and go
through admission like any API create, so they get the same defaults as a `kubectl` pod.
Each create and delete leaves the Event the real controller records.
"""

from __future__ import annotations

import copy
from typing import Any

from ..core import errors
from ..core.admission import admit_create, admit_delete
from ..core.podstate import new_controller_ref
from ..core.recorder import Recorder
from ..core.store import Store

Obj = dict[str, Any]


def pod_from_template(template: Obj, owner: Obj, *, generate_name: str | None = None,
                      name: str | None = None) -> Obj:
    tmeta = template.get("metadata") or {}
    meta: Obj = {"labels": dict(tmeta.get("labels") or {}),
                 "ownerReferences": [new_controller_ref(owner)]}
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name or f"{owner['metadata']['name']}-"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": copy.deepcopy(template.get("spec") or {})}


class PodControl:
    """Pod create/delete for one controller, recording Events as `component`."""

    def __init__(self, store: Store, recorder: Recorder, component: str) -> None:
        self.store = store
        self.recorder = recorder
        self.component = component
        self.pods = store.type("pods")

    def create(self, owner: Obj, pod: Obj, *, created_message: str | None = None,
               failed_message: str | None = None) -> Obj:
        """Create `pod` in the owner's namespace; ApiError (after a FailedCreate event) on refusal."""
        namespace = owner["metadata"]["namespace"]
        try:
            body = admit_create(self.store, self.pods, pod)
            created = self.store.create(self.pods, body, namespace)
        except errors.ApiError as e:
            message = (failed_message.format(error=e.message) if failed_message
                       else f"Error creating: {e.message}")
            self.event(owner, "FailedCreate", message, type="Warning")
            raise
        self.event(owner, "SuccessfulCreate",
                   (created_message or "Created pod: {name}").format(
                       name=created["metadata"]["name"]))
        return created

    def delete(self, owner: Obj, pod: Obj, *, deleted_message: str | None = None) -> None:
        meta = pod["metadata"]
        store = self.store
        current = store.find(self.pods, meta["namespace"], meta["name"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        admit_delete(self.pods, current)
        store.delete(self.pods, meta["namespace"], meta["name"], uid=meta["uid"])
        self.event(owner, "SuccessfulDelete",
                   (deleted_message or "Deleted pod: {name}").format(name=meta["name"]))

    def event(self, owner: Obj, reason: str, message: str, *, type: str = "Normal") -> None:
        self.recorder.record(owner, reason, message, type=type, component=self.component)
