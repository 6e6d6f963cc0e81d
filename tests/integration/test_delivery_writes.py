"""Recording attempts writes what the core decided (core/delivery.py `written`), only over the claim it decided from.

Driven through the real claimer and outcome writer on a real PostgreSQL, no HTTP: the results are made here.
"""

from __future__ import annotations

import asyncio
import random

from nexus.core.breaker import BreakerConfig
from nexus.core.delivery import AttemptOutcome
from nexus.delivery.breakers import BreakerReport
from nexus.delivery.bulkheads import BulkheadConfig, Bulkheads
from nexus.delivery.claims import Claimed, Claimer
from nexus.delivery.outcomes import OutcomeWriter
from nexus.delivery.sender import Result
from nexus.delivery.subscriptions import ensure_default_subscription
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_wire.backoff import Jitter, RetryPolicy
from tests.integration.test_delivery import SECRET, submit_plans

BREAKERS = BreakerConfig(threshold=5, cooldown_s=30, probe_ttl_s=60)
HEAD = "SELECT state, attempts, last_status, last_error, head, lease_owner, delivered_at, dead_at FROM deliveries "


async def _parts(db: Database, settings: Settings) -> tuple[Claimer, OutcomeWriter, Bulkheads]:
    """One order's notifications, and a claimer and writer of one instance (retries due after 1 ms)."""
    s = settings.replace(webhook_url="http://127.0.0.1:9/hook", webhook_secret=SECRET)
    await ensure_default_subscription(db, s)
    await submit_plans(db, 1)
    report = BreakerReport(10)
    policy = RetryPolicy(base_ms=1, max_ms=1, max_attempts=5, jitter=Jitter.NONE)
    writer = OutcomeWriter(db, "me", policy, BREAKERS, report, random.Random(0))
    return Claimer(db, "me", 60.0, BREAKERS, report), writer, Bulkheads(BulkheadConfig.of(16, None, None))


async def _claim_one(claimer: Claimer, heads: Bulkheads) -> Claimed:
    """The order's head, claimed once it is due."""
    for _ in range(100):
        claimed = await claimer.claim(1, heads)
        if claimed:
            return claimed[0]
        await asyncio.sleep(0.02)
    raise AssertionError("nothing became due")


async def test_a_released_attempt_is_given_back_keeping_the_last_answer(db: Database, settings: Settings) -> None:
    """A 503 is kept as the last answer; a released second attempt gives its attempt back and keeps the 503;
    the next attempt delivers: attempts 2, its 200 kept, `delivered_at` stamped, the head moved on."""
    claimer, writer, heads = await _parts(db, settings)
    first = await _claim_one(claimer, heads)
    await writer.write([Result(first, AttemptOutcome.RETRYABLE, status=503, error="HTTP 503")])
    second = await _claim_one(claimer, heads)
    assert (second.attempt, second.last_status, second.last_error) == (2, 503, "HTTP 503")
    await writer.write([Result(second, AttemptOutcome.RELEASED, error="cancelled")])
    row = await db.fetchrow(HEAD + "WHERE position = 1")
    assert row is not None
    assert tuple(row.values())[:6] == ("pending", 1, 503, "HTTP 503", True, None)
    third = await _claim_one(claimer, heads)
    assert third.attempt == 2
    await writer.write([Result(third, AttemptOutcome.DELIVERED, status=200)])
    row = await db.fetchrow(HEAD + "WHERE position = 1")
    assert row is not None
    assert tuple(row.values())[:6] == ("delivered", 2, 200, None, False, None)
    assert row["delivered_at"] is not None and row["dead_at"] is None
    assert await db.fetchval("SELECT position FROM deliveries WHERE head") == 2


async def test_a_result_of_an_older_claim_writes_nothing(db: Database, settings: Settings) -> None:
    """The same instance claims again after its lease lapsed: the first claim's late result is not written
    (the row no longer has the attempts it was decided from), the second claim's is."""
    claimer, writer, heads = await _parts(db, settings)
    first = await _claim_one(claimer, heads)
    await db.execute("UPDATE deliveries SET lease_until = now() - interval '1 second' WHERE lease_owner = 'me'")
    second = await _claim_one(claimer, heads)
    assert (first.outbox_id, first.attempt, second.attempt) == (second.outbox_id, 1, 2)
    await writer.write([Result(first, AttemptOutcome.REJECTED, status=400, error="HTTP 400")])
    row = await db.fetchrow(HEAD + "WHERE position = 1")
    assert row is not None
    assert tuple(row.values())[:6] == ("pending", 2, None, None, True, "me")
    await writer.write([Result(second, AttemptOutcome.DELIVERED, status=200)])
    assert await db.fetchval("SELECT state FROM deliveries WHERE position = 1") == "delivered"
