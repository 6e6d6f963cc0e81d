"""The subscriptions' circuit breakers as stored: rows to `Breaker` values and back, and what a
transition tells the metrics and the log. The decisions themselves are core/breaker.py's."""

from __future__ import annotations

import logging

import asyncpg

from nexus import metrics
from nexus.core.breaker import Breaker, BreakerState, transitions
from nexus.store.database import Database
from nexus.store.queries import query
from nexus.store.rows import from_row

log = logging.getLogger(__name__)


def breaker_of(row: asyncpg.Record) -> Breaker:
    """The breaker held by a `circuit_breakers` row."""
    return from_row(Breaker, row, state=BreakerState(row["state"]))


async def write_breaker(conn: asyncpg.Connection, subscription_id: int, b: Breaker) -> None:
    await conn.execute(
        query("delivery.sql", "write_breaker"),
        subscription_id,
        b.state.value,
        b.failure_count,
        b.last_failure_at,
        b.open_until,
        b.probe_owner,
        b.probe_until,
    )


class BreakerReport:
    """Publishes breaker states and transitions as metrics and log lines, by subscription name."""

    def __init__(self, max_subscriptions: int) -> None:
        self._names: dict[int, str] = {}
        self._max_subscriptions = max_subscriptions
        self.generation = 0

    async def refresh_gauges(self, db: Database) -> None:
        rows = await db.fetch(query("delivery.sql", "breaker_states"))
        states = {row["subscription_id"]: BreakerState(row["state"]).gauge for row in rows}
        self._names = {row["subscription_id"]: row["name"] for row in rows}
        metrics.set_breaker_states({self._names[sid]: gauge for sid, gauge in states.items()}, self._max_subscriptions)

    def transitioned(self, subscription_id: int, before: Breaker, after: Breaker) -> None:
        if before.state is not after.state:
            self.generation += 1  # the claimer reads its list of claimable subscriptions again
        for state in transitions(before, after):
            metrics.CIRCUIT_BREAKER_TRANSITIONS.labels(to=state.value).inc()
            name = self._names.get(subscription_id)
            if name is not None:
                metrics.set_breaker_state(name, state.gauge)
            log.warning(
                "circuit breaker %s",
                state.value,
                extra={"action": "breaker", "subscription_id": subscription_id, "state": state.value},
            )
