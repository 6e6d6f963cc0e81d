"""Group commit of the saga executor's writes (nexus.saga.grouped): what is queued while a group is written
goes together in the next one, each caller gets its own result, and failures stay with their items."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from nexus.saga.grouped import Grouped


class Recorder:
    """A flush that records the groups it was given, held open until `release` is set."""

    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.release = asyncio.Event()

    async def flush(self, items: list[int]) -> Sequence[int | BaseException]:
        self.groups.append(items)
        await self.release.wait()
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]


async def test_items_queued_during_a_write_go_together_in_the_next_one() -> None:
    """The first item is written alone at once; the four queued while it is being written are written
    together in one second group, and every caller gets the result of its own item."""
    recorder = Recorder()
    grouped: Grouped[int, int] = Grouped(recorder.flush)
    first = asyncio.create_task(grouped.submit(1))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(grouped.submit(i)) for i in (2, 3, 4, 5)]
    await asyncio.sleep(0)
    recorder.release.set()
    assert await first == 10
    assert [await t for t in rest] == [20, 30, 40, 50]
    assert recorder.groups == [[1], [2, 3, 4, 5]]
    assert grouped.batches == 2


async def test_an_items_failure_is_raised_to_its_own_caller_only() -> None:
    """An item the flush reports as failed raises in its caller; the others in its group get their results."""
    recorder = Recorder()
    recorder.release.set()
    grouped: Grouped[int, int] = Grouped(recorder.flush)
    results = await asyncio.gather(*(grouped.submit(i) for i in (1, -2, 3)), return_exceptions=True)
    assert results[0] == 10 and results[2] == 30
    assert isinstance(results[1], ValueError) and str(results[1]) == "bad -2"


async def test_a_failed_flush_fails_every_caller_of_its_group() -> None:
    """When the flush itself raises (the database is away), every caller of that group gets the error, and
    the next submission is written by a new flush."""
    release = asyncio.Event()
    calls: list[list[int]] = []

    async def failing(items: list[int]) -> Sequence[int | BaseException]:
        calls.append(items)
        await release.wait()
        if len(calls) == 2:
            raise ConnectionError("away")
        return items

    grouped: Grouped[int, int] = Grouped(failing)
    first = asyncio.create_task(grouped.submit(1))
    await asyncio.sleep(0)
    group = [asyncio.create_task(grouped.submit(i)) for i in (2, 3)]
    await asyncio.sleep(0)
    release.set()
    assert await first == 1
    results = await asyncio.gather(*group, return_exceptions=True)
    assert calls[1] == [2, 3]
    assert all(isinstance(r, ConnectionError) for r in results), results
    assert await grouped.submit(7) == 7


@pytest.mark.parametrize("size", [1, 16])
async def test_every_caller_of_a_group_is_answered(size: int) -> None:
    """However many callers queue at once, each is answered exactly once with its own result."""
    grouped: Grouped[int, int] = Grouped(lambda items: asyncio.sleep(0, result=[i + 1 for i in items]))
    assert await asyncio.gather(*(grouped.submit(i) for i in range(size))) == [i + 1 for i in range(size)]
