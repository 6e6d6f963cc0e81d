"""The Kafka ingress against the real broker and a real PostgreSQL: poison records, traceparent, the
consumer beside the HTTP API, buffer timeouts, the `nexus dlq` command, and how far ahead of its lanes it
fetches."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from nexus import metrics
from nexus.app import sweep_buffer
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming, IngressKind
from nexus.gateway import Gateway
from nexus.ingress.kafka_lanes import Lane
from nexus.kafka_io import read_topic
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT, api_headers, root_headers, settings_env
from tests.factories import plan_json, step_json
from tests.helpers import wait_until
from tests.integration.kafka_helpers import (
    BOOTSTRAP,
    committed_offsets,
    kafka_settings,
    outbox_count,
    plan_events,
    produce_plans,
    producer,
    running_ingress,
    wait_committed_to_end,
)

pytestmark = pytest.mark.kafka
__all__ = ["kafka_settings"]  # the fixture, imported for pytest

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def dlq_count(code: str) -> float:
    return metrics.REGISTRY.get_sample_value("nexus_dlq_messages_total", {"code": code}) or 0.0


async def test_poison_records_go_to_the_dlq_and_the_partition_goes_on(kafka_settings: Settings) -> None:
    """Not-JSON, invalid-envelope and other-plan records mid-partition are dead-lettered; later steps apply."""
    s = kafka_settings
    order = f"poison-{uuid.uuid4().hex[:6]}"
    steps = plan_json(order, "plan-a")
    invalid = json.dumps({"event_id": str(uuid.uuid4()), "order_id": order, "event_type": "Nope"}).encode()
    mismatch = step_json(order, "plan-b", 3)
    before = {c: dlq_count(c) for c in ("PARSE_ERROR", "INVALID_EVENT", "PLAN_MISMATCH")}
    async with producer(s) as p:
        await p.send(steps[0], traceparent=TRACEPARENT)
        await p.send(steps[1])
        poison = [
            await p.send(b"{not json", key=order),
            await p.send(invalid, key=order),
            await p.send(mismatch),
        ]
        for event in steps[2:]:
            await p.send(event)
    assert len({d.partition for d in poison}) == 1, "all records of an order share its partition"

    async with running_ingress(s):
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)

    conn = await asyncpg.connect(s.database_url)
    try:
        seqs = await conn.fetch("SELECT seq_id, traceparent FROM outbox WHERE order_id = $1 ORDER BY position", order)
        table = await conn.fetch("SELECT source, code FROM dead_letters ORDER BY id")
        status = await conn.fetchval("SELECT status FROM orders WHERE order_id = $1", order)
    finally:
        await conn.close()
    assert [r["seq_id"] for r in seqs] == [1, 2, 3, 4, 5] and status == "completed"
    assert seqs[0]["traceparent"] == TRACEPARENT, "the record's traceparent is kept with the event"
    assert [(r["source"], r["code"]) for r in table] == [("kafka", "PARSE_ERROR"), ("kafka", "INVALID_EVENT")]

    dlq = await read_topic(BOOTSTRAP, s.kafka_dlq_topic)
    assert [r.headers["x-dlq-code"] for r in dlq] == ["PARSE_ERROR", "INVALID_EVENT", "PLAN_MISMATCH"]
    for record, source in zip(dlq, poison, strict=True):
        assert record.key == order.encode()
        assert record.headers["x-dlq-source-topic"] == s.kafka_topic
        assert int(record.headers["x-dlq-source-partition"]) == source.partition
        assert int(record.headers["x-dlq-source-offset"]) == source.offset
        assert record.headers["x-dlq-error"]
    assert dlq[0].value == b"{not json" and dlq[1].value == invalid
    assert json.loads(dlq[2].value or b"")["event_id"] == mismatch["event_id"]
    for code, count in before.items():
        assert dlq_count(code) == count + 1


async def test_serve_kafka_consumes_beside_the_http_api(kafka_settings: Settings, start_gateway) -> None:  # type: ignore[no-untyped-def]
    """`nexus serve --kafka` applies plans from the topic while status queries answer over HTTP; the decision
    log names each step's actor `kafka:<topic>`."""
    plans = plan_events(f"serve-{uuid.uuid4().hex[:6]}", 30)
    _, base = start_gateway("--kafka", "--no-dispatcher", settings_=kafka_settings)
    async with producer(kafka_settings) as p:
        await produce_plans(p, plans)
    orders = [plan[0]["order_id"] for plan in plans]
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as api:

        async def all_completed() -> bool:
            for order in orders:
                r = await api.get(f"/v1/orders/{order}")
                if r.status_code != 200 or r.json()["status"] != "completed":
                    return False
            return True

        await wait_until(all_completed, 60, "every plan completed, seen over HTTP", interval=0.2)
        body = (await api.get(f"/v1/orders/{orders[0]}")).json()
        assert body["last_seq"] == 5 and body["notifications"] == 5
        history = (await api.get(f"/v1/orders/{orders[0]}/history")).json()["items"]
        # the decision log names the topic a step came by (and no key name)
        assert {(i["actor"], i["actor_name"]) for i in history} == {(f"kafka:{kafka_settings.kafka_topic}", None)}
        exposition = (await api.get("/metrics", headers=root_headers())).text
    assert 'nexus_consumer_lag{partition="0",topic="' + kafka_settings.kafka_topic in exposition
    settled = [line for line in exposition.splitlines() if line.startswith("nexus_event_settle_seconds_count")]
    assert settled and float(settled[0].split()[-1]) >= 150
    await wait_committed_to_end(kafka_settings.kafka_group, kafka_settings.kafka_topic)


def nexus_dlq(s: Settings, *args: str) -> str:
    env = settings_env(s)
    out = subprocess.run(
        [sys.executable, "-m", "nexus_cli", "dlq", *args], env=env, cwd=ROOT, capture_output=True, timeout=60
    )
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


async def test_buffered_gap_is_dead_lettered_once_and_can_be_redriven(kafka_settings: Settings) -> None:
    """A gap that never fills dead-letters the buffered step once (BUFFER_TIMEOUT); `nexus dlq redrive` replays it."""
    s = kafka_settings.replace(buffer_timeout_s=1.0, buffer_sweep_interval_s=0.2)
    order = f"gap-{uuid.uuid4().hex[:6]}"
    steps = plan_json(order, "plan-gap")
    db = await Database(s).open(migrate=False)
    sweeper = asyncio.create_task(sweep_buffer(Gateway(db), s))
    conn = await asyncpg.connect(s.database_url)
    try:
        async with running_ingress(s), producer(s) as p:
            await p.send(steps[0])
            await p.send(steps[2])  # seq 2 never comes: seq 3 waits in the buffer

            async def expired() -> bool:
                return bool(await conn.fetchval("SELECT count(*) FROM dead_letters WHERE code = 'BUFFER_TIMEOUT'"))

            await wait_until(expired, 30, "the buffered step to expire", interval=0.2)
            await asyncio.sleep(1.5)  # several more sweeps: still dead-lettered once
            rows = await conn.fetch("SELECT id, source, event_id, order_id FROM dead_letters")
            assert [(r["source"], r["event_id"], r["order_id"]) for r in rows] == [
                ("buffer", steps[2]["event_id"], order)
            ]
            assert await conn.fetchval("SELECT count(*) FROM pending_events WHERE order_id = $1", order) == 0
            assert await conn.fetchval("SELECT last_seq FROM orders WHERE order_id = $1", order) == 1

            listed = json.loads(await asyncio.to_thread(nexus_dlq, s, "list", "--json"))
            assert [r["code"] for r in listed["table"]] == ["BUFFER_TIMEOUT"] and listed["kafka"] == []

            await p.send(steps[1])  # the gap fills late; seq 3 was already dead-lettered and is not applied
            await asyncio.to_thread(nexus_dlq, s, "redrive", str(rows[0]["id"]))

            async def applied() -> bool:
                return await conn.fetchval("SELECT last_seq FROM orders WHERE order_id = $1", order) == 3

            await wait_until(applied, 30, "the redriven step to apply", interval=0.2)
        assert await conn.fetchval("SELECT redriven_at IS NOT NULL FROM dead_letters WHERE id = $1", rows[0]["id"])
        assert await conn.fetchval("SELECT count(*) FROM outbox WHERE order_id = $1", order) == 3
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        await conn.close()
        await db.close()


async def test_dlq_list_shows_the_topic_and_the_table(kafka_settings: Settings) -> None:
    """`nexus dlq list` shows poison records: PARSE_ERROR in table and topic, a database-refused one in the topic."""
    s = kafka_settings
    async with producer(s) as p:
        garbage = await p.send(b"\xff\xfe binary garbage", key="garbage")
        # A valid envelope whose data holds NUL: jsonb refuses it, so the database rejects the step.
        poisoned = step_json("o-nul", "p-nul", 1)
        poisoned["data"]["note"] = "\u0000"
        refused = await p.send(json.dumps(poisoned).encode(), key="garbage")
    async with running_ingress(s):
        await wait_committed_to_end(s.kafka_group, s.kafka_topic)
    assert (await committed_offsets(s.kafka_group, s.kafka_topic))[garbage.partition] == refused.offset + 1
    listed = json.loads(await asyncio.to_thread(nexus_dlq, s, "list", "--source", "all", "--json"))
    assert [(r["source"], r["code"]) for r in listed["table"]] == [
        ("kafka", "PARSE_ERROR"),
        ("kafka", "DATABASE_REJECTED"),
    ]
    assert [(r["code"], r["key"], r["source_offset"]) for r in listed["kafka"]] == [
        ("PARSE_ERROR", "garbage", garbage.offset),
        ("DATABASE_REJECTED", "garbage", refused.offset),
    ]
    assert dlq_count("DATABASE_REJECTED") >= 1
    text = await asyncio.to_thread(nexus_dlq, s, "list", "--source", "kafka")
    assert "DATABASE_REJECTED" in text and s.kafka_dlq_topic in text


async def test_a_busy_lane_fetches_nothing_more_until_its_slice_is_done_then_catches_up(
    kafka_settings: Settings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a lane's slice waits on PostgreSQL longer than the group's poll interval, nothing more is fetched
    for it (the records wait in the broker) and the consumer keeps its partitions; everything applies afterwards."""
    caplog.set_level(logging.INFO, logger="nexus.ingress.kafka")
    handed: list[int] = []
    put = Lane.put

    def counted_put(lane: Lane, tp: TopicPartition, records: list[Any]) -> None:
        handed.append(len(records))
        put(lane, tp, records)

    monkeypatch.setattr(Lane, "put", counted_put)
    s = kafka_settings.replace(kafka_lanes=1, kafka_max_poll_records=10, kafka_max_poll_interval_ms=6_000)
    prefix = f"ahead-{uuid.uuid4().hex[:6]}"
    blocker = await asyncpg.connect(s.database_url)
    try:
        blocked = blocker.transaction()
        await blocked.start()
        # Every batch reads the orders table: this holds the lane's first batch in its transaction.
        await blocker.execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        async with running_ingress(s) as ingress:
            async with producer(s) as p:
                await produce_plans(p, plan_events(prefix, 30))
            await asyncio.sleep(8)  # past the poll interval, all 150 records in the broker
            assert ingress.resolved_records == 0
            assert 0 < sum(handed) <= s.kafka_max_poll_records, handed  # the slice in flight, nothing more
            await blocked.rollback()
            await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
            revoked = [r.args for r in caplog.records if getattr(r, "action", None) == "kafka_revoked"]
            assert revoked in ([], [([],)]), revoked  # (the first join revokes nothing)
        assert await outbox_count(s.database_url or "", prefix) == 150
    finally:
        await blocker.close()


class SliceRun:
    """60 plans produced before a consumer starts, and what it did with them: every commit with how many of
    the records it covers PostgreSQL did not hold yet, and the transaction that wrote each record."""

    def __init__(self, s: Settings, gateway: type[Gateway] = Gateway) -> None:
        self.s = s
        self.gateway = gateway
        self.prefix = f"slice-{uuid.uuid4().hex[:6]}"
        self.records: dict[tuple[int, int], str] = {}
        """(partition, offset) -> event id."""
        self.commits: list[tuple[dict[int, int], int]] = []
        self.tx_of: dict[str, int] = {}
        """event id -> the transaction that wrote its outbox row."""

    async def run(self) -> None:
        s = self.s
        events = [event for plan in plan_events(self.prefix, 60) for event in plan]
        async with producer(s) as p:
            delivered = await p.send_many(events)
        self.records = {(d.partition, d.offset): e["event_id"] for d, e in zip(delivered, events, strict=True)}
        conn = await asyncpg.connect(s.database_url)
        try:
            async with running_ingress(s, self.gateway) as ingress:
                commit = ingress._consumer.commit

                async def checked_commit(offsets: dict[TopicPartition, int]) -> None:
                    covered = [
                        e
                        for (part, off), e in self.records.items()
                        if off < offsets.get(TopicPartition(s.kafka_topic, part), 0)
                    ]
                    applied = await conn.fetchval(
                        "SELECT count(*) FROM outbox WHERE event_id = ANY($1::uuid[])", covered
                    )
                    self.commits.append(({tp.partition: off for tp, off in offsets.items()}, len(covered) - applied))
                    await commit(offsets)

                ingress._consumer.commit = checked_commit
                await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
            rows = await conn.fetch(
                "SELECT event_id, xmin::text::bigint AS tx FROM outbox WHERE order_id LIKE $1", f"{self.prefix}-%"
            )
            orders = await conn.fetch("SELECT status, last_seq FROM orders WHERE order_id LIKE $1", f"{self.prefix}-%")
        finally:
            await conn.close()
        assert len(rows) == 300 and {(o["status"], o["last_seq"]) for o in orders} == {("completed", 5)}
        self.tx_of = {str(r["event_id"]): r["tx"] for r in rows}

    def assert_in_order_and_committed_after_apply(self) -> None:
        for part in {part for part, _ in self.records}:
            txs = [self.tx_of[str(self.records[key])] for key in sorted(k for k in self.records if k[0] == part)]
            assert txs == sorted(txs), f"partition {part} applied out of offset order"
        assert self.commits and all(missing == 0 for _, missing in self.commits), self.commits


async def test_a_poll_larger_than_the_slice_budget_is_applied_and_committed_slice_by_slice(
    kafka_settings: Settings,
) -> None:
    """A backlog fetched in polls of 500 is applied in short transactions of at most one slice, in offset
    order per partition, and every offset committed covers only records already applied; the first commit
    comes while the backlog is still being applied (how many commits follow depends on how long each takes:
    slices resolved while a commit is in flight share the next one)."""
    run = SliceRun(kafka_settings.replace(kafka_lanes=1, kafka_max_poll_records=500, kafka_slice_ms=1))
    await run.run()
    sizes = collections.Counter(run.tx_of.values())
    assert max(sizes.values()) <= 100, sizes  # slices of the budget's size (here the minimum), not the poll's
    run.assert_in_order_and_committed_after_apply()
    first, _ = run.commits[0]
    assert sum(first.values()) < 300, run.commits  # committed before the last slice was applied


async def test_a_lane_is_handed_at_most_its_next_slice_and_nothing_while_one_is_in_flight(
    kafka_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two lanes and a backlog, every poll hands a lane at most one slice and only when it is idle with
    nothing waiting: no record waits in the process behind a slice in flight."""
    handed: list[tuple[bool, int, int]] = []
    put = Lane.put

    def checked_put(lane: Lane, tp: TopicPartition, records: list[Any]) -> None:
        handed.append((bool(lane.inflight), sum(lane.queued.values()) + len(records), lane.size))
        put(lane, tp, records)

    monkeypatch.setattr(Lane, "put", checked_put)
    run = SliceRun(kafka_settings.replace(kafka_lanes=2, kafka_max_poll_records=500, kafka_slice_ms=1))
    await run.run()
    run.assert_in_order_and_committed_after_apply()
    assert handed and not [h for h in handed if h[0] or h[1] > h[2]], handed


async def test_records_fetched_before_a_failed_fetch_are_still_applied(
    kafka_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the client fails while a poll gathers more records, those it already returned are still handed to
    their lanes (its position is past them): every record is applied once, and no commit skips one."""
    getmany = AIOKafkaConsumer.getmany
    last = {"asked": 0, "got": 0}
    failed: list[int] = []

    async def failing_getmany(consumer: AIOKafkaConsumer, *partitions: TopicPartition, **kwargs: Any) -> Any:
        asked = kwargs["max_records"]
        if last["got"] and asked == last["asked"] - last["got"] and not failed:
            failed.append(asked)  # the call gathering the rest of a poll, after records came back
            raise KafkaError("fetch failed")
        batch = await getmany(consumer, *partitions, **kwargs)
        last.update(asked=asked, got=sum(len(records) for records in batch.values()))
        return batch

    monkeypatch.setattr(AIOKafkaConsumer, "getmany", failing_getmany)
    # Slices grow to the poll size after the first, so a poll asks for more than one fetched chunk holds.
    run = SliceRun(kafka_settings.replace(kafka_lanes=1, kafka_max_poll_records=500, kafka_slice_ms=60_000))
    await run.run()
    assert failed
    run.assert_in_order_and_committed_after_apply()


class FailsOnce(Gateway):
    """A gateway whose second `submit` raises an unforeseen error (as a bug would) after half a second, once."""

    calls = 0

    async def submit(self, items: Sequence[Incoming], *, source: IngressKind | str = IngressKind.HTTP) -> list[Outcome]:
        self.calls += 1
        if self.calls == 2:
            await asyncio.sleep(0.5)  # with more records waiting in the broker meanwhile
            raise RuntimeError("unforeseen")
        return await super().submit(items, source=source)


async def test_a_failed_slice_is_rewound_and_fetched_again(
    kafka_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """When a slice fails unexpectedly its records are fetched again: every record is applied once, in offset
    order per partition, and no commit runs ahead of them."""
    caplog.set_level(logging.INFO, logger="nexus.ingress.kafka")
    run = SliceRun(kafka_settings.replace(kafka_lanes=1, kafka_max_poll_records=500, kafka_slice_ms=1), FailsOnce)
    await run.run()
    assert [r.getMessage() for r in caplog.records if getattr(r, "action", None) == "kafka_rewind"] == [
        "lane batch failed, rewinding"
    ]
    run.assert_in_order_and_committed_after_apply()
