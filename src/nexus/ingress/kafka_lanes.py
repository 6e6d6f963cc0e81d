"""A lane of the Kafka ingress: the partitions it serves, their fetched records, and the slices it resolves one
`submit` at a time (why it is shaped so: `nexus.ingress.kafka`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError

from nexus import metrics
from nexus.retrying import Retrying
from nexus.settings import Settings
from nexus_wire.backoff import RetryPolicy

if TYPE_CHECKING:
    from nexus.ingress.kafka import KafkaIngress

log = logging.getLogger("nexus.ingress.kafka")  # the ingress's one logger: its parts log under its name

_FIRST_SLICE = 100
"""Records in a lane's first slice, before it has measured anything."""
_MIN_SLICE = 100
"""The fewest records a slice takes when more wait, however slow they are: a transaction per record would
cost more per record and so be slower still."""
_SMOOTHING = 0.3
"""Weight of the newest slice in a lane's time per record."""


def retry_policy(settings: Settings, *, max_ms: float | None = None) -> RetryPolicy:
    """The schedule of the consumer's retry-in-place loops (`nexus_wire.backoff`; a `Backoff` never gives up:
    skipping would lose records). `max_ms` caps it below `retry_max_ms` where a loop must come back fast."""
    cap = settings.retry_max_ms if max_ms is None else max_ms
    return RetryPolicy(base_ms=settings.retry_base_ms, max_ms=cap)


class Lane:
    """Resolves the records of the partitions it serves, one `submit` at a time, in slices sized to a time budget.

    A partition is served by one lane for as long as this consumer owns it (and again if it comes back),
    so its records are resolved in offset order and its committed offset only ever moves forward. A
    lane merges the records waiting in all its partitions into one set-based `submit`: partitions hold
    disjoint orders, so one transaction can take them together, and the number of transactions follows the
    load, not the number of partitions. With `kafka_lanes` above one, lanes run side by side; their transactions
    never wait on each other's advisory locks.

    How many records one `submit` takes is `size`: as many as the lane's measured time per record (a moving
    average over its slices, contention included) says fit in `kafka_slice_ms`, at most the poll size. Each
    slice's offsets are committed once it is resolved, so a large backlog is applied and committed in short
    transactions instead of long ones. A lane is polled for only while it has no slice in flight nor records
    waiting, and then for at most one slice (`room`): a record waits in the broker (or in the client's fetch
    buffer) until its lane is free, not in memory behind a slice, so its time from poll to commit is one
    slice and its commit. (Fetching the next slice during the transaction, to decode it meanwhile, was
    measured: decoding a slice takes milliseconds, waiting behind the slice in flight all of that slice's
    time.)
    """

    def __init__(self, ingress: KafkaIngress, index: int) -> None:
        self.ingress = ingress
        self.queues: dict[TopicPartition, collections.deque[list[Any]]] = {}
        self.queued: dict[TopicPartition, int] = {}
        self.inflight: set[TopicPartition] = set()
        self.idle = asyncio.Event()
        self.idle.set()
        self.per_record_s: float | None = None
        """Moving average of a slice's resolution time per record; None until the first slice."""
        self._wakeup = asyncio.Event()
        self._turn = 0
        self._retrying = Retrying(retry_policy(ingress.settings))
        self.task = asyncio.create_task(self._run(), name=f"kafka-lane-{index}")

    def serve(self, tp: TopicPartition) -> None:
        self.queues.setdefault(tp, collections.deque())
        self.queued.setdefault(tp, 0)

    def forget(self, tp: TopicPartition) -> None:
        self.queues.pop(tp, None)
        self.queued.pop(tp, None)

    def put(self, tp: TopicPartition, records: list[Any]) -> None:
        queue = self.queues.get(tp)
        if queue is None:
            return
        queue.append(records)
        self.queued[tp] += len(records)
        self._wakeup.set()

    @property
    def size(self) -> int:
        """Records in the next slice: what fits in the time budget at the measured rate, within the poll size."""
        limit = self.ingress.max_records
        budget_s = self.ingress.settings.kafka_slice_ms / 1000
        if budget_s <= 0:
            return limit
        if self.per_record_s is None:
            return min(limit, _FIRST_SLICE)
        return max(min(limit, _MIN_SLICE), min(limit, int(budget_s / self.per_record_s)))

    def room(self) -> int:
        """How many records the poll may fetch for this lane: its next slice, once it has neither a slice in
        flight nor records waiting (those it is about to take: more fetched now would wait behind them)."""
        if self.inflight or any(self.queued.values()):
            return 0
        return self.size

    def drop(self, tp: TopicPartition) -> None:
        if tp in self.queues:
            self.queues[tp].clear()
            self.queued[tp] = 0

    def measured(self, records: int, seconds: float) -> None:
        """A slice of `records` was resolved in `seconds`: update the time per record."""
        sample = seconds / records
        previous = self.per_record_s
        self.per_record_s = sample if previous is None else previous + _SMOOTHING * (sample - previous)

    def _take(self) -> dict[TopicPartition, list[Any]]:
        """Queued records of the lane's partitions, oldest first per partition, `size` of them in all (a
        fetched chunk is split if need be; its rest stays first in its queue).

        The partition that goes first rotates, so a backlog in one cannot starve the others."""
        limit = self.size
        order = list(self.queues)
        if order:
            self._turn = (self._turn + 1) % len(order)
            order = order[self._turn :] + order[: self._turn]
        taken: dict[TopicPartition, list[Any]] = {}
        count = 0
        for tp in order:
            queue = self.queues[tp]
            while queue and count < limit:
                records = queue.popleft()
                if count + len(records) > limit:
                    records, rest = records[: limit - count], records[limit - count :]
                    queue.appendleft(rest)
                taken.setdefault(tp, []).extend(records)
                self.queued[tp] -= len(records)
                count += len(records)
            if count >= limit:
                break
        return taken

    async def _run(self) -> None:
        while True:
            slices = self._take()
            if not slices:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self.idle.clear()
            self.inflight = set(slices)
            started = time.monotonic()
            try:
                await self.ingress._resolve(slices)
                self._retrying.reset()
                self.measured(sum(len(part) for part in slices.values()), time.monotonic() - started)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug or an unforeseen failure: rewind to these records and try again later; moving on would
                # let a later commit skip them.
                log.exception("lane batch failed, rewinding", extra={"action": "kafka_rewind"})
                for tp, part in slices.items():
                    self.drop(tp)
                    if tp in self.queues:
                        with contextlib.suppress(IllegalStateError):
                            self.ingress._consumer.seek(tp, part[0].offset)
                metrics.CONSUMER_RETRIES.inc()
                await self._retrying.wait()
            finally:
                self.inflight = set()
                self.idle.set()
                self.ingress._room.set()  # this lane's next slice is fetched now
