"""How `gpuops up` stops: gracefully on the first Ctrl-C/SIGTERM/SIGHUP, at once on the second.

The first signal interrupts serving (a KeyboardInterrupt in the main thread); `Stopper.stop()`
then, in this order: ends the flow-run processes the runner left behind, lets the caller end
gpuops' own runs in Prefect (the server is still up), stops every component, removes
`up.pid`. Nothing in it depends on standard output. A second signal during any of that, or a
stop that outlasts `deadline_s`, kills whatever is left with SIGKILL (every component's process
group and every descendant), removes `up.pid` and exits: there is always a way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import psutil

from gpuops.deployments.services import Service
from gpuops.deployments.stdio import say

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
HARD_STOP_EXIT_CODE = 130
STRAY_GRACE_S = 5.0


class _CancelledConnectionNoise(logging.Filter):
    """Python 3.11's asyncio logs "Exception in callback StreamReaderProtocol.connection_made
    ..." with two tracebacks when a stream server's connection task is cancelled (3.12
    checks `task.cancelled()` first). Prefect's runner serves one, its control channel, with
    a connection per flow run, and our KeyboardInterrupt cancels it: a clean stop must not
    look like a crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, asyncio.CancelledError)
                    and "StreamReaderProtocol.connection_made" in record.getMessage())


_CANCELLED_CONNECTION_NOISE = _CancelledConnectionNoise()


class Stopper:
    """Owns the signal handlers of `gpuops up` and the order in which it stops."""

    def __init__(self, services: Sequence[Service], pid_file: Path, *,
                 deadline_s: float = 90.0) -> None:
        self.services = services
        self.pid_file = pid_file
        self.deadline_s = deadline_s
        self.stopping = False
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        """Our handlers for SIGINT/SIGTERM/SIGHUP (a shell's background job inherits SIGINT
        ignored, and the watchdog needs SIGINT to reach the main thread)."""
        logging.getLogger("asyncio").addFilter(_CANCELLED_CONNECTION_NOISE)  # added once
        for sig in STOP_SIGNALS:
            previous = signal.signal(sig, self._on_signal)
            self._previous.setdefault(sig, previous)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            self.hard_stop(f"second {signal.Signals(signum).name}")
        self.stopping = True
        raise KeyboardInterrupt

    def stop(self, end_runs: Callable[[], None] | None = None) -> None:
        """Stop everything; `end_runs` (if any) runs while the Prefect server is still up."""
        self.stopping = True
        self.install()  # Prefect's runner replaced our SIGTERM handler while it served
        deadline = threading.Timer(self.deadline_s, self.hard_stop,
                                   args=(f"stop took over {self.deadline_s:.0f} s",))
        deadline.daemon = True
        deadline.start()
        try:
            say("stopping gpuops...")
            stop_strays(self.services)
            if end_runs is not None:
                try:
                    end_runs()
                except Exception as e:  # noqa: BLE001 - bookkeeping must never keep components up
                    say(f"could not end gpuops' runs in Prefect: {type(e).__name__}: {e}")
            for service in reversed(self.services):
                service.stop()
            self.pid_file.unlink(missing_ok=True)
        finally:
            deadline.cancel()
        # Prefect's non-daemon threads can hold the interpreter at exit: never for long.
        guard = threading.Timer(15.0, os._exit, args=(0,))
        guard.daemon = True
        guard.start()

    def hard_stop(self, why: str) -> None:
        """SIGKILL every component group and every descendant, remove `up.pid`, exit."""
        for service in self.services:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(service.process.pid, signal.SIGKILL)
        for child in _descendants():
            with contextlib.suppress(psutil.Error):
                child.kill()
        self.pid_file.unlink(missing_ok=True)
        say(f"gpuops killed what was left ({why})")
        os._exit(HARD_STOP_EXIT_CODE)


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def stop_strays(services: Sequence[Service], grace_s: float = STRAY_GRACE_S) -> None:
    """End the processes of ours that are no component's: flow runs the runner left behind."""
    owned: set[int] = set()
    for service in services:
        owned.add(service.process.pid)
        with contextlib.suppress(psutil.Error):
            owned.update(p.pid for p in psutil.Process(service.process.pid)
                         .children(recursive=True))
    strays = [p for p in _descendants() if p.pid not in owned]
    for process in strays:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(strays, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)
