"""LatestSaver: background saves, the latest version of each key, one write at a time."""

from __future__ import annotations

import asyncio

import pytest

from gpuops.common.latest import LatestSaver


def test_a_burst_of_saves_writes_the_first_and_the_latest_value_once_each():
    written: list[tuple[str, int]] = []
    gate = asyncio.Event()

    async def write(value: tuple[str, int]) -> None:
        await gate.wait()  # the server is slow: saves pile up behind the first write
        written.append(value)

    async def scenario() -> None:
        saver = LatestSaver(write)
        saver.save("a", ("a", 0))
        await asyncio.sleep(0)  # its write is on its way
        for i in range(1, 5):
            saver.save("a", ("a", i))
        saver.save("b", ("b", 0))
        await asyncio.sleep(0)
        gate.set()
        await saver.flush()
    asyncio.run(scenario())
    assert sorted(written) == [("a", 0), ("a", 4), ("b", 0)]
    assert written.index(("a", 0)) < written.index(("a", 4))


def test_a_mutable_value_is_written_as_it_is_when_its_turn_comes():
    written: list[list[int]] = []

    async def write(rows: list[int]) -> None:
        written.append(list(rows))
        await asyncio.sleep(0.01)

    async def scenario() -> None:
        saver = LatestSaver(write)
        rows = [1]
        saver.save("timeline", rows)
        await asyncio.sleep(0)  # the first write has taken [1]
        rows.append(2)
        saver.save("timeline", rows)
        rows.append(3)
        saver.save("timeline", rows)
        await saver.flush()
    asyncio.run(scenario())
    assert written == [[1], [1, 2, 3]]


def test_flush_raises_a_failed_write_and_a_later_save_writes_again():
    attempts: list[int] = []

    async def write(value: int) -> None:
        attempts.append(value)
        if len(attempts) == 1:
            raise ConnectionError("server unavailable")

    async def scenario() -> None:
        saver = LatestSaver(write)
        saver.save("cursor", 1)
        with pytest.raises(ConnectionError, match="server unavailable"):
            await saver.flush()
        saver.save("cursor", 2)
        await saver.flush()  # nothing left to raise
    asyncio.run(scenario())
    assert attempts == [1, 2]
