"""Protobuf request bodies, for the few built-in kinds simcluster reads in that form.

kubectl sends built-in kinds as `application/vnd.kubernetes.protobuf`: the bytes `k8s\\x00`,
then a runtime.Unknown message (1: typeMeta {1: apiVersion, 2: kind}, 2: raw, 3:
contentEncoding, 4: contentType) whose `raw` is the object's own message. This reads the
wire format and a message against a small field table (`Schema`); fields not in the table
are skipped, and empty scalars are left out, as `omitempty` leaves them out of JSON.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Union

from ..core import errors

MAGIC = b"k8s\x00"

# A field: its JSON name and its type: "string", "bool", "int", a nested Schema, or
# ("map", Schema of the entry: 1 key, 2 value) for map<string, string>.
FieldType = Union[str, "Schema", tuple[str, "Schema"]]
Schema = Mapping[int, tuple[str, FieldType]]

STRING_MAP: Schema = {1: ("key", "string"), 2: ("value", "string")}
OBJECT_META: Schema = {1: ("name", "string"), 2: ("generateName", "string"),
                       3: ("namespace", "string"), 11: ("labels", ("map", STRING_MAP)),
                       12: ("annotations", ("map", STRING_MAP))}
_TYPE_META: Schema = {1: ("apiVersion", "string"), 2: ("kind", "string")}


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) of an enveloped body; 400 when it is not one."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("the request body is not valid protobuf: it does not start "
                                 "with the k8s\\x00 envelope")
    raw = b""
    meta: dict[str, Any] = {}
    for number, wire, value in _fields(body[len(MAGIC):]):
        if number == 2 and wire == 2:
            assert isinstance(value, bytes)
            raw = value
        elif number == 1 and wire == 2:
            assert isinstance(value, bytes)
            meta = decode(value, _TYPE_META)
    return meta.get("apiVersion", ""), meta.get("kind", ""), raw


def decode(data: bytes, schema: Schema) -> dict[str, Any]:
    """A message as the JSON object it stands for."""
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue
        name, kind = spec
        if isinstance(kind, tuple):  # map<string, string>
            entry = decode(_bytes(value, name), kind[1])
            out.setdefault(name, {})[entry.get("key", "")] = entry.get("value", "")
        elif isinstance(kind, Mapping):
            out[name] = decode(_bytes(value, name), kind)
        elif kind == "string":
            text = _bytes(value, name).decode("utf-8", errors="replace")
            if text:
                out[name] = text
        elif kind == "bool":
            if value:
                out[name] = True
        elif kind == "int" and isinstance(value, int) and value:
            out[name] = value
    return out


def _bytes(value: bytes | int, name: str) -> bytes:
    if not isinstance(value, bytes):
        raise errors.bad_request(f"the request body is not valid protobuf: field {name!r} "
                                 "is not length-delimited")
    return value


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise errors.bad_request("the request body is not valid protobuf: a field "
                                         "runs past the end")
            yield number, wire, data[pos:pos + length]
            pos += length
        elif wire in (1, 5):  # fixed64, fixed32: skipped
            pos += 8 if wire == 1 else 4
        else:
            raise errors.bad_request(f"the request body is not valid protobuf: wire type "
                                     f"{wire} of field {number}")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise errors.bad_request("the request body is not valid protobuf: a varint runs "
                                     "past the end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
