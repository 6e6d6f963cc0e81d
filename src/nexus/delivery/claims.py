"""Claiming: which due deliveries this dispatcher instance leases and sends next.

One ``UPDATE ... FOR UPDATE SKIP LOCKED`` statement per subscription takes up to as many due deliveries
as there are free workers (only the oldest pending one of each (order, subscription); see ``claim`` in
delivery.sql) and leases them to this instance. Claims are shared across the claimable subscriptions,
rotating who goes first, so one subscription's backlog does not starve another. The list of claimable
subscriptions is read at most once per `subscriptions_ttl_s` (issue 17: a round trip per claim less): a
breaker that opened since is still honoured by ``claim`` itself, which checks the breaker and the
subscription again; a subscription added since, or whose breaker another instance closed, waits at most
that long for its first claim (a transition this instance made itself is read at once).

Breakers (core/breaker.py) are rows shared by all instances: a subscription whose breaker is not closed
is left out of the claim, and once its cooldown is over the first instance to lock the row takes the
single probe slot and claims exactly one delivery for it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import asyncpg

from nexus.core.breaker import BreakerConfig
from nexus.delivery.breakers import BreakerReport, breaker_of, write_breaker
from nexus.delivery.formats import render_body
from nexus.delivery.signing import parse_secret
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Claimed:
    """One leased delivery attempt."""

    outbox_id: Any
    subscription_id: int
    order_id: str
    position: int
    attempt: int
    event_type: str
    body: bytes
    traceparent: str | None
    url: str
    key: bytes
    probe: bool = False
    tenant_id: str = "default"
    content_type: str = "application/json"


class Claimer:
    """Leases due deliveries (and breaker probes) to `owner` for `lease_s` seconds."""

    def __init__(
        self,
        db: Database,
        owner: str,
        lease_s: float,
        breaker_config: BreakerConfig,
        report: BreakerReport,
        subscriptions_ttl_s: float = 0.0,
    ) -> None:
        self.db = db
        self.subscriptions_ttl_s = subscriptions_ttl_s
        self._subscriptions: list[int] = []
        self._subscriptions_until = float("-inf")
        self._generation = report.generation
        self.owner = owner
        self.lease_s = lease_s
        self.breaker_config = breaker_config
        self.report = report
        self._keys: dict[str, bytes] = {}
        self._turn = 0

    async def claim(self, limit: int) -> list[Claimed]:
        """Claim up to `limit` heads, shared across the claimable subscriptions (rotating who goes first),
        then any capacity left over to whoever still has work."""
        subscriptions = await self._claimable()
        if not subscriptions:
            return []
        self._turn = (self._turn + 1) % len(subscriptions)
        subscriptions = subscriptions[self._turn :] + subscriptions[: self._turn]
        share = max(1, -(-limit // len(subscriptions)))
        rows: list[asyncpg.Record] = []
        busy: list[int] = []
        for subscription_id in subscriptions:
            want = min(share, limit - len(rows))
            if want <= 0:
                break
            got = await self._claim_for(subscription_id, want)
            rows.extend(got)
            if len(got) == want:
                busy.append(subscription_id)
        for subscription_id in busy:
            if len(rows) >= limit:
                break
            rows.extend(await self._claim_for(subscription_id, limit - len(rows)))
        return [self._claimed(r) for r in rows]

    async def _claimable(self) -> list[int]:
        now = time.monotonic()
        # A breaker this instance saw change state (e.g. its probe closed it): read the list again now.
        if now >= self._subscriptions_until or self.report.generation != self._generation:
            self._generation = self.report.generation
            rows = await self.db.fetch(query("delivery.sql", "claimable_subscriptions"))
            self._subscriptions = [r["id"] for r in rows]
            self._subscriptions_until = now + self.subscriptions_ttl_s
        return self._subscriptions

    async def claim_probes(self) -> list[Claimed]:
        """Take the probe slot of breakers whose cooldown is over, and claim one delivery for each."""
        taken: list[int] = []
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                for row in await conn.fetch(query("delivery.sql", "lock_probe_candidates")):
                    before = breaker_of(row)
                    after = before.take_probe(row["now"], self.owner, self.breaker_config)
                    if after is not None:
                        await write_breaker(conn, row["subscription_id"], after)
                        self.report.transitioned(row["subscription_id"], before, after)
                        taken.append(row["subscription_id"])
        probes: list[Claimed] = []
        for subscription_id in taken:
            row = await self.db.fetchrow(
                query("delivery.sql", "claim"), self.owner, self.lease_s, 1, subscription_id, True
            )
            if row is None:
                await self._release_probe(subscription_id)
                continue
            claimed = self._claimed(row, probe=True)
            log.info(
                "breaker probe",
                extra={"action": "breaker_probe", "subscription_id": subscription_id, "order_id": claimed.order_id},
            )
            probes.append(claimed)
        return probes

    async def _claim_for(self, subscription_id: int, limit: int) -> list[asyncpg.Record]:
        return await self.db.fetch(
            query("delivery.sql", "claim"), self.owner, self.lease_s, limit, subscription_id, False
        )

    async def _release_probe(self, subscription_id: int) -> None:
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(query("delivery.sql", "lock_breakers"), [subscription_id])
                for row in rows:
                    before = breaker_of(row)
                    after = before.release_probe(self.owner)
                    if after != before:
                        await write_breaker(conn, subscription_id, after)

    def _claimed(self, row: asyncpg.Record, probe: bool = False) -> Claimed:
        secret: str = row["secret"]
        key = self._keys.get(secret)
        if key is None:
            key = self._keys[secret] = parse_secret(secret)
        body, content_type = render_body(row["format"], row["body"], row["created_at"])
        return Claimed(
            outbox_id=row["outbox_id"],
            subscription_id=row["subscription_id"],
            order_id=row["order_id"],
            position=row["position"],
            attempt=row["attempts"],
            event_type=row["event_type"],
            body=body,
            traceparent=row["traceparent"],
            url=row["url"],
            key=key,
            probe=probe,
            tenant_id=row["tenant_id"],
            content_type=content_type,
        )
