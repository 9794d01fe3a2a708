"""How `gpuops up` stops, on real processes: a second signal while a component refuses to
stop kills everything at once; output to a pipe whose reader is gone never raises."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

from gpuops.deployments.stdio import PipeSafeStream
from tests.helpers import wait_for

# A stand-in for `run_up`: one component that ignores SIGTERM (its stop would wait out the
# grace period), the Stopper's handlers, and the same stop call.
STUBBORN_UP = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    from gpuops.deployments.services import Service, spawn
    from gpuops.deployments.stopping import Stopper

    home = Path(sys.argv[1])
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    process, log = spawn("stubborn", [sys.executable, "-c", code], home=home)
    pid_file = home / "up.pid"
    pid_file.write_text("pid")
    stopper = Stopper([Service("stubborn", "", process, log)], pid_file)
    try:  # as in run_up: the handlers inside the try, so a signal after them ends in stop()
        stopper.install()
        print("component", process.pid, flush=True)  # ready: the test may signal now
        while True:
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        stopper.stop()
    """)


def test_a_second_signal_during_a_stuck_stop_kills_everything_and_removes_up_pid(
        tmp_path: Path) -> None:
    up = subprocess.Popen([sys.executable, "-c", STUBBORN_UP, str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    component = psutil.Process(int(up.stdout.readline().split()[1]))  # type: ignore[union-attr]
    wait_for(lambda: "signal.SIG_IGN" in " ".join(component.cmdline()), message="component")

    up.send_signal(signal.SIGINT)
    assert up.stderr.readline() == "stopping gpuops...\n"  # type: ignore[union-attr]
    up.send_signal(signal.SIGTERM)  # the second signal

    assert up.wait(10) == 130
    _, alive = psutil.wait_procs([component], timeout=5)
    assert alive == []
    assert not (tmp_path / "up.pid").exists()
    assert "killed what was left (second SIGTERM)" in up.stderr.read()  # type: ignore[union-attr]


# A stand-in for `serve_all()` under `gpuops up`: an asyncio stream server with a client
# connected (Prefect's runner has one, its control channel, a connection per flow run).
SERVING_UP = textwrap.dedent("""\
    import asyncio, sys
    from pathlib import Path
    from gpuops.deployments.stopping import Stopper

    Stopper([], Path(sys.argv[1]) / "up.pid").install()

    async def serve():
        async def handle(reader, writer):
            await reader.read(1)
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        await asyncio.sleep(0.2)  # the server's connection task is waiting for data
        print("serving", flush=True)
        await asyncio.sleep(600)
        return client

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        print("stopped", flush=True)
    """)


def test_a_ctrl_c_while_a_flow_run_is_connected_to_the_runner_stops_without_a_traceback(
        tmp_path: Path) -> None:
    up = subprocess.Popen([sys.executable, "-c", SERVING_UP, str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert up.stdout.readline() == "serving\n"  # type: ignore[union-attr]

    up.send_signal(signal.SIGINT)  # lands in the event loop's wait, as a Ctrl-C does
    out, err = up.communicate(timeout=10)
    assert (up.returncode, out) == (0, "stopped\n")
    assert "Traceback" not in err, err


def test_writes_to_a_pipe_whose_reader_is_gone_are_dropped_not_raised() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader died
    stream = PipeSafeStream(os.fdopen(write_end, "w", buffering=1))

    assert stream.write("stopping gpuops...\n") == len("stopping gpuops...\n")
    stream.flush()
    assert stream.detached
    assert stream.write("more\n") == len("more\n")
    os.write(write_end, b"C code writing to the same descriptor does not fail either\n")
