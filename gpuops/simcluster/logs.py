"""Container logs per container instance, with the previous instance kept as the kubelet does."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class ContainerLog:
    lines: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=20_000))


class LogStore:
    """(namespace, pod, container) -> the current and the previous instance's lines.

    Only two instances are kept per container: the kubelet keeps exactly one previous log,
    which is why restart evidence must be captured at once.
    """

    def __init__(self) -> None:
        self._current: dict[tuple[str, str, str], ContainerLog] = {}
        self._previous: dict[tuple[str, str, str], ContainerLog] = {}

    def write(self, namespace: str, pod: str, container: str, ts: float, line: str) -> None:
        self._current.setdefault((namespace, pod, container), ContainerLog()).lines.append((ts, line))

    def rotate(self, namespace: str, pod: str, container: str) -> None:
        """A container restarted: its current log becomes the previous one."""
        key = (namespace, pod, container)
        self._previous[key] = self._current.pop(key, ContainerLog())
        self._current[key] = ContainerLog()

    def read(self, namespace: str, pod: str, container: str, *, previous: bool = False
             ) -> list[tuple[float, str]] | None:
        source = self._previous if previous else self._current
        log = source.get((namespace, pod, container))
        return None if log is None else list(log.lines)

    def forget_pod(self, namespace: str, pod: str) -> None:
        for source in (self._current, self._previous):
            for key in [k for k in source if k[0] == namespace and k[1] == pod]:
                del source[key]
