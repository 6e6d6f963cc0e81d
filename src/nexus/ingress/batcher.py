"""Group commit: concurrent requests share transactions, each answered with its own outcomes.

Orders are partitioned by hash across a few workers, so two shared transactions never wait on each
other's advisory locks. A worker takes what is queued for its partition (up to `max_events`, optionally
waiting `window_ms` for more), submits it as one batch and splits the outcomes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import zlib
from collections import defaultdict
from collections.abc import Sequence

from nexus import metrics
from nexus.gateway import Gateway, Incoming, Outcome


@dataclasses.dataclass(slots=True)
class _Request:
    items: list[Incoming]
    future: asyncio.Future[list[Outcome]]


class GroupCommitter:
    """Shares `Gateway.submit` transactions between concurrent callers."""

    def __init__(self, gateway: Gateway, *, workers: int = 4, max_events: int = 500, window_ms: float = 0.0):
        self.gateway = gateway
        self.max_events = max_events
        self.window_s = window_ms / 1000.0
        self._queues: list[asyncio.Queue[_Request]] = [asyncio.Queue() for _ in range(max(1, workers))]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(q), name=f"group-commit-{i}") for i, q in enumerate(self._queues)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def _partition(self, item: Incoming) -> int:
        key = item.envelope.order_id if item.envelope is not None else ""
        return zlib.crc32(key.encode()) % len(self._queues)

    async def submit(self, items: Sequence[Incoming]) -> list[Outcome]:
        """Decide `items` in shared transactions; outcomes in the items' order."""
        if not self._tasks:
            return await self.gateway.submit(items)
        loop = asyncio.get_running_loop()
        parts: dict[int, list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            parts[self._partition(item)].append(i)
        if len(parts) == 1:  # one order (one event per request, the usual case): no gather, no reordering
            (partition,) = parts
            single: asyncio.Future[list[Outcome]] = loop.create_future()
            self._queues[partition].put_nowait(_Request(list(items), single))
            return await single
        futures: list[tuple[list[int], asyncio.Future[list[Outcome]]]] = []
        for partition, indexes in parts.items():
            future: asyncio.Future[list[Outcome]] = loop.create_future()
            self._queues[partition].put_nowait(_Request([items[i] for i in indexes], future))
            futures.append((indexes, future))
        results: list[Outcome | None] = [None] * len(items)
        # Wait for every partition even if one fails, so no shared batch is left half-answered.
        done = await asyncio.gather(*(f for _, f in futures), return_exceptions=True)
        for (indexes, _), outcome in zip(futures, done, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            for i, o in zip(indexes, outcome, strict=True):
                results[i] = o
        return [r for r in results if r is not None]

    async def _work(self, queue: asyncio.Queue[_Request]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            count = len(batch[0].items)
            deadline = loop.time() + self.window_s
            while count < self.max_events:
                try:
                    request = queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        async with asyncio.timeout(remaining):
                            request = await queue.get()
                    except TimeoutError:
                        break
                batch.append(request)
                count += len(request.items)
            await self._run(batch)

    async def _run(self, batch: list[_Request]) -> None:
        items = [item for request in batch for item in request.items]
        metrics.HTTP_BATCH_SIZE.observe(len(items))
        try:
            outcomes = await self.gateway.submit(items)
        except Exception as exc:  # noqa: BLE001 - every caller of the shared batch must hear of it
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        start = 0
        for request in batch:
            end = start + len(request.items)
            if not request.future.done():
                request.future.set_result(outcomes[start:end])
            start = end
