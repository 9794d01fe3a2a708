"""Standard output that outlives its reader, so `gpuops up 2>&1 | tee up.log` stops cleanly.

When the reader of a pipe is gone (Ctrl-C reached `tee` too, or it was closed), every write
fails with EPIPE. In `gpuops up` such a write can come from anywhere: our own messages, the
Prefect runner's logs, the output of a flow run it streams. Raised in the middle of stopping,
it would skip the cleanup and leave every component running. `protect_stdio()` swaps
`sys.stdout` and `sys.stderr` for streams that, on the first failed write, point their file
descriptor at /dev/null and drop what could not be written: output is lost, cleanup never is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, TextIO

_GONE = (errno.EPIPE, errno.EBADF, errno.ECONNRESET, errno.EIO)  # EIO: the terminal closed


class PipeSafeStream:
    """A text stream that turns writes to a closed reader into no-ops."""

    def __init__(self, wrapped: TextIO) -> None:
        self._wrapped = wrapped
        self.detached = False

    def write(self, text: str) -> int:
        if not self.detached:
            try:
                return self._wrapped.write(text)
            except (OSError, ValueError) as e:
                self._detach(e)
        return len(text)

    def flush(self) -> None:
        if not self.detached:
            try:
                self._wrapped.flush()
            except (OSError, ValueError) as e:
                self._detach(e)

    def _detach(self, error: Exception) -> None:
        if isinstance(error, OSError) and error.errno not in _GONE:
            raise error
        self.detached = True
        # Point the descriptor at /dev/null too: C code and logging handlers that hold the
        # descriptor or the old object must not fail either.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd = self._wrapped.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        # What is still buffered would fail again when Python flushes it at exit.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self._wrapped.buffer.flush()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding...
        return getattr(self._wrapped, name)


@contextlib.contextmanager
def protect_stdio() -> Iterator[None]:
    """`sys.stdout`/`sys.stderr` survive a vanished reader while inside; SIGPIPE is ignored
    (EPIPE is handled instead), whatever the parent process set."""
    previous_pipe = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    saved = sys.stdout, sys.stderr
    sys.stdout = PipeSafeStream(sys.stdout)  # type: ignore[assignment]
    sys.stderr = PipeSafeStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        signal.signal(signal.SIGPIPE, previous_pipe)


def say(message: str) -> None:
    """One line on stderr that can never raise."""
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)
