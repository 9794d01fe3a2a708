"""The OpenAPI v2 document as protobuf (gnostic's `openapi.v2.Document`), what client-go's
`OpenAPISchema()` asks for (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) and
the only form it reads; kubectl's `explain --output plaintext-openapiv2` and its client-side
validation read it so.

Only the parts `documents.v2_document` writes are encoded, field numbers as in gnostic's
`OpenAPIv2.proto`. Vendor extensions and defaults are gnostic `Any`s holding YAML text (JSON
is YAML).
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

Schema = dict[str, Any]
# What a client asks for has an `@`, which is no valid media type to answer with: the answer
# says `.v1.0` instead, as kube-openapi's handler does.
ACCEPTED = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negatives as two's complement, as protobuf's int64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _str(num: int, text: str) -> bytes:
    return _bytes(num, text.encode()) if text else b""


def _int(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(int(value))


def _bool(num: int, value: bool) -> bytes:
    return _int(num, 1) if value else b""


def _double(num: int, value: float) -> bytes:
    return _varint(num << 3 | 1) + struct.pack("<d", float(value))


def _any(value: Any) -> bytes:
    """gnostic `Any`: its `yaml` (2)."""
    return _str(2, orjson.dumps(value).decode())


def _named_any(name: str, value: Any) -> bytes:
    return _str(1, name) + _bytes(2, _any(value))


def _extensions(num: int, obj: dict) -> bytes:
    return b"".join(_bytes(num, _named_any(k, v)) for k, v in obj.items()
                    if k.startswith("x-"))


def schema(s: Schema) -> bytes:
    out = [_str(1, s.get("$ref", "") if isinstance(s.get("$ref"), str) else ""),
           _str(2, s.get("format", "")), _str(3, s.get("title", "")),
           _str(4, s.get("description", ""))]
    if "default" in s:
        out.append(_bytes(5, _any(s["default"])))
    for key, num in (("maximum", 7), ("minimum", 9)):
        if isinstance(s.get(key), (int, float)):
            out.append(_double(num, s[key]))
    for key, num in (("maxLength", 11), ("minLength", 12), ("maxItems", 14),
                     ("minItems", 15), ("maxProperties", 17), ("minProperties", 18)):
        if isinstance(s.get(key), int):
            out.append(_int(num, s[key]))
    out.append(_str(13, s.get("pattern", "")))
    out.append(_bool(16, bool(s.get("uniqueItems"))))
    out.extend(_str(19, r) for r in s.get("required") or [] if isinstance(r, str))
    out.extend(_bytes(20, _any(e)) for e in s.get("enum") or [])
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out.append(_bytes(21, _bytes(1, schema(extra))))
    elif isinstance(extra, bool):
        out.append(_bytes(21, _varint(2 << 3) + _varint(int(extra))))
    types = s.get("type")
    if types:
        out.append(_bytes(22, b"".join(_str(1, t) for t in (
            types if isinstance(types, list) else [types]))))
    items = s.get("items")
    if isinstance(items, dict):
        out.append(_bytes(23, _bytes(1, schema(items))))
    out.extend(_bytes(24, schema(a)) for a in s.get("allOf") or [] if isinstance(a, dict))
    props = s.get("properties")
    if isinstance(props, dict):
        out.append(_bytes(25, b"".join(
            _bytes(1, _str(1, name) + _bytes(2, schema(p)))
            for name, p in props.items() if isinstance(p, dict))))
    out.append(_extensions(31, s))
    return b"".join(out)


def _parameter(p: dict) -> bytes:
    if p.get("in") == "body":
        body = (_str(2, p["name"]) + _str(3, "body") + _bool(4, bool(p.get("required")))
                + _bytes(5, schema(p.get("schema") or {})))
        parameter = _bytes(1, body)
    else:
        query = (_str(2, p.get("in", "query")) + _str(4, p["name"]) + _str(6, p.get("type", ""))
                 + _bool(20, bool(p.get("uniqueItems"))))
        parameter = _bytes(2, _bytes(3, query))
    return _bytes(1, parameter)  # ParametersItem.parameter


def _operation(op: dict) -> bytes:
    out = [_str(3, op.get("description", "")), _str(5, op.get("operationId", ""))]
    out.extend(_bytes(8, _parameter(p)) for p in op.get("parameters") or [])
    codes = b""
    for code, response in (op.get("responses") or {}).items():
        value = _str(1, response.get("description", ""))
        if "schema" in response:
            value += _bytes(2, _bytes(1, schema(response["schema"])))
        codes += _bytes(1, _str(1, code) + _bytes(2, _bytes(1, value)))
    out.append(_bytes(9, codes))
    out.append(_extensions(13, op))
    return b"".join(out)


_VERBS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def document(doc: dict) -> bytes:
    """`documents.v2_document`'s dict as gnostic's Document."""
    info = doc.get("info") or {}
    out = [_str(1, doc.get("swagger", "2.0")),
           _bytes(2, _str(1, info.get("title", "")) + _str(2, info.get("version", "")))]
    paths = b"".join(
        _bytes(2, _str(1, path) + _bytes(2, b"".join(
            _bytes(_VERBS[verb], _operation(op)) for verb, op in item.items()
            if verb in _VERBS)))
        for path, item in (doc.get("paths") or {}).items())
    out.append(_bytes(8, paths))
    out.append(_bytes(9, b"".join(
        _bytes(1, _str(1, name) + _bytes(2, schema(s)))
        for name, s in (doc.get("definitions") or {}).items())))
    return b"".join(out)
