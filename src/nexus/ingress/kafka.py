"""Kafka ingress: consume agents' steps, hand each poll batch to `Gateway.submit`, commit only what is resolved.

Why it is shaped this way:

* **Commit after resolution.** A record is resolved when the gateway has decided it (applied, buffered,
  ignored as a duplicate...) or when the dead-letter topic has acknowledged it. A partition's offset is
  committed only up to its last contiguous resolved record; a crash before the commit makes Kafka deliver
  the records again, and the gateway's decision (DUPLICATE) makes that harmless.
* **Transient errors are retried in place.** If Postgres is down, `submit` raises
  `TransientDatabaseError` having written nothing; the same records are submitted again with exponential
  backoff, never skipped and never committed past. The same holds for a dead-letter topic that does not
  acknowledge.
* **Only what can never work goes to the DLQ topic**: PARSE_ERROR, INVALID_EVENT, DATABASE_REJECTED and
  PLAN_MISMATCH, with the original bytes and key, and `x-dlq-*` headers saying why and where from.
* **Partitions are the unit of concurrency.** Records are keyed by order_id, so a partition's records
  belong to orders no other partition carries: a lane's slice, taken from the partitions it serves and
  sized to a time budget (`_Lane`), is one set-based `submit`, and the lanes run concurrently without
  contending for the same advisory locks.
* **Rebalances.** Before partitions are taken away, the in-flight batch is given a moment to resolve and
  its offsets are committed; offsets of partitions we no longer own are never committed afterwards. A
  commit refused because the group moved on is dropped: the new owner re-reads those records and the
  gateway answers DUPLICATE.

BUFFER_TIMEOUT is not produced to the DLQ topic: an expired buffered step has no offset left to hold back
(its record was committed when it was buffered). `Gateway.expire_buffered` (run by every `nexus serve`)
moves it to the dead_letters table, under its order's lock, exactly once; that table is its record, and
`nexus dlq` lists and redrives it like any other dead letter.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from nexus import metrics, tracing
from nexus.core.actors import kafka_actor
from nexus.core.backoff import RetryPolicy
from nexus.core.sequencing import Decision
from nexus.errors import ErrorCode, PermanentDatabaseError, TransientDatabaseError
from nexus.gateway import Gateway, Incoming, IngressKind, Outcome
from nexus.ingress.kafka_decode import decode_record
from nexus.retrying import Retrying, sleep_until_set
from nexus.settings import Settings

log = logging.getLogger(__name__)

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_MAX_ERROR_HEADER = 1000
_FIRST_SLICE = 100
"""Records in a lane's first slice, before it has measured anything."""
_MIN_SLICE = 100
"""The fewest records a slice takes when more wait, however slow they are: a transaction per record would
cost more per record and so be slower still."""
_SMOOTHING = 0.3
"""Weight of the newest slice in a lane's time per record."""
_BUSY_POLL_MS = 20
"""The longest a poll waits for the broker on idle lanes' partitions while another lane is in its transaction:
that lane is then polled for as soon as it is done."""
"""Weight of the newest slice in a lane's time per record."""


def retry_policy(settings: Settings, *, max_ms: float | None = None) -> RetryPolicy:
    """The schedule of the consumer's retry-in-place loops (`core.backoff`; a `Backoff` never gives up:
    skipping would lose records). `max_ms` caps it below `retry_max_ms` where a loop must come back fast."""
    cap = settings.retry_max_ms if max_ms is None else max_ms
    return RetryPolicy(base_ms=settings.retry_base_ms, max_ms=cap)


def traceparent_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The W3C traceparent a producer attached to the record, if any and well formed."""
    for name, value in headers or ():
        if name.lower() == "traceparent" and value:
            text = value.decode("ascii", "replace").strip()
            return text if _TRACEPARENT.match(text) else None
    return None


def dlq_headers(record: Any, code: ErrorCode, error: str) -> list[tuple[str, bytes]]:
    """The `x-dlq-*` headers of a dead-lettered record; the original headers are kept after them."""
    headers = [
        ("x-dlq-code", code.value.encode()),
        ("x-dlq-error", error[:_MAX_ERROR_HEADER].encode()),
        ("x-dlq-source-topic", record.topic.encode()),
        ("x-dlq-source-partition", str(record.partition).encode()),
        ("x-dlq-source-offset", str(record.offset).encode()),
    ]
    headers.extend((k, v) for k, v in (record.headers or ()) if not k.startswith("x-dlq-"))
    return headers


def _dead_reason(item: Incoming, outcome: Outcome) -> tuple[ErrorCode, str]:
    code = outcome.code or ErrorCode.INVALID_EVENT
    if outcome.error:
        return code, outcome.error
    return code, code.value


class _Lane:
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


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, ingress: KafkaIngress) -> None:
        self._ingress = ingress

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._ingress._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._ingress._on_assigned(set(assigned))


class KafkaIngress:
    """Consumes `settings.kafka_topic` in group `settings.kafka_group` and feeds `Gateway.submit`."""

    def __init__(self, gateway: Gateway, settings: Settings) -> None:
        self.gateway = gateway
        self.settings = settings
        self.max_records = settings.kafka_max_poll_records
        self.poll_timeout_ms = settings.kafka_poll_timeout_ms
        self.revoke_wait_s = settings.kafka_revoke_wait_s
        self.owned: set[TopicPartition] = set()
        self.assigned = asyncio.Event()
        """Set once the group has given this consumer its first assignment (possibly empty)."""
        self.committed: dict[TopicPartition, int] = {}
        """The last offsets this consumer committed, per partition."""
        self.resolved_records = 0
        self._to_commit: dict[TopicPartition, int] = {}
        self._commit_wanted = asyncio.Event()
        self._room = asyncio.Event()
        self._polled_at = time.monotonic()
        self._lanes: list[_Lane] = []
        self._lane_of: dict[TopicPartition, _Lane] = {}
        """Which lane serves a partition; kept after a revocation so that a partition coming back meets its
        own earlier slice (possibly still in flight) in the same lane, behind it."""
        self._consumer: Any = None
        self._producer: Any = None

    @property
    def queued_records(self) -> int:
        """Records fetched from the broker and waiting for a lane (not those in a lane's batch)."""
        return sum(sum(lane.queued.values()) for lane in self._lanes)

    async def run(self) -> None:
        """Consume until cancelled; the broker may come and go, the database may come and go."""
        s = self.settings
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.kafka_bootstrap,
            group_id=s.kafka_group,
            client_id=f"nexus-gateway-{os.getpid()}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_interval_ms=s.kafka_max_poll_interval_ms,
            session_timeout_ms=s.kafka_session_timeout_ms,
            heartbeat_interval_ms=s.kafka_heartbeat_interval_ms,
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=s.kafka_bootstrap,
            client_id=f"nexus-dlq-{os.getpid()}",
            acks="all",
            enable_idempotence=True,
        )
        committer: asyncio.Task[None] | None = None
        self._lanes = [_Lane(self, i) for i in range(max(1, s.kafka_lanes))]
        try:
            await self._start(self._producer, "producer")
            self._consumer.subscribe([s.kafka_topic], listener=_Listener(self))
            await self._start(self._consumer, "consumer")
            committer = asyncio.create_task(self._commit_loop(), name="kafka-commit")
            log.info("kafka ingress started", extra={"action": "kafka_start", "topic": s.kafka_topic})
            while True:
                await self._poll()
        finally:
            lanes, self._lanes = self._lanes, []
            for task in [lane.task for lane in lanes] + ([committer] if committer else []):
                task.cancel()
            await asyncio.gather(*(lane.task for lane in lanes), return_exceptions=True)
            if committer is not None:
                await asyncio.gather(committer, return_exceptions=True)
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self._commit()
            for client in (self._consumer, self._producer):
                with contextlib.suppress(Exception):
                    await client.stop()
            log.info("kafka ingress stopped", extra={"action": "kafka_stop"})

    async def _start(self, client: Any, what: str) -> None:
        retrying = Retrying(retry_policy(self.settings, max_ms=self.settings.kafka_reconnect_max_ms))
        while True:
            try:
                await client.start()
            except KafkaError as exc:
                log.warning("kafka %s cannot start yet: %s", what, exc, extra={"action": "kafka_start_retry"})
                await retrying.wait()
            else:
                return

    async def _poll(self) -> None:
        """Fetch for the lanes with room, each up to its room, and hand each partition's records to its lane:
        first what the client holds already, lane by lane; if none of them has anything, wait for the broker."""
        open_lanes = [(lane, [tp for tp in lane.queues if tp in self.owned]) for lane in self._lanes if lane.room()]
        open_lanes = [(lane, partitions) for lane, partitions in open_lanes if partitions]
        if not open_lanes:
            await self._wait_for_room()
            return
        try:
            fetched = 0
            for lane, partitions in open_lanes:
                fetched += await self._fetch(partitions, lane.room(), 0)
            if not fetched:
                # While another lane is busy its slice ends soon: come back for it rather than wait the whole
                # poll timeout on the idle lanes' partitions.
                idle = len(open_lanes) == len(self._lanes)
                timeout_ms = self.poll_timeout_ms if idle else min(self.poll_timeout_ms, _BUSY_POLL_MS)
                everything = [tp for _, partitions in open_lanes for tp in partitions]
                await self._fetch(everything, min(lane.room() for lane, _ in open_lanes), timeout_ms)
        except KafkaError as exc:
            log.warning("kafka poll failed: %s", exc, extra={"action": "kafka_poll_retry"})
            # The next poll is the retry; the wait stays at the first step of the schedule (the broker
            # client reconnects by itself, and a long wait here would only add lag once it is back).
            await Retrying(retry_policy(self.settings)).wait()

    async def _fetch(self, partitions: list[TopicPartition], limit: int, timeout_ms: int) -> int:
        """Up to `limit` records of `partitions`, handed to their lanes; how many."""
        batch: dict[TopicPartition, list[Any]] = await self._consumer.getmany(
            *partitions, timeout_ms=timeout_ms, max_records=min(limit, self.max_records)
        )
        self._polled_at = time.monotonic()
        # getmany hands out one fetched chunk at a time; take what is already buffered too, so that a
        # backlog becomes slices of the lane's size rather than many small ones.
        count = sum(len(r) for r in batch.values())
        try:
            while 0 < count < limit:
                more: dict[TopicPartition, list[Any]] = await self._consumer.getmany(
                    *partitions, timeout_ms=0, max_records=limit - count
                )
                if not more:
                    break
                for tp, records in more.items():
                    batch[tp] = batch.get(tp, []) + records
                    count += len(records)
        finally:
            # Even if a later getmany failed: the client's position is past what it returned, so dropping those
            # records would let a later commit skip them.
            for tp, records in batch.items():
                lane = self._lane_of.get(tp)
                if lane is not None and records and tp in self.owned:
                    lane.put(tp, records)
        return count

    async def _wait_for_room(self) -> None:
        """Until a lane takes its next batch (or a poll's timeout). A consumer that does not poll for
        `max_poll_interval` is put out of its group, so a long wait polls once with everything paused:
        nothing is returned, and the fetched records of those partitions are fetched again afterwards."""
        self._room.clear()
        await sleep_until_set(self._room, self.poll_timeout_ms / 1000)
        if time.monotonic() - self._polled_at < self.settings.kafka_max_poll_interval_ms / 3000:
            return
        held = list(self._consumer.assignment())
        try:
            self._consumer.pause(*held)
            await self._consumer.getmany(timeout_ms=0)
            self._polled_at = time.monotonic()
        except KafkaError as exc:
            log.warning("kafka poll failed: %s", exc, extra={"action": "kafka_poll_retry"})
        finally:
            with contextlib.suppress(IllegalStateError):
                self._consumer.resume(*held)

    def _decode(self, slices: dict[TopicPartition, list[Any]]) -> dict[TopicPartition, list[Incoming]]:
        """Each record of the slices as the gateway takes it (a refusal is an `Incoming` with its error)."""
        tenant = self.settings.kafka_tenant  # The topic is bound to one tenant
        return {
            tp: [
                decode_record(
                    r.value or b"", traceparent_of(r.headers) if r.headers else None, tenant, kafka_actor(r.topic)
                )
                for r in part
            ]
            for tp, part in slices.items()
        }

    async def _resolve(self, slices: dict[TopicPartition, list[Any]]) -> None:
        """Resolve slices of one or more partitions in one `submit`; then their offsets may be committed."""
        started = time.monotonic()
        decoded = self._decode(slices)
        records = [r for part in slices.values() for r in part]
        items = [item for tp in slices for item in decoded[tp]]
        if tracing.active():  # One consume span per partition in the batch
            with contextlib.ExitStack() as spans:
                for tp in slices:
                    traceparents = [i.traceparent for i in decoded[tp]]
                    spans.enter_context(tracing.consume_span(tp.topic, tp.partition, traceparents))
                outcomes = await self._submit(items)
        else:
            outcomes = await self._submit(items)
        dead = [(r, i, o) for r, i, o in zip(records, items, outcomes, strict=True) if o.is_dead_letter]
        if dead:
            await self._dead_letter(dead)
        elapsed = time.monotonic() - started
        for _ in records:
            metrics.EVENT_SETTLE.observe(elapsed)
        self.resolved_records += len(records)
        for tp, part in slices.items():
            next_offset: int = part[-1].offset + 1
            if tp in self.owned:
                self._to_commit[tp] = next_offset
                self._commit_wanted.set()
            highwater = self._consumer.highwater(tp)
            if highwater is not None:
                lag = max(0, highwater - next_offset)
                metrics.CONSUMER_LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(lag)

    async def _submit(self, items: list[Incoming]) -> list[Outcome]:
        """`Gateway.submit`, retried in place for as long as the failure is transient.

        A permanent failure that escapes `submit` (the database refuses even the dead-letter row, e.g. a
        NUL byte in the payload) is narrowed down one record at a time; each record the database refuses
        alone goes to the DLQ topic as DATABASE_REJECTED.
        """
        retrying = Retrying(retry_policy(self.settings))
        while True:
            try:
                return await self.gateway.submit(items, source=IngressKind.KAFKA)
            except TransientDatabaseError as exc:
                metrics.CONSUMER_RETRIES.inc()
                delay = retrying.next_delay_s()
                log.warning(
                    "transient failure, retrying in place",
                    extra={
                        "action": "kafka_retry",
                        "attempt": retrying.failures,
                        "delay_s": round(delay, 3),
                        "error": str(exc),
                    },
                )
                await asyncio.sleep(delay)
            except PermanentDatabaseError as exc:
                if len(items) == 1:
                    return [Outcome(items[0].event_id, Decision.DEAD_LETTER, ErrorCode.DATABASE_REJECTED, str(exc))]
                log.warning(
                    "slice refused, submitting one by one", extra={"action": "kafka_isolate", "error": str(exc)}
                )
                outcomes: list[Outcome] = []
                for item in items:
                    outcomes.extend(await self._submit([item]))
                return outcomes

    async def _dead_letter(self, dead: list[tuple[Any, Incoming, Outcome]]) -> None:
        """Produce each record to the DLQ topic and wait for every ack, retrying in place until acked."""
        waiting = list(dead)
        retrying = Retrying(retry_policy(self.settings))
        while waiting:
            sends = []
            for record, item, outcome in waiting:
                code, error = _dead_reason(item, outcome)
                sends.append(self._send_dlq(record, code, error))
            results = await asyncio.gather(*sends, return_exceptions=True)
            failed = []
            for entry, result in zip(waiting, results, strict=True):
                if isinstance(result, BaseException):
                    if not isinstance(result, KafkaError):
                        raise result
                    failed.append(entry)
                else:
                    metrics.DLQ_MESSAGES.labels(code=result.value).inc()
                    record, _, _ = entry
                    log.info(
                        "dead-lettered to kafka",
                        extra={
                            "action": "kafka_dlq",
                            "code": result.value,
                            "partition": record.partition,
                            "offset": record.offset,
                            "event_id": entry[1].event_id,
                        },
                    )
            waiting = failed
            if waiting:
                metrics.CONSUMER_RETRIES.inc()
                await retrying.wait()

    async def _send_dlq(self, record: Any, code: ErrorCode, error: str) -> ErrorCode:
        fut = await self._producer.send(
            self.settings.kafka_dlq_topic,
            value=record.value,
            key=record.key,
            headers=dlq_headers(record, code, error),
        )
        await fut
        return code

    async def _commit_loop(self) -> None:
        """Commit resolved offsets as they appear, one commit at a time, off the workers' path."""
        retrying = Retrying(retry_policy(self.settings))
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            if await self._commit():
                retrying.reset()
                continue
            self._commit_wanted.set()
            await retrying.wait()

    async def _commit(self) -> bool:
        """Commit what is resolved in partitions we own; False if the broker should be asked again."""
        offsets = {tp: off for tp, off in self._to_commit.items() if tp in self.owned}
        for tp in set(self._to_commit) - set(offsets):
            del self._to_commit[tp]
        if not offsets:
            return True
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # The group moved on: whoever owns these partitions now re-reads from the last commit.
            log.info("commit refused after rebalance: %s", exc, extra={"action": "kafka_commit_refused"})
            for tp, off in offsets.items():
                if self._to_commit.get(tp) == off:
                    del self._to_commit[tp]
            return True
        except KafkaError as exc:
            log.warning("commit failed, will retry: %s", exc, extra={"action": "kafka_commit_retry"})
            return False
        for tp, off in offsets.items():
            self.committed[tp] = off
            if self._to_commit.get(tp) == off:
                del self._to_commit[tp]
        return True

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Let the revoked partitions' in-flight slices resolve (bounded), commit them, stop serving them."""
        busy = []
        for tp in revoked:
            lane = self._lane_of.get(tp)
            if lane is not None:
                lane.forget(tp)
                if tp in lane.inflight:
                    busy.append(lane)
        if busy:
            # A batch still running past the wait goes on (it may hold other partitions' records too); its
            # revoked partitions are not committed afterwards, and their new owner's DUPLICATEs make that safe.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.revoke_wait_s):
                    await asyncio.gather(*(lane.idle.wait() for lane in busy))
        offsets = {tp: off for tp, off in self._to_commit.items() if tp in revoked}
        if offsets:
            try:
                await self._consumer.commit(offsets)
                self.committed.update(offsets)
            except KafkaError as exc:
                log.info("commit before revocation failed: %s", exc, extra={"action": "kafka_commit_refused"})
        for tp in revoked:
            self._to_commit.pop(tp, None)
        self.owned -= revoked
        log.info("partitions revoked: %s", sorted(p.partition for p in revoked), extra={"action": "kafka_revoked"})

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.owned = set(assigned)
        for tp in sorted(assigned, key=lambda t: (t.topic, t.partition)):
            lane = self._lane_of.get(tp)
            if lane is None or lane not in self._lanes:
                # The lane serving the fewest owned partitions: the load spreads whatever the assignor gave us.
                lane = min(self._lanes, key=lambda candidate: sum(t in self.owned for t in candidate.queues))
                self._lane_of[tp] = lane
            lane.serve(tp)
        self.assigned.set()
        log.info("partitions assigned: %s", sorted(p.partition for p in assigned), extra={"action": "kafka_assigned"})
