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
  PLAN_MISMATCH, with the original bytes and key, and `x-dlq-*` headers saying why and where from. A record
  the database refuses is isolated by the gateway's one policy for every door (`core/decide/isolation.py`).
  A record that would take its tenant beyond a quota goes there too (QUOTA_EXCEEDED, nexus.auth.quotas:
  admitted record by record, no dead-letter row), and the stream goes on.
* **Partitions are the unit of concurrency.** Records are keyed by order_id, so a partition's records
  belong to orders no other partition carries: a lane's slice, taken from the partitions it serves and
  sized to a time budget (`kafka_lanes.Lane`), is one set-based `submit`, and the lanes run concurrently without
  contending for the same advisory locks.
* **Rebalances.** Before partitions are taken away, the in-flight batch is given a moment to resolve and
  its offsets are committed; offsets of partitions we no longer own are never committed afterwards. A
  commit refused because the group moved on is dropped: the new owner re-reads those records and the
  gateway answers DUPLICATE.

Its parts, one job each: `KafkaIngress` polls and follows rebalances, `kafka_lanes.Lane` resolves slices,
`kafka_commits.OffsetCommits` commits offsets, `kafka_dlq` produces to the DLQ topic.

BUFFER_TIMEOUT is not produced to the DLQ topic: an expired buffered step has no offset left to hold back
(its record was committed when it was buffered). `Gateway.expire_buffered` (run by every `nexus serve`)
moves it to the dead_letters table, under its order's lock, exactly once; that table is its record, and
`nexus dlq` lists and redrives it like any other dead letter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from nexus import metrics, tracing
from nexus.auth import quotas
from nexus.core.actors import kafka_actor
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming, IngressKind
from nexus.errors import QuotaExceededError, TransientDatabaseError
from nexus.gateway import Gateway
from nexus.ingress.kafka_commits import OffsetCommits
from nexus.ingress.kafka_decode import decode_record
from nexus.ingress.kafka_dlq import dead_letter
from nexus.ingress.kafka_lanes import Lane, retry_policy
from nexus.retrying import Retrying, sleep_until_set
from nexus.settings import Settings
from nexus_wire.codes import Decision

log = logging.getLogger(__name__)

_BUSY_POLL_MS = 20
"""The longest a poll waits for the broker on idle lanes' partitions while another lane is in its transaction:
that lane is then polled for as soon as it is done."""


_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def traceparent_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The W3C traceparent a producer attached to the record, if any and well formed."""
    for name, value in headers or ():
        if name.lower() == "traceparent" and value:
            text = value.decode("ascii", "replace").strip()
            return text if _TRACEPARENT.match(text) else None
    return None


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka ships no type hints: its base class is Any
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
        self.resolved_records = 0
        self.commits = OffsetCommits(self)
        self._room = asyncio.Event()
        self._polled_at = time.monotonic()
        self._lanes: list[Lane] = []
        self._lane_of: dict[TopicPartition, Lane] = {}
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
            **s.kafka_security().client_kwargs(),
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=s.kafka_bootstrap,
            client_id=f"nexus-dlq-{os.getpid()}",
            acks="all",
            enable_idempotence=True,
            **s.kafka_security().client_kwargs(),
        )
        committer: asyncio.Task[None] | None = None
        self._lanes = [Lane(self, i) for i in range(max(1, s.kafka_lanes))]
        try:
            await self._start(self._producer, "producer")
            self._consumer.subscribe([s.kafka_topic], listener=_Listener(self))
            await self._start(self._consumer, "consumer")
            committer = asyncio.create_task(self.commits.loop(), name="kafka-commit")
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
                    await self.commits.commit()
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
                outcomes = await self._submit_within_quotas(items)
        else:
            outcomes = await self._submit_within_quotas(items)
        dead = [(r, i, o) for r, i, o in zip(records, items, outcomes, strict=True) if o.is_dead_letter]
        if dead:
            await dead_letter(self._producer, self.settings, dead)
        elapsed = time.monotonic() - started
        for _ in records:
            metrics.EVENT_SETTLE.observe(elapsed)
        self.resolved_records += len(records)
        for tp, part in slices.items():
            next_offset: int = part[-1].offset + 1
            if tp in self.owned:
                self.commits.resolved(tp, next_offset)
            highwater = self._consumer.highwater(tp)
            if highwater is not None:
                lag = max(0, highwater - next_offset)
                metrics.CONSUMER_LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(lag)

    async def _submit_within_quotas(self, items: list[Incoming]) -> list[Outcome]:
        """`_submit` of the items within their tenant's quotas; each other one is a QUOTA_EXCEEDED outcome (its
        record goes to the DLQ topic, no dead-letter row) and the stream goes on."""
        verdicts = await self._admit(items)
        admitted = [i for i, v in zip(items, verdicts, strict=True) if v is None]
        outcomes = iter(await self._submit(admitted) if admitted else [])
        return [
            next(outcomes) if v is None else Outcome(i.event_id, Decision.DEAD_LETTER, v.code, v.message)
            for i, v in zip(items, verdicts, strict=True)
        ]

    async def _admit(self, items: list[Incoming]) -> list[QuotaExceededError | None]:
        retrying = Retrying(retry_policy(self.settings))
        while True:
            try:
                return await quotas.admit_items(self.gateway.db, items)
            except TransientDatabaseError:
                metrics.CONSUMER_RETRIES.inc()
                await asyncio.sleep(retrying.next_delay_s())

    async def _submit(self, items: list[Incoming]) -> list[Outcome]:
        """`Gateway.submit`, retried in place for as long as the failure is transient.

        A permanent failure never escapes `submit`: the gateway's one isolation policy
        (`core/decide/isolation.py`) answers a record the database refuses as a dead letter (DATABASE_REJECTED
        when even its dead-letter row is refused), and every dead letter goes to the DLQ topic.
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
        await self.commits.before_revocation(revoked)
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
