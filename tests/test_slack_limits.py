"""gpuops' Slack rate limits: Prefect global concurrency limits, slots taken by `take_slots`."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError

from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.tasks.restarts.slack_limits import LeakyBucket, SlackLimits, take_slots


def test_a_locked_database_answer_is_retried_at_once():
    """The SQLite server's 503 "database is locked" is retried within tens of milliseconds,
    not after Prefect's 2 s back-off, and the request stays the same."""
    bodies: list[bytes] = []
    answers = [503, 503, 200]

    def server(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        status = answers.pop(0)
        limit = {"id": str(uuid.uuid4()), "name": "gpuops-slack-posts-alerts", "limit": 60}
        return httpx.Response(status, json=[limit] if status == 200 else {})

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        async with get_client(httpx_settings={"transport": httpx.MockTransport(server)}
                              ) as client:
            started = loop.time()
            await take_slots(["gpuops-slack-posts-alerts"], 2, client=client)
            return loop.time() - started
    took = asyncio.run(scenario())
    assert answers == [] and len(bodies) == 3
    assert len(set(bodies)) == 1 and b'"mode":"rate_limit"' in bodies[0].replace(b" ", b"")
    assert took < 1.0  # Prefect's client alone would have waited 2 s, then 4 s


@pytest.mark.usefixtures("prefect_server")
def test_slots_are_taken_and_a_full_limit_makes_the_caller_wait():
    name = f"gpuops-test-limit-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with get_client() as client:
            await client.upsert_global_concurrency_limit_by_name(
                name, 2, slot_decay_per_second=2 / 60)
            await take_slots([name], 2)
            limit = await client.read_global_concurrency_limit_by_name(name)
            assert limit.active_slots == 2
            with pytest.raises(TimeoutError):  # the next slot frees in 30 s
                await asyncio.wait_for(take_slots([name], 1), timeout=1.5)
    asyncio.run(scenario())


@pytest.mark.usefixtures("prefect_server")
def test_a_missing_limit_is_an_error_not_a_free_pass():
    with pytest.raises(ConcurrencySlotAcquisitionError, match="must be created"):
        asyncio.run(take_slots([f"gpuops-missing-{uuid.uuid4().hex[:8]}"], 1))


def test_a_leaky_bucket_frees_slots_at_its_rate():
    bucket = LeakyBucket(capacity=2, per_second=1.0, at=100.0)
    assert bucket.fits(2, 100.0)
    bucket.charge(2, 100.0)
    assert not bucket.fits(1, 100.5)
    assert bucket.fits(1, 101.0)
    assert not bucket.fits(2, 101.0)


@pytest.mark.usefixtures("prefect_server")
def test_while_prefect_is_locked_a_take_that_fits_goes_ahead_and_is_recorded_later():
    """A locked server does not hold up a message this run's own bucket has room for; one
    beyond the run's own budget waits until the server answers."""
    channel = f"t{uuid.uuid4().hex[:8]}"
    name = f"gpuops-slack-posts-{channel}"
    calls: list[tuple[list[str], int, float]] = []
    unlocked = asyncio.Event()

    async def server(names: list[str], slots: int, *, locked_for: float = 60.0) -> bool:
        calls.append((names, slots, locked_for))
        if locked_for < 60.0 and not unlocked.is_set():
            await asyncio.sleep(0.01)
            return False  # still locked after `locked_for`
        await unlocked.wait()  # the background record lands once the server is back
        return True

    async def scenario() -> None:
        limits = SlackLimits(RestartPolicy(slack_posts_per_minute_per_channel=2), take=server)
        await asyncio.wait_for(limits.post({channel: 2}), 5)  # fits: goes ahead
        third = asyncio.create_task(limits.post({channel: 1}))  # beyond the run's budget
        await asyncio.sleep(0.3)
        assert not third.done()
        unlocked.set()
        await asyncio.wait_for(third, 5)
        await asyncio.wait_for(limits.finish(), 5)
    asyncio.run(scenario())
    records = [c for c in calls if c[2] == 60.0]
    assert records == [([name], 2, 60.0)]  # the take that went ahead, recorded once
    assert calls[-1][:2] == ([name], 1)  # the third message's slot came from the server
