"""A batch read and written in one statement each still continues every chain and buffer."""

from __future__ import annotations

import asyncio
import itertools
import json

import asyncpg
import pytest

from nexus.core.decide.items import Incoming, IngressKind
from nexus.gateway import Gateway
from nexus.store.database import Database
from nexus_wire.codes import Decision
from tests.factories import step_json


async def test_an_order_over_several_batches_continues_its_state_buffer_and_chain(db: Database) -> None:
    """Steps of one order in four batches: each batch reads what the previous wrote (state, buffered step,
    decision-log head), so the decisions are APPLY, BUFFER, APPLY (draining 3), DUPLICATE, and the order's
    decision-log chain runs 1..5 with each record linked to the one before; one notification per applied
    step, each with its delivery."""
    await db.execute(  # two subscribers: every notification gets a delivery for each
        "INSERT INTO subscriptions (name, url, secret) VALUES ('rt-1', 'http://127.0.0.1:9/a', 's'),"
        " ('rt-2', 'http://127.0.0.1:9/b', 's')"
    )
    gateway = Gateway(db)
    s1, s2, s3 = (step_json("rt", "prt", n) for n in (1, 2, 3))
    decisions = []
    for body in (s1, s3, s2, s2):
        [outcome] = await gateway.submit([Incoming.parse(body)])
        decisions.append(outcome.decision)
    assert decisions == [Decision.APPLY, Decision.BUFFER, Decision.APPLY, Decision.DUPLICATE]
    rows = await db.fetch(
        "SELECT position, seq, decision, prev_hash, hash FROM decision_log WHERE order_id = 'rt' ORDER BY position"
    )
    assert [(r["position"], r["seq"], r["decision"]) for r in rows] == [
        (1, 1, "APPLY"), (2, 3, "BUFFER"), (3, 2, "APPLY"), (4, 3, "APPLY"), (5, 2, "DUPLICATE"),
    ]  # fmt: skip
    assert all(later["prev_hash"] == earlier["hash"] for earlier, later in itertools.pairwise(rows))
    order = await db.fetchrow("SELECT last_seq, outbox_count FROM orders WHERE order_id = 'rt'")
    assert order is not None and (order["last_seq"], order["outbox_count"]) == (3, 3)
    assert await db.fetchval("SELECT count(*) FROM pending_events WHERE order_id = 'rt'") == 0
    outbox = await db.fetch("SELECT id FROM outbox WHERE order_id = 'rt' ORDER BY position")
    heads = await db.fetch("SELECT position FROM deliveries WHERE order_id = 'rt' AND head ORDER BY position")
    deliveries = await db.fetchval("SELECT count(*) FROM deliveries WHERE order_id = 'rt'")
    subscriptions = await db.fetchval("SELECT count(*) FROM subscriptions WHERE enabled")
    assert subscriptions >= 2 and len(outbox) == 3 and deliveries == 3 * subscriptions
    assert [r["position"] for r in heads] == [1] * subscriptions  # one head per subscriber: the oldest


@pytest.mark.parametrize("kind", [IngressKind.HTTP, IngressKind.KAFKA])
async def test_a_batch_takes_four_round_trips_waking_its_orders_waiters(db: Database, kind: IngressKind) -> None:
    """A batch of new orders' first steps runs BEGIN with the locks (one round trip, `nexus.store.locked`), read,
    write, COMMIT and nothing else: the held
    steps are read with the rest, the waiters' wake-up is written with the rest, and so are a Kafka batch's
    decisions for the decisions topic (in the items' order); the waiters of each order are still notified
    at commit."""
    gateway = Gateway(db)
    prefix = f"st-{kind.value}"
    statements: list[str] = []
    async with db.pool.acquire() as conn:  # the pool's one connection, which the gateway uses next
        conn.add_query_logger(lambda record: statements.append(record.query))
        listener = await asyncpg.connect(db.url)
        heard: list[str] = []
        await listener.add_listener("nexus_orders", lambda *args: heard.append(args[3]))
    try:
        await gateway.submit([Incoming.parse(step_json(f"{prefix}-warm", "pst-warm", 1))])  # the driver's first look
        for _ in range(50):  # the warm order's wake-up reaches the listener after its commit, asynchronously
            if heard:
                break
            await asyncio.sleep(0.05)
        assert [json.loads(p)["order_id"] for p in heard] == [f"{prefix}-warm"]
        statements.clear()
        heard.clear()
        orders = [f"{prefix}-{n}" for n in (2, 0, 1)]
        items = [Incoming.parse(step_json(order, f"p{order}", 1)) for order in orders]
        outcomes = await gateway.submit(items, source=kind)
        assert [o.decision for o in outcomes] == [Decision.APPLY] * 3
        assert len(statements) == 4, statements
        assert statements[0].startswith("BEGIN; SELECT pg_advisory_xact_lock"), statements[0]
        decided = await db.fetch(
            "SELECT order_id, value FROM decisions_outbox WHERE order_id LIKE $1 ORDER BY id", f"{prefix}-_"
        )
        if kind is IngressKind.KAFKA:
            assert [r["order_id"] for r in decided] == orders
            assert [json.loads(r["value"])["decision"] for r in decided] == ["APPLY"] * 3
        else:
            assert decided == []
        for _ in range(50):
            if len(heard) == 3:
                break
            await asyncio.sleep(0.05)
        assert sorted(json.loads(p)["order_id"] for p in heard) == sorted(orders)
    finally:
        await listener.close()


async def test_an_orders_proposals_in_one_batch_are_numbered_and_decided_in_one_transaction(db: Database) -> None:
    """Three proposals of one order in one batch (the second a wrong step, the third the right one) are
    numbered in the fold one after another: APPLY 1, REJECTED 2, APPLY 2 (the rejection freed its number),
    in one transaction of five round trips (BEGIN with the locks, the read with the numbering's reads, the
    rejected step, the write with the first verdicts, COMMIT; the first verdicts were a statement of their own
    before round 21, the numbering's reads and the locks before round 22), each first verdict stored once."""
    from nexus.core.envelope import parse_envelope
    from nexus.core.numbering import Proposal, data_digest

    def proposals(order_id: str) -> list[Incoming]:
        created = step_json(order_id, "pnb", 1)
        items = []
        for step, data in ((created["event_type"], created["data"]), ("OrderShipped", {}), ("InventoryValidated", {})):
            envelope = parse_envelope(step_json(order_id, "pnb", 1, event_type=step, data=data))
            proposal = Proposal(envelope.event_id, data_digest(step, data), keyed=False)
            items.append(Incoming("", envelope, None, None, proposal=proposal))
        return items

    await db.execute(
        "INSERT INTO plans (tenant_id, order_id, plan_id, process) VALUES ('default', 'nb-warm', 'pnb', 'order'),"
        " ('default', 'nb', 'pnb', 'order')"
    )
    gateway = Gateway(db)
    statements: list[str] = []
    async with db.pool.acquire() as conn:  # the pool's one connection, which the gateway uses next
        conn.add_query_logger(lambda record: statements.append(record.query))
    await gateway.submit(proposals("nb-warm"))  # the driver's first look at these statements' types
    statements.clear()
    outcomes = await gateway.submit(proposals("nb"))
    assert [(o.decision, o.seq_id) for o in outcomes] == [
        (Decision.APPLY, 1), (Decision.REJECTED, 2), (Decision.APPLY, 2),
    ]  # fmt: skip
    assert len(statements) == 5, [s.strip()[:60] for s in statements]
    stored = await db.fetch("SELECT seq_id, decision FROM plan_steps WHERE order_id = 'nb' ORDER BY decided_at, seq_id")
    assert sorted((r["seq_id"], r["decision"]) for r in stored) == [(1, "APPLY"), (2, "APPLY"), (2, "REJECTED")]
