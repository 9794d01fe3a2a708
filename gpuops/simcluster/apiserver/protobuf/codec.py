"""Built-in kinds between Kubernetes' protobuf encoding and the JSON dicts the server keeps.

An enveloped body is the bytes `k8s\\x00`, then a runtime.Unknown (typeMeta: apiVersion and
kind; raw: the object's own message). A message is read and written by the protobuf
library against the descriptors of `descriptors.py`; its fields become the dict the JSON
path yields for the same object:

- a field's JSON name is its proto name (go-to-protobuf names each after its JSON tag);
- the messages with a JSON form of their own keep it: Time (RFC 3339, seconds, as
  apimachinery's protobuf reader keeps only seconds), MicroTime (microseconds), Duration
  (Go's `1h2m3s`), Quantity (its string), IntOrString (an int or a string), RawExtension and
  FieldsV1 (their raw JSON); bytes are base64 strings, int64 are numbers;
- the encoder writes every value field (a Go value, gogo's `nullable=false`), empty or not,
  and a pointer field only when it is set. So a zero scalar in a value field (`""`, 0,
  false) and an empty list or map are dropped, as JSON's omitempty drops them (and an absent
  field means the same), while a set pointer keeps its zero (`replicas: 0`, `suspend:
  false`, `emptyDir: {}`); a struct stays, even empty, as Go's JSON writes it (`status: {}`,
  `resources: {}`, a zero Time as null: `creationTimestamp: null`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from ...core import errors
from . import UNSUPPORTED
from .inline import Inlining

MAGIC = b"k8s\x00"
_META = "k8s.io.apimachinery.pkg.apis.meta.v1"
_UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"
_GOGO = "github.com/gogo/protobuf/gogoproto/gogo.proto"
_VALUE_FIELD = b"\xc8\xde\x1f\x00"  # gogoproto.nullable (65001) = false, as serialized
_OMIT = object()


class KubeProtobuf:
    """The built-in kinds' messages, from serialized FileDescriptorProtos."""

    def __init__(self, files: Iterable[bytes],
                 model_for: Callable[[str, str, str], type | None] = lambda *_: None) -> None:
        """`model_for(group, version, kind)`: the kind's JSON model, which tells the fields
        inlined in JSON (`inline.py`)."""
        self._model_for = model_for
        self._inlining = Inlining(_TO_JSON)
        self.pool = descriptor_pool.DescriptorPool()
        protos = {}
        for raw in files:
            proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
            # gogo.proto only declares the options; they stay readable as unknown fields.
            kept = [d for d in proto.dependency if d != _GOGO]
            del proto.dependency[:]
            proto.dependency.extend(kept)
            protos[proto.name] = proto
        added: set[str] = set()

        def add(name: str) -> None:
            if name in added or name not in protos:
                return
            added.add(name)
            for dep in protos[name].dependency:
                add(dep)
            self.pool.Add(protos[name])

        for name in sorted(protos):
            add(name)
        # (last two labels of the proto package) -> package: ("apps", "v1"), ("core", "v1"),
        # ("metrics", "v1beta1"), ("meta", "v1")...
        self._packages = {tuple(p.package.split(".")[-2:]): p.package
                          for p in protos.values()}
        self._value_fields: dict[str, bool] = {}

    # --- kinds -----------------------------------------------------------------------------

    def message_type(self, api_version: str, kind: str) -> Descriptor | None:
        """The message of a kind (None when the schemas have none: custom resources)."""
        group, _, version = api_version.rpartition("/")
        label = group.split(".")[0] if group else "core"
        for package in (self._packages.get((label, version)), _META):
            if package is None:
                continue
            try:
                return self.pool.FindMessageTypeByName(f"{package}.{kind}")
            except KeyError:
                continue
        return None

    def decode(self, body: bytes) -> dict[str, Any]:
        """An enveloped body as its JSON dict; 400 when it is not protobuf, 415 for a kind
        without a schema."""
        if not body.startswith(MAGIC):
            raise errors.bad_request("the request body is not valid protobuf: it does not "
                                     "start with the k8s\\x00 envelope")
        unknown = self._parse(self.pool.FindMessageTypeByName(_UNKNOWN), body[len(MAGIC):])
        api_version, kind = unknown.typeMeta.apiVersion, unknown.typeMeta.kind
        if unknown.contentEncoding or unknown.contentType not in (
                "", "application/vnd.kubernetes.protobuf"):
            raise errors.ApiError(415, "UnsupportedMediaType", UNSUPPORTED)
        descriptor = self.message_type(api_version, kind)
        if descriptor is None:
            raise errors.ApiError(415, "UnsupportedMediaType", UNSUPPORTED)
        self._learn(descriptor, api_version, kind)
        obj = self.to_json(self._parse(descriptor, unknown.raw))
        return {"apiVersion": api_version, "kind": kind, **obj}

    def encode(self, obj: dict[str, Any]) -> bytes:
        """A built-in object as an enveloped body (fields its kind lacks are left out)."""
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        descriptor = self.message_type(api_version, kind)
        if descriptor is None:
            raise ValueError(f"no protobuf schema for {api_version}/{kind}")
        self._learn(descriptor, api_version, kind)
        message = message_factory.GetMessageClass(descriptor)()
        self.from_json(message, {k: v for k, v in obj.items()
                                 if k not in ("apiVersion", "kind")})
        unknown = message_factory.GetMessageClass(
            self.pool.FindMessageTypeByName(_UNKNOWN))()
        unknown.typeMeta.apiVersion = api_version
        unknown.typeMeta.kind = kind
        unknown.raw = message.SerializeToString()
        return MAGIC + unknown.SerializeToString()

    def _learn(self, descriptor: Descriptor, api_version: str, kind: str) -> None:
        group, _, version = api_version.rpartition("/")
        self._inlining.learn(descriptor, self._model_for(group, version, kind))

    @staticmethod
    def _parse(descriptor: Descriptor, raw: bytes) -> Any:
        try:
            return message_factory.GetMessageClass(descriptor).FromString(raw)
        except DecodeError as e:
            raise errors.bad_request(f"the request body is not valid protobuf: "
                                     f"{descriptor.name}: {e}") from e

    # --- message -> JSON -------------------------------------------------------------------

    def to_json(self, message: Message) -> Any:
        special = _TO_JSON.get(message.DESCRIPTOR.full_name)
        if special is not None:
            return special(self, message)
        out: dict[str, Any] = {}
        inline = self._inlining.of(message.DESCRIPTOR)
        for field, value in message.ListFields():
            if field.name in inline:
                out.update(self.to_json(value))
                continue
            converted = self._field_json(field, value)
            if converted is not _OMIT:
                out[field.name] = converted
        return out

    def _field_json(self, field: FieldDescriptor, value: Any) -> Any:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            item = entry.fields_by_name["value"]
            return {k: self._value_json(item, v) for k, v in value.items()} or _OMIT
        if field.is_repeated:
            return [self._value_json(field, v) for v in value] or _OMIT
        converted = self._value_json(field, value)
        if field.message_type is not None:
            return converted  # Go's JSON writes a struct even empty: `{}`, a zero Time null
        if self._is_value_field(field) and converted in ("", 0, False):
            return _OMIT
        return converted

    def _value_json(self, field: FieldDescriptor, value: Any) -> Any:
        if field.message_type is not None:
            return self.to_json(value)
        if field.type == FieldDescriptor.TYPE_BYTES:
            return base64.b64encode(value).decode()
        return value

    def _is_value_field(self, field: FieldDescriptor) -> bool:
        known = self._value_fields.get(field.full_name)
        if known is None:
            known = _VALUE_FIELD in field.GetOptions().SerializeToString()
            self._value_fields[field.full_name] = known
        return known

    # --- JSON -> message -------------------------------------------------------------------

    def from_json(self, message: Message, obj: Any) -> None:
        special = _FROM_JSON.get(message.DESCRIPTOR.full_name)
        if special is not None:
            special(message, obj)
            return
        if not isinstance(obj, dict):
            raise TypeError(f"{message.DESCRIPTOR.name}: expected an object, got {obj!r}")
        fields = message.DESCRIPTOR.fields_by_name
        inline = self._inlining.of(message.DESCRIPTOR)
        for key, value in obj.items():
            field = fields.get(key)
            if field is None and value is not None:
                for name in inline:  # a field of an inlined struct
                    if self._accepts(fields[name].message_type, key):
                        getattr(message, name).SetInParent()
                        self.from_json(getattr(message, name), {key: value})
                        break
                continue
            if field is None or value is None:
                continue
            entry = field.message_type
            if entry is not None and entry.GetOptions().map_entry:
                target = getattr(message, key)
                item = entry.fields_by_name["value"]
                for k, v in value.items():
                    if item.message_type is not None:
                        self.from_json(target[k], v)
                    else:
                        target[k] = _scalar(item, v)
            elif field.is_repeated:
                target = getattr(message, key)
                for v in value:
                    if field.message_type is not None:
                        self.from_json(target.add(), v)
                    else:
                        target.append(_scalar(field, v))
            elif field.message_type is not None:
                sub = getattr(message, key)
                sub.SetInParent()
                self.from_json(sub, value)
            else:
                setattr(message, key, _scalar(field, value))


    def _accepts(self, message: Descriptor, key: str) -> bool:
        return key in message.fields_by_name or any(
            self._accepts(message.fields_by_name[name].message_type, key)
            for name in self._inlining.of(message))


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64decode(value)
    if field.type == FieldDescriptor.TYPE_STRING:
        return str(value)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return bool(value)
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return float(value)
    return int(value)


# --- the messages with a JSON form of their own ------------------------------------------------

def _time_json(_: KubeProtobuf, m: Any) -> str | None:
    if not m.ListFields():
        return None  # the zero time: apimachinery writes an empty message, JSON null
    return datetime.fromtimestamp(m.seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time_json(_: KubeProtobuf, m: Any) -> str | None:
    if not m.ListFields():
        return None
    at = datetime.fromtimestamp(m.seconds, UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{m.nanos // 1000:06d}Z"


def _time_from_json(m: Any, value: str) -> None:
    at = datetime.fromisoformat(value)
    m.seconds = int(at.timestamp())


def _micro_time_from_json(m: Any, value: str) -> None:
    at = datetime.fromisoformat(value)
    m.seconds = int(at.timestamp())
    m.nanos = at.microsecond * 1000


_UNITS = (("h", 3600 * 10**9), ("m", 60 * 10**9), ("s", 10**9), ("ms", 10**6), ("us", 10**3),
          ("µs", 10**3), ("ns", 1))


def go_duration(nanos: int) -> str:
    """Go's time.Duration.String(): `1h2m3.5s`, `300ms`, `0s`."""
    if nanos == 0:
        return "0s"
    sign, n = ("-", -nanos) if nanos < 0 else ("", nanos)
    if n < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if n >= size:
                return sign + _decimal(n, size) + unit
    hours, n = divmod(n, 3600 * 10**9)
    minutes, n = divmod(n, 60 * 10**9)
    text = _decimal(n, 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    return f"{sign}{minutes}m{text}" if minutes else sign + text


def _decimal(n: int, size: int) -> str:
    whole, frac = divmod(n, size)
    digits = str(frac).rjust(len(str(size)) - 1, "0").rstrip("0") if frac else ""
    return f"{whole}.{digits}" if digits else str(whole)


def parse_go_duration(text: str) -> int:
    parts = re.findall(r"([0-9.]+)(h|ms|us|µs|ns|m|s)", text)
    if not parts or "".join(a + b for a, b in parts) != text.lstrip("-"):
        raise ValueError(f"not a Go duration: {text!r}")
    total = sum(float(number) * dict(_UNITS)[unit] for number, unit in parts)
    return -round(total) if text.startswith("-") else round(total)


def _raw_json(codec: KubeProtobuf, raw: bytes) -> Any:
    if not raw:
        return None
    if raw.startswith(MAGIC):
        return codec.decode(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"the request body is not valid protobuf: an embedded "
                                 f"object is neither protobuf nor JSON: {e}") from e


def _int_or_string_from_json(m: Any, value: Any) -> None:
    if isinstance(value, str):
        m.type, m.strVal = 1, value
    else:
        m.type, m.intVal = 0, int(value)


def _set_raw(name: str) -> Callable[[Any, Any], None]:
    def fill(m: Any, value: Any) -> None:
        setattr(m, name, orjson.dumps(value))
    return fill


def _set(field: str, convert: Callable[[Any], Any]) -> Callable[[Any, Any], None]:
    def fill(m: Any, value: Any) -> None:
        setattr(m, field, convert(value))
    return fill


_TO_JSON: dict[str, Callable[[KubeProtobuf, Any], Any]] = {
    f"{_META}.Time": _time_json,
    f"{_META}.MicroTime": _micro_time_json,
    f"{_META}.Duration": lambda _, m: go_duration(m.duration),
    f"{_META}.FieldsV1": lambda codec, m: _raw_json(codec, m.Raw),
    "k8s.io.apimachinery.pkg.runtime.RawExtension": lambda codec, m: _raw_json(codec, m.raw),
    "k8s.io.apimachinery.pkg.api.resource.Quantity": lambda _, m: m.string,
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        lambda _, m: m.strVal if m.type == 1 else m.intVal,
}
_FROM_JSON: dict[str, Callable[[Any, Any], None]] = {
    f"{_META}.Time": _time_from_json,
    f"{_META}.MicroTime": _micro_time_from_json,
    f"{_META}.Duration": _set("duration", parse_go_duration),
    f"{_META}.FieldsV1": _set_raw("Raw"),
    "k8s.io.apimachinery.pkg.runtime.RawExtension": _set_raw("raw"),
    "k8s.io.apimachinery.pkg.api.resource.Quantity": _set("string", str),
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": _int_or_string_from_json,
}
