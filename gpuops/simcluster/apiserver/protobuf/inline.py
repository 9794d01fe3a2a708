"""Which fields of a message are Go structs embedded `json:",inline"`: a field in protobuf, its
fields at the parent's level in JSON (Volume's `volumeSource` holds `emptyDir`, which JSON has
on the Volume; likewise Probe's `handler`, the `LocalObjectReference` of a secretKeyRef...).

The descriptors cannot tell such a field from an ordinary one (gogo's options are the same),
so the JSON side says it: a message field that the kind's JSON model (the official client's
model, `openapi/models.py`) does not have is inlined. The walk follows both at once, from a
kind's message and model down to every message it reaches, once per message.
"""

from __future__ import annotations

from collections.abc import Collection

from google.protobuf.descriptor import Descriptor
from kubernetes.client import models


class Inlining:
    def __init__(self, special: Collection[str]) -> None:
        """`special`: messages with a JSON form of their own (Time, Quantity...), not walked."""
        self._special = frozenset(special)
        self._inline: dict[str, frozenset[str]] = {}

    def of(self, message: Descriptor) -> frozenset[str]:
        return self._inline.get(message.full_name, frozenset())

    def learn(self, message: Descriptor, model: type | None) -> None:
        """Walk a kind's message beside its model (None: no model, so nothing is known)."""
        if model is None:
            return
        pending = [(message, model)]
        while pending:
            descriptor, cls = pending.pop()
            if descriptor.full_name in self._inline or descriptor.full_name in self._special:
                continue
            names = getattr(cls, "attribute_map", {})
            types = {names[attr]: text
                     for attr, text in getattr(cls, "openapi_types", {}).items()}
            inline = set()
            for field in descriptor.fields:
                sub = field.message_type
                if sub is None:
                    continue
                if sub.GetOptions().map_entry:
                    sub = sub.fields_by_name["value"].message_type
                    if sub is None:
                        continue
                if field.name in types:
                    child = _model(types[field.name])
                    if child is not None:
                        pending.append((sub, child))
                elif sub.full_name not in self._special:
                    inline.add(field.name)  # its fields are this model's
                    pending.append((sub, cls))
            self._inline[descriptor.full_name] = frozenset(inline)


def _model(type_text: str) -> type | None:
    """The model a field's type names (`V1Container`, `List[V1Volume]`, `Dict[str, X]`)."""
    text = type_text.strip()
    while True:
        if text.startswith("List[") and text.endswith("]"):
            text = text[5:-1].strip()
        elif text.startswith("Dict[str,") and text.endswith("]"):
            text = text[9:-1].strip()
        else:
            break
    cls = getattr(models, text, None)
    return cls if isinstance(cls, type) and hasattr(cls, "attribute_map") else None
