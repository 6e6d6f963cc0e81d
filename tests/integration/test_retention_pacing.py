"""The remover paced on a real PostgreSQL: through a backlog it pauses after each batch by its duty, and at duty 1
it does not pause."""

from __future__ import annotations

import asyncio
import time

from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.retention.pacing import PAUSE_MIN_S, pause_after
from nexus.retention.remover import RetentionRemover
from nexus.settings import Settings
from nexus.store.database import Database
from tests.integration.test_retention import finished_orders


async def test_the_remover_pauses_after_each_batch_by_its_duty(db: Database, settings: Settings) -> None:
    """30 due orders in batches of 10 at duty 0.1: three batches, each followed by a pause of 9 times its own
    time (at least PAUSE_MIN_S), which the remover really waits; every order leaves."""
    await finished_orders(db, Gateway(db), "o-pace", 30)
    worker = RetentionRemover(
        db, settings.replace(retention_s=3600, retention_batch=10, retention_duty=0.1), builtin_catalog()
    )
    started = time.monotonic()
    batches = await worker.drain()
    elapsed = time.monotonic() - started
    assert [b.removed for b in batches] == [10, 10, 10]
    for batch in batches:
        assert batch.pause_s == pause_after(batch.busy_s, 0.1) >= max(PAUSE_MIN_S, 9 * batch.busy_s) * 0.999
    assert elapsed >= sum(b.busy_s + b.pause_s for b in batches) - 0.05
    assert await db.fetchval("SELECT count(*) FROM orders") == 0


async def test_at_duty_1_the_remover_does_not_pause(db: Database, settings: Settings) -> None:
    """At duty 1 (full speed) the same backlog leaves in three batches with no pause between them."""
    await finished_orders(db, Gateway(db), "o-pace-full", 30)
    worker = RetentionRemover(
        db, settings.replace(retention_s=3600, retention_batch=10, retention_duty=1.0), builtin_catalog()
    )
    batches = await worker.drain()
    assert [(b.removed, b.pause_s) for b in batches] == [(10, 0.0), (10, 0.0), (10, 0.0)]
    assert await db.fetchval("SELECT count(*) FROM orders") == 0


async def test_two_paced_removers_share_the_backlog(db: Database, settings: Settings) -> None:
    """Two removers draining 40 due orders at once at duty 0.5 (batches of 5) remove each order once: the pause
    falls between transactions, so the work is still shared."""
    orders = await finished_orders(db, Gateway(db), "o-pace-two", 40)
    paced = settings.replace(retention_s=3600, retention_batch=5, retention_duty=0.5)
    workers = [RetentionRemover(db, paced, builtin_catalog()) for _ in range(2)]
    drained = await asyncio.gather(*(w.drain() for w in workers))
    assert sum(b.removed for batches in drained for b in batches) == 40
    assert all(b.pause_s >= PAUSE_MIN_S for batches in drained for b in batches)
    assert await db.fetchval("SELECT count(*) FROM removed_orders WHERE order_id = ANY($1::text[])", orders) == 40
