"""The decisions relay: decisions_outbox rows (written in the deciding transaction) to the `nexus.decisions`
topic, so an agent publishing over Kafka learns what the gateway decided.

At-least-once by construction: a row is deleted only after the broker acknowledged it, in the transaction
that claimed it. A process that dies after the commit of a decision and before its produce leaves the row
for the next relay; one that dies after the produce and before the delete makes a duplicate (allowed:
consumers deduplicate by event_id and decision). One relay works at a time (a transaction-scoped advisory
lock), and rows leave in id order: an order's decisions reach its partition (key order_id) in order.
"""

from __future__ import annotations

import asyncio
import logging
import random

from nexus.kafka_io import EventProducer
from nexus.retrying import Retrying
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query
from nexus_wire.backoff import RetryPolicy

log = logging.getLogger(__name__)

BATCH = 500


class DecisionsRelay:
    """Moves decisions_outbox rows to the decisions topic, forever."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    async def relay_once(self, producer: EventProducer) -> int:
        """Publish the oldest rows and delete them once acknowledged; how many (0: none, or another relay)."""
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                if not await conn.fetchval(query("lifecycle.sql", "relay_lock")):
                    return 0
                rows = await conn.fetch(query("lifecycle.sql", "relay_claim"), BATCH)
                if not rows:
                    return 0
                await producer.send_records(
                    ((r["value"].encode(), r["order_id"], r["traceparent"]) for r in rows),
                    topic=self.settings.decisions_topic,
                )
                await conn.execute(query("lifecycle.sql", "relay_done"), [r["id"] for r in rows])
        return len(rows)

    async def run(self) -> None:
        base_ms = self.settings.decisions_relay_poll_s * 1000.0
        retrying = Retrying(RetryPolicy(base_ms=base_ms, max_ms=self.settings.kafka_reconnect_max_ms), random.Random())
        producer = EventProducer.from_settings(
            self.settings, topic=self.settings.decisions_topic, client_id="nexus-relay"
        )
        while True:
            try:
                await producer.start()
                break
            except Exception:  # the broker is not up yet
                log.info("decisions relay: broker unavailable", exc_info=True, extra={"action": "relay_start"})
                await retrying.wait()
        retrying.reset()
        try:
            while True:
                try:
                    sent = await self.relay_once(producer)
                except Exception:  # database or broker away: the rows stay, tried again
                    log.warning("decisions relay failed", exc_info=True, extra={"action": "relay"})
                    await retrying.wait()
                    continue
                retrying.reset()
                if sent < BATCH:
                    await asyncio.sleep(self.settings.decisions_relay_poll_s)
        finally:
            await producer.stop()
