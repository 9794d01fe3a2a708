"""Protobuf bodies of built-in kinds (`application/vnd.kubernetes.protobuf`), as kubectl and
every client-go program sends them.

How client-go 1.33 negotiates (k8s.io/client-go rest/request.go, rest/client.go, gentype):
the generated typed clients of built-in kinds are built with `PrefersProtobuf`, so a request
whose rest.Config sets no ContentType (kubectl's does not) gets `Accept:
application/vnd.kubernetes.protobuf,application/json` and, with a body, `Content-Type:
application/vnd.kubernetes.protobuf`: `kubectl create namespace|job|deployment|configmap|
secret|...`, `auth can-i` send protobuf. Dynamic and unstructured clients (`kubectl apply`,
`run`, `get`, `delete`, patches) send JSON. A config that does set ContentType (`kubectl
top`'s metrics client sets protobuf) sends `Accept: <it>, */*`. A response is decoded by its
own Content-Type, so a JSON answer satisfies all of these. A 415 makes client-go fall back
only from CBOR to JSON (`UnsupportedMediaType` records CBOR alone): a protobuf body refused
with 415 is a failed command, so the server must read it.

So simcluster reads protobuf request bodies of every built-in kind (`codec.py`, schemas from
`descriptors.py`) into the same dict the JSON path yields, and answers JSON, which every such
Accept header allows, as kube-apiserver itself answers JSON for kinds it has no protobuf for.
A custom resource, or a machine without the descriptors' package, gets kube-apiserver's 415.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ...core import errors
from .descriptors import DescriptorsUnavailable, kube_file_descriptors

if TYPE_CHECKING:
    from .codec import KubeProtobuf

__all__ = ["decode_body", "kube_protobuf", "load"]
UNSUPPORTED = ("the body of the request was in an unknown format - accepted media types "
               "include: application/json, application/yaml")


@lru_cache(maxsize=1)
def kube_protobuf() -> KubeProtobuf:
    """The codec of the built-in kinds, built at first use (DescriptorsUnavailable without
    the package holding the schemas or the protobuf library: the server then runs, JSON
    only, as it did before)."""
    try:
        from .codec import KubeProtobuf
    except ImportError as e:
        raise DescriptorsUnavailable(f"the protobuf library is not installed: {e}") from e
    from ..openapi.models import model_class

    return KubeProtobuf(kube_file_descriptors(), model_class)


async def load() -> None:
    """Build the codec off the event loop (reading the schemas takes about a second), so
    the first protobuf body does not stall every watch; later calls return at once."""
    if kube_protobuf.cache_info().currsize == 0:
        with contextlib.suppress(DescriptorsUnavailable):  # decode_body answers 415
            await asyncio.to_thread(kube_protobuf)


def decode_body(raw: bytes) -> dict[str, Any]:
    """A protobuf request body as its JSON dict; 415 as kube-apiserver answers a kind it has
    no protobuf for, the reason added when the schemas are missing."""
    try:
        codec = kube_protobuf()
    except DescriptorsUnavailable as e:
        raise errors.ApiError(415, "UnsupportedMediaType", f"{UNSUPPORTED} ({e})") from e
    return codec.decode(raw)
