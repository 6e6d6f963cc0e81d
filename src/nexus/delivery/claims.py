"""Claiming: which due deliveries this dispatcher instance leases and sends next.

One ``UPDATE ... FOR UPDATE SKIP LOCKED`` statement per subscription takes up to as many due deliveries
as there are free workers (only the oldest pending one of each (order, subscription); see ``claim`` in
delivery.sql) and leases them to this instance. Claims are shared across the tenants, then across each
tenant's subscriptions, rotating who goes first, within the bulkheads (delivery/bulkheads.py): a tenant
holds at most its share of the slots and a subscription at most its own, so one tenant's backlog or
hanging endpoints never take the slots another tenant's deliveries need. A claimed delivery takes its
slot here; the dispatcher gives it back when the delivery's task ends. The list of claimable
subscriptions is read at most once per `subscriptions_ttl_s` (a round trip per claim less): a
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
from collections import Counter
from typing import Any

import asyncpg

from nexus.auth.roles import ALL_TENANTS
from nexus.core.breaker import BreakerConfig
from nexus.delivery.breakers import BreakerReport, breaker_of, write_breaker
from nexus.delivery.bulkheads import Bulkheads, in_turn, share, tenant_key
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
    bulkhead: str = ALL_TENANTS
    """The tenant of the subscription (its bulkhead): `*` for a subscription of every tenant."""
    last_status: int | None = None
    last_error: str | None = None
    """The answer of the delivery's previous attempt, as claimed (a released attempt keeps it)."""


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
        self._subscriptions: list[tuple[int, str]] = []
        self._tenants = 0
        self._subscriptions_until = float("-inf")
        self._generation = report.generation
        self.owner = owner
        self.lease_s = lease_s
        self.breaker_config = breaker_config
        self.report = report
        self._keys: dict[str, bytes] = {}
        self._turn = 0

    async def claim(self, limit: int, bulkheads: Bulkheads) -> list[Claimed]:
        """Claim up to `limit` heads within the bulkheads: an even share of them to each tenant with room
        (the first tenant rotating), each tenant's share across its subscriptions (rotating too), then any
        capacity left over to whoever still has work and room. Each claimed delivery takes its slot."""
        subscriptions = await self._claimable()
        if not subscriptions:
            return []
        bulkheads.shared = self._tenants > 1
        self._turn += 1
        groups = [(t, ids) for t, ids in in_turn(subscriptions, self._turn) if bulkheads.tenant_room(t) > 0]
        claimed: list[Claimed] = []
        busy: list[tuple[str, int]] = []
        for i, (tenant, ids) in enumerate(groups):
            budget = min(share(limit - len(claimed), len(groups) - i), bulkheads.tenant_room(tenant))
            for j, subscription_id in enumerate(ids):
                want = min(share(budget, len(ids) - j), bulkheads.room(tenant, subscription_id))
                if want <= 0:
                    continue
                got = await self._claim_for(subscription_id, want, bulkheads)
                claimed.extend(got)
                budget -= len(got)
                if len(got) == want:
                    busy.append((tenant, subscription_id))
        for tenant, subscription_id in busy:
            want = min(limit - len(claimed), bulkheads.room(tenant, subscription_id))
            if want > 0:
                claimed.extend(await self._claim_for(subscription_id, want, bulkheads))
        return claimed

    async def _claimable(self) -> list[tuple[int, str]]:
        now = time.monotonic()
        # A breaker this instance saw change state (e.g. its probe closed it): read the list again now.
        if now >= self._subscriptions_until or self.report.generation != self._generation:
            self._generation = self.report.generation
            rows = await self.db.fetch(query("delivery.sql", "claimable_subscriptions"))
            self._subscriptions = [(r["id"], tenant_key(r["tenant_id"])) for r in rows if r["claimable"]]
            self._tenants = len({tenant_key(r["tenant_id"]) for r in rows})
            self._subscriptions_until = now + self.subscriptions_ttl_s
        return self._subscriptions

    async def claim_probes(self, bulkheads: Bulkheads) -> list[Claimed]:
        """Take the probe slot of breakers whose cooldown is over, and claim one delivery for each (a probe
        holds a worker slot like any delivery: a subscription whose bulkhead is full waits its turn)."""
        taken: list[int] = []
        planned: Counter[str] = Counter()  # probes of each tenant taken in this loop, not yet claimed
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                for row in await conn.fetch(query("delivery.sql", "lock_probe_candidates")):
                    tenant = tenant_key(row["tenant_id"])
                    if bulkheads.room(tenant, row["subscription_id"]) - planned[tenant] <= 0:
                        continue
                    before = breaker_of(row)
                    after = before.take_probe(row["now"], self.owner, self.breaker_config)
                    if after is not None:
                        await write_breaker(conn, row["subscription_id"], after)
                        self.report.transitioned(row["subscription_id"], before, after)
                        taken.append(row["subscription_id"])
                        planned[tenant] += 1
        probes: list[Claimed] = []
        for subscription_id in taken:
            row = await self.db.fetchrow(
                query("delivery.sql", "claim"), self.owner, self.lease_s, 1, subscription_id, True
            )
            if row is None:
                await self._release_probe(subscription_id)
                continue
            claimed = self._claimed(row, probe=True)
            bulkheads.take(claimed.bulkhead, subscription_id)
            log.info(
                "breaker probe",
                extra={"action": "breaker_probe", "subscription_id": subscription_id, "order_id": claimed.order_id},
            )
            probes.append(claimed)
        return probes

    async def _claim_for(self, subscription_id: int, limit: int, bulkheads: Bulkheads) -> list[Claimed]:
        rows = await self.db.fetch(
            query("delivery.sql", "claim"), self.owner, self.lease_s, limit, subscription_id, False
        )
        claimed = [self._claimed(r) for r in rows]
        for c in claimed:
            bulkheads.take(c.bulkhead, c.subscription_id)
        return claimed

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
            bulkhead=tenant_key(row["subscription_tenant"]),
            last_status=row["last_status"],
            last_error=row["last_error"],
        )
