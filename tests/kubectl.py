"""A real kubectl (and helm) run against a simcluster's kubeconfig, as a user runs them.

The binaries come from `gpuops.deployments.kubectl_binary` (the PyPI package of a Lambda
layer), so every machine tests the same versions.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Protocol


class _HasKubeconfig(Protocol):
    kubeconfig: Path


def _kubeconfig(where: _HasKubeconfig | Path) -> Path:
    return where if isinstance(where, Path) else where.kubeconfig


class Tool:
    """`tool(sim, "get", "pods")` runs the binary on that cluster and returns its stdout; a
    non-zero exit fails the test with the command and its stderr."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.home = home  # its own HOME: no user's ~/.kube cache or config is read

    def env(self, kubeconfig: Path) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", ""), "HOME": str(self.home),
                "KUBECONFIG": str(kubeconfig), "NO_COLOR": "1"}

    def run(self, where: _HasKubeconfig | Path, *args: str, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`env` is added to the environment (`KUBE_EDITOR` for `kubectl edit`)."""
        return subprocess.run([str(self.binary), *args],
                              env={**self.env(_kubeconfig(where)), **(env or {})},
                              capture_output=True, text=True, timeout=timeout, check=False)

    def __call__(self, where: _HasKubeconfig | Path, *args: str, timeout: float = 60,
                 env: dict[str, str] | None = None) -> str:
        done = self.run(where, *args, timeout=timeout, env=env)
        if done.returncode != 0:
            raise AssertionError(f"`{self.binary.name} {' '.join(args)}` exited "
                                 f"{done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def start(self, where: _HasKubeconfig | Path, *args: str) -> subprocess.Popen[str]:
        """A long-running command (`get -w`): the caller reads its stdout and stops it."""
        return subprocess.Popen([str(self.binary), *args], env=self.env(_kubeconfig(where)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def table(output: str) -> list[dict[str, str]]:
    """kubectl's table as one dict per row, keyed by the header's column names. Cells are cut
    at the header's column offsets (kubectl aligns every column under its header; names such
    as `NOMINATED NODE` hold a space)."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [{name: line[a:b].strip() if b is not None else line[a:].strip()
             for name, a, b in zip(names, starts, [*starts[1:], None], strict=True)}
            for line in lines[1:]]
