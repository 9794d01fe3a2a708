"""Run a SimCluster on a background thread: for tests and benchmarks in a synchronous process.

The code under test still reaches it only over HTTP, through the kubeconfig it writes.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

from .cluster import SimCluster
from .config import SimConfig


class SimClusterThread:
    def __init__(self, config: SimConfig, kubeconfig: Path) -> None:
        self.config = config
        self.kubeconfig = kubeconfig
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._cluster: SimCluster | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="simcluster")

    def start(self) -> SimClusterThread:
        self._thread.start()
        self._cluster = SimCluster(self.config)
        self.url = asyncio.run_coroutine_threadsafe(self._cluster.start(), self._loop).result(30)
        self._cluster.write_kubeconfig(self.kubeconfig)
        return self

    def stop(self) -> None:
        if self._cluster is not None:
            asyncio.run_coroutine_threadsafe(self._cluster.stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def admin(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call an admin endpoint (`faults`, `clock`, `state`, `history`) over HTTP."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/admin/{path}", data=data,
                                     headers={"Content-Type": "application/json"},
                                     method="POST" if data is not None else "GET")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def fault(self, kind: str, target: str | None = None, **params: Any) -> Any:
        return self.admin("faults", {"kind": kind, "target": target, "params": params})

    def advance(self, seconds: float) -> Any:
        return self.admin("clock", {"advance": seconds})

    def __enter__(self) -> SimClusterThread:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
