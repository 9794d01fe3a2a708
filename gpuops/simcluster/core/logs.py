"""Container logs per container instance, with the previous instance kept as the kubelet does."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
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
        # (namespace, pod) -> its containers with a log: forget_pod without a full scan.
        self._containers: dict[tuple[str, str], set[str]] = {}
        # Called with (namespace, pod, container) before a read: the kubelet writes a running
        # container's steady lines lazily, when someone looks, instead of on a timer.
        self.before_read: Callable[[str, str, str], None] | None = None

    def write(self, namespace: str, pod: str, container: str, ts: float, line: str) -> None:
        key = (namespace, pod, container)
        log = self._current.get(key)
        if log is None:
            log = self._current[key] = ContainerLog()
            self._containers.setdefault((namespace, pod), set()).add(container)
        log.lines.append((ts, line))

    def rotate(self, namespace: str, pod: str, container: str) -> None:
        """A container restarted: its current log becomes the previous one."""
        key = (namespace, pod, container)
        self._previous[key] = self._current.pop(key, ContainerLog())
        self._current[key] = ContainerLog()
        self._containers.setdefault((namespace, pod), set()).add(container)

    def read(self, namespace: str, pod: str, container: str, *, previous: bool = False
             ) -> list[tuple[float, str]] | None:
        if self.before_read is not None:
            self.before_read(namespace, pod, container)
        source = self._previous if previous else self._current
        log = source.get((namespace, pod, container))
        return None if log is None else list(log.lines)

    def forget_pod(self, namespace: str, pod: str) -> None:
        for container in self._containers.pop((namespace, pod), ()):
            self._current.pop((namespace, pod, container), None)
            self._previous.pop((namespace, pod, container), None)
