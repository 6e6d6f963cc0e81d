"""Group commit for the saga executor's tasks: many tasks' writes of the same kind in one statement and one
transaction (the attempts marked before the calls, the calls' outcomes).

A task hands its item to `Grouped.submit` and waits for its own result. The first task to find its item not
yet written writes everything queued by then, its own included, in one `flush`; the tasks that queued
meanwhile find theirs written when their turn comes. No task of its own, no timer: a batch is whatever
arrived while the previous one was being written, so one item alone is written at once, and a busy
executor writes in batches as large as its load.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Flush = Callable[[list[T]], Awaitable[Sequence[R | BaseException]]]


class Grouped(Generic[T, R]):
    """Items written together by `flush`, which returns one result per item, in order (an exception
    instance: that item failed, alone)."""

    def __init__(self, flush: Flush[T, R]) -> None:
        self._flush = flush
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._lock = asyncio.Lock()
        self.batches = 0
        """How many flushes ran (tests and benchmarks read it)."""

    async def submit(self, item: T) -> R:
        """Write `item` with whatever else is queued; its result, or its exception raised."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        async with self._lock:
            if not future.done():
                batch, self._queue = self._queue, []
                self.batches += 1
                try:
                    results = await self._flush([queued for queued, _ in batch])
                except BaseException as exc:
                    for _, waiting in batch:
                        if waiting is future or waiting.done():
                            continue
                        if isinstance(exc, asyncio.CancelledError):
                            waiting.cancel()  # the flushing task was cancelled (shutdown): so are theirs
                        else:
                            waiting.set_exception(exc)
                    raise
                for (_, waiting), result in zip(batch, results, strict=True):
                    if isinstance(result, BaseException):
                        waiting.set_exception(result)
                    else:
                        waiting.set_result(result)
        return await future
