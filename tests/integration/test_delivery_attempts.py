"""Every webhook delivery attempt recorded: one `delivery_attempts` row per request
the subscriber got (or timed out on), with its answer, and the record pruned past its retention."""

from __future__ import annotations

import datetime as dt
import uuid

from nexus.delivery.attempts import prune_attempts
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import Faults, start_sink
from tests.helpers import wait_until
from tests.integration.test_delivery import SECRET, dispatching, settled, submit_plans, subscribe


async def test_each_attempt_is_recorded_with_the_subscribers_answer(db: Database, settings: Settings) -> None:
    """Against a receiver that fails each notification's first two attempts (503) and hangs on some later
    ones, the table holds exactly one row per request the receiver saw, numbered from 1 without gaps,
    with the status it answered (or the timeout's class), a duration and the time it was sent."""
    faults = Faults(seed=7, fail_first=2, fail_status=(503,), hang_rate=0.3)
    sink = await start_sink(faults, secret=SECRET)
    started = dt.datetime.now(dt.UTC)
    try:
        sub = await subscribe(db, sink.url + "/hook")
        [order] = await submit_plans(db, 1, prefix="att")
        async with dispatching(db, settings.replace(webhook_timeout_s=0.3)):
            await wait_until(lambda: settled(db), 60, "deliveries")
        records = sink.sink.records
    finally:
        await sink.aclose()
    rows = await db.fetch("SELECT * FROM delivery_attempts WHERE order_id = $1 ORDER BY outbox_id, attempt", order)
    assert len(rows) == len(records) > 10
    seen = {(r["idempotency_key"], r["attempt"]): r["status"] for r in records}
    by_notification: dict[uuid.UUID, list[int]] = {}
    for row in rows:
        assert row["subscription_id"] == sub.id and row["tenant_id"] == "default"
        by_notification.setdefault(row["outbox_id"], []).append(row["attempt"])
        answered = seen[(str(row["outbox_id"]), row["attempt"])]
        assert row["status"] == answered
        if answered is None:  # the receiver hung: the dispatcher's timeout
            assert (row["outcome"], row["error_class"]) == ("retryable", "TimeoutError")  # aiohttp's
            assert row["duration_ms"] >= 300
        else:
            assert row["error_class"] is None
            assert row["outcome"] == ("delivered" if answered == 200 else "retryable")
        assert started - dt.timedelta(seconds=1) <= row["at"] <= dt.datetime.now(dt.UTC)
        assert row["duration_ms"] is not None and row["duration_ms"] > 0
    assert len(by_notification) == 5
    for attempts in by_notification.values():
        assert attempts == list(range(1, len(attempts) + 1)) and len(attempts) >= 3
    delivered = await db.fetchval("SELECT count(*) FROM delivery_attempts WHERE outcome = 'delivered'")
    assert delivered == 5


async def test_attempts_older_than_the_retention_are_pruned(db: Database) -> None:
    """`prune_attempts` deletes the rows older than the retention, in batches, and keeps the newer ones."""
    outbox = uuid.uuid4()
    await db.execute(
        "INSERT INTO delivery_attempts (outbox_id, subscription_id, tenant_id, order_id, attempt, at, outcome, status)"
        " SELECT $1, 1, 'default', 'prune-o', n, now() - make_interval(hours => CASE WHEN n <= 7 THEN 48 ELSE 1 END),"
        " 'retryable', 503 FROM generate_series(1, 10) AS n",
        outbox,
    )
    assert await prune_attempts(db, retention_s=86400.0, batch=3) == 7
    kept = await db.fetch("SELECT attempt FROM delivery_attempts WHERE order_id = 'prune-o' ORDER BY attempt")
    assert [r["attempt"] for r in kept] == [8, 9, 10]
    assert await prune_attempts(db, retention_s=86400.0) == 0
