"""Recording: the results of attempts written back in batches, one transaction per batch (group commit).

Each result's next state is `core.delivery.next_step`'s and every value it writes `core.delivery.written`'s;
it is written only if this instance still holds the lease and the attempts its claim left (``finish`` in
delivery.sql), and the batch's evidence is fed to the subscriptions' circuit
breakers in the same transaction. A delivery that leaves PENDING hands its order over to the order's next
notification, under the orders' advisory locks, as the gateway adds notifications under them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import random
from typing import Any

import asyncpg

from nexus import metrics
from nexus.core.breaker import Breaker, BreakerConfig
from nexus.core.delivery import AttemptOutcome, DeliveryDecision, DeliveryState, next_step, written
from nexus.delivery.breakers import BreakerReport, breaker_of, write_breaker
from nexus.delivery.sender import Result
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query
from nexus_wire.backoff import RetryPolicy

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class _Batch:
    """A batch of results as rows: the `finish` columns, the counted attempts, each delivery's metric label and
    the orders whose delivery leaves PENDING (locked before the write)."""

    columns: tuple[list[Any], ...]
    attempts: list[Result]
    labels: dict[tuple[Any, int], str]
    ending: set[tuple[str, str]]


@dataclasses.dataclass(frozen=True, slots=True)
class OutcomeWriter:
    """Writes batches of results for `owner`: the deliveries' next states and the breakers' evidence."""

    db: Database
    owner: str
    policy: RetryPolicy
    breaker_config: BreakerConfig
    report: BreakerReport
    rng: random.Random

    def decide(self, r: Result) -> DeliveryDecision:
        return next_step(
            DeliveryState.PENDING,
            r.outcome,
            r.claimed.attempt,
            self.policy,
            rand=self.rng.random(),
            retry_after_ms=r.retry_after_ms,
            error=r.error,
        )

    async def write(self, results: list[Result]) -> None:
        """Record a batch of results and their breaker evidence in one transaction."""
        batch = self._batch(results)
        applied, changes = await self._apply(batch, results)
        for row in applied:
            metrics.WEBHOOK_DELIVERIES.labels(result=batch.labels[(row["outbox_id"], row["subscription_id"])]).inc()
        for subscription_id, before, after in changes:
            self.report.transitioned(subscription_id, before, after)
        for r in results:
            if r.outcome is not AttemptOutcome.DELIVERED:
                c = r.claimed
                log.info(
                    "delivery attempt failed",
                    extra={
                        "action": batch.labels[(c.outbox_id, c.subscription_id)],
                        "order_id": c.order_id,
                        "outbox_id": str(c.outbox_id),
                        "attempt": c.attempt,
                        "error": r.error,
                    },
                )

    def _batch(self, results: list[Result]) -> _Batch:
        batch = _Batch(([], [], [], [], [], [], [], [], [], [], [], []), [], {}, set())
        now = dt.datetime.now(dt.UTC)
        for r in results:
            decision = self.decide(r)
            c = r.claimed
            if decision.leaves_pending:
                batch.ending.add((c.tenant_id, c.order_id))
            batch.labels[(c.outbox_id, c.subscription_id)] = decision.label
            w = written(decision, attempt=c.attempt, status=r.status, error=r.error, now=now,
                        last_status=c.last_status, last_error=c.last_error)  # fmt: skip
            row = (c.outbox_id, c.subscription_id, w.state.value, w.read_attempts, w.attempts, w.delay_ms,
                   w.last_status, w.last_error, w.delivered_at, w.dead_at, w.dead_reason, w.head)  # fmt: skip
            for column, value in zip(batch.columns, row, strict=True):
                column.append(value)
            if decision.counted:
                batch.attempts.append(r)
        return batch

    async def _apply(
        self, batch: _Batch, results: list[Result]
    ) -> tuple[list[asyncpg.Record], list[tuple[int, Breaker, Breaker]]]:
        """The batch's rows written, heads promoted and breakers fed, in one transaction."""
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                if batch.ending:
                    locked = sorted(batch.ending)
                    await conn.execute(
                        query("gateway.sql", "lock_orders"), [t for t, _ in locked], [o for _, o in locked]
                    )
                applied = await conn.fetch(query("delivery.sql", "finish"), self.owner, *batch.columns)
                moved = sorted(
                    {
                        (row["subscription_id"], row["order_id"], row["tenant_id"])
                        for row in applied
                        if DeliveryState(row["state"]) is not DeliveryState.PENDING
                    }
                )
                if moved:
                    await conn.execute(
                        query("delivery.sql", "promote_heads"),
                        [s for s, _, _ in moved],
                        [o for _, o, _ in moved],
                        [t for _, _, t in moved],
                    )
                changes = await self._feed_breakers(conn, results)
                if batch.attempts:
                    await conn.execute(query("delivery.sql", "record_attempts"), *attempt_columns(batch.attempts))
        return applied, changes

    async def _feed_breakers(
        self, conn: asyncpg.Connection, results: list[Result]
    ) -> list[tuple[int, Breaker, Breaker]]:
        # Released and unsendable attempts never reached the subscriber: they say nothing about it (a
        # probe among them gives its slot back).
        evidence = [r for r in results if r.outcome.is_evidence or r.claimed.probe]
        if not evidence:
            return []
        ids = sorted({r.claimed.subscription_id for r in evidence})
        rows = await conn.fetch(query("delivery.sql", "lock_breakers"), ids)
        if len(rows) < len(ids):
            await conn.execute(query("delivery.sql", "ensure_breakers"), ids)
            rows = await conn.fetch(query("delivery.sql", "lock_breakers"), ids)
        current = {row["subscription_id"]: breaker_of(row) for row in rows}
        now = rows[0]["now"]
        before = dict(current)
        for r in evidence:
            sid = r.claimed.subscription_id
            probe = self.owner if r.claimed.probe else None
            if not r.outcome.is_evidence:
                current[sid] = current[sid].release_probe(self.owner)
            else:
                # A subscriber that answers, even with a rejection, is up: only failures count.
                success = r.outcome is not AttemptOutcome.RETRYABLE
                current[sid] = current[sid].record(success, now, self.breaker_config, probe_owner=probe)
        changes = []
        for sid, after in current.items():
            if after != before[sid]:
                await write_breaker(conn, sid, after)
                changes.append((sid, before[sid], after))
        return changes


def attempt_columns(results: list[Result]) -> tuple[list[Any], ...]:
    """The columns of `record_attempts` (one array per column: one INSERT per batch, whatever its size)."""
    columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [], [], [])
    for r in results:
        c = r.claimed
        # An attempt the subscriber answered has its status; any other says what went wrong instead.
        error_class = None if r.status is not None else (r.error_class or "InternalError")
        row = (c.outbox_id, c.subscription_id, c.tenant_id, c.order_id, c.attempt, r.sent_at, r.outcome.value,
               r.status, error_class, r.duration_ms)  # fmt: skip
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    return columns
