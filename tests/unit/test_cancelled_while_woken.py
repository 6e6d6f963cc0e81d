"""A loop that sleeps until woken or timed out stops when cancelled, whatever the moment the cancellation
lands, even the moment it is woken.

On Python 3.11 `asyncio.wait_for` loses a cancellation that arrives as the awaited thing completes (fixed in
3.12): a saga executor's claim loop, woken by a task finishing just as the process shut down, went on
forever and hung its shutdown (two CI runs: a saga test stuck in its teardown until pytest's 300 s
timeout). Every wait with a timeout in `src/` now uses `asyncio.timeout`, and ruff bans `asyncio.wait_for`
there (TID251 in pyproject.toml); the loops that sleep until woken share `retrying.sleep_until_set`, held
to it here, as the saga executor's sleep is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest

from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.retrying import sleep_until_set
from nexus.saga.executor import SagaExecutor
from nexus.settings import Settings
from nexus.store.database import Database

# How many loop turns pass between the wake-up and the cancellation: the moments that lost it with wait_for
# were the first three (measured on 3.11.7); a few more are cheap.
TURNS = range(8)


def _executor() -> SagaExecutor:
    settings = Settings(database_url="postgresql://unused.invalid/none", saga_listen=False)
    db = Database(settings)  # never opened: the sleep does not touch the database
    return SagaExecutor(db, Gateway(db, catalog=builtin_catalog()), settings, "cancel-test")


async def _stops_when_cancelled(turns: int, wake: Callable[[], None], sleep: Callable[[], Awaitable[None]]) -> bool:
    async def loop() -> None:
        while True:
            await sleep()

    task = asyncio.create_task(loop())
    for _ in range(3):  # asleep now
        await asyncio.sleep(0)
    wake()
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=0.5)
    if not done:  # the cancellation was lost: stop it for good before failing
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return bool(done)


@pytest.mark.parametrize("turns", TURNS)
async def test_the_saga_claim_loops_sleep_ends_on_cancel_even_as_it_is_woken(turns: int) -> None:
    executor = _executor()

    async def sleep() -> None:
        executor._wake.clear()  # as the claim loop does before each look
        await executor._sleep(30.0)

    assert await _stops_when_cancelled(turns, executor._wake.set, sleep), f"cancellation lost {turns} turns after"
    await executor.aclose()


@pytest.mark.parametrize("turns", TURNS)
async def test_the_shared_sleep_of_every_woken_loop_ends_on_cancel_even_as_it_is_woken(turns: int) -> None:
    """`sleep_until_set`, the sleep of the dispatcher's, the LISTEN connection's, the Kafka ingress's and the
    long poll's loops, keeps a cancellation that lands at any moment around a wake-up."""
    event = asyncio.Event()

    async def sleep() -> None:
        event.clear()
        await sleep_until_set(event, 30.0)

    assert await _stops_when_cancelled(turns, event.set, sleep), f"cancellation lost {turns} turns after"


async def test_wait_for_loses_such_a_cancellation_on_this_python() -> None:
    """The test above can fail: the same loop sleeping through `asyncio.wait_for` loses the cancellation at
    some moment (on 3.11; 3.12 fixed it, and then this records that the ban is only a precaution)."""
    import sys

    event = asyncio.Event()

    async def sleep() -> None:
        event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=30.0)

    lost = [turns for turns in TURNS if not await _stops_when_cancelled(turns, event.set, sleep)]
    if sys.version_info < (3, 12):
        assert lost, "wait_for kept every cancellation: the reason for the ban is gone"
    else:
        assert lost == []
