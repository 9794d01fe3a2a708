"""What answers on a pod's ports, for the API server's pod proxy (`pods/<name>:<port>/proxy/...`).

kube-apiserver forwards `/api/v1/namespaces/<ns>/pods/<name>[:<port>]/proxy/<path>` to the pod's
IP; it is how a client outside the cluster reaches one replica (a readiness check on vLLM's
`/v1/models`, a warm-up request) without a Service in between. Here nothing listens on pod IPs:
a component that simulates a server in pods (the metrics engine's vLLM) registers a handler,
the API server asks the handlers in turn, and a pod none of them answers refuses the
connection, as a pod whose server is not up does. cluster.py builds this once and hands it to
both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProxyRequest:
    namespace: str
    pod: str
    port: str  # as the path gave it ("8000", or a port name); "" when none was given
    method: str
    path: str  # after `/proxy`, with its leading slash ("/v1/models")
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class ProxyResponse:
    status: int
    body: bytes = b""
    content_type: str = "application/json"


# None: nothing of the handler's listens on that pod and port.
PodHandler = Callable[[ProxyRequest], ProxyResponse | None]


class PodProxy:
    def __init__(self) -> None:
        self._handlers: list[PodHandler] = []

    def register(self, handler: PodHandler) -> None:
        self._handlers.append(handler)

    def answer(self, request: ProxyRequest) -> ProxyResponse | None:
        for handler in self._handlers:
            response = handler(request)
            if response is not None:
                return response
        return None
