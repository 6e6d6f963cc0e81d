"""The quota check's per-process snapshot (NEXUS_QUOTA_REFRESH_S), on real PostgreSQL through the HTTP API: a
request far from every limit is admitted without reading the usage, one within its own worth of a limit
runs the exact check, the snapshot is read again after the interval, and 0 makes every check exact.

Usage written behind the process's back (rows added to `tenant_usage` here) stands for what other gateway
processes stored since this one last read it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.factories import step_json


@asynccontextmanager
async def acme_client(settings: Settings, refresh_s: float) -> AsyncIterator[tuple[Database, httpx.AsyncClient]]:
    """A database handle with NEXUS_QUOTA_REFRESH_S = `refresh_s`, acme's live_orders quota at 10, and an
    agent key's client of an app on it."""
    db = await Database(settings.replace(quota_refresh_s=refresh_s)).open(migrate=False)
    await db.execute(query("quotas.sql", "set_tenant_quotas"), "acme", "100000", 10, None, None, None, None)
    _, key = await create_key(db, "acme", frozenset({Role.AGENT}), "agent")
    transport = httpx.ASGITransport(app=create_app(db, Gateway(db)))
    client = httpx.AsyncClient(transport=transport, base_url="http://api", headers={"Authorization": f"Bearer {key}"})
    try:
        yield db, client
    finally:
        await client.aclose()
        await db.close()


async def new_orders(client: httpx.AsyncClient, *names: str) -> int:
    """Post the first step of each named order in one request; its status code."""
    envelopes = [step_json(name, f"p-{name}", 1) for name in names]
    return (await client.post("/v1/events", json={"events": envelopes})).status_code


async def store_elsewhere(db: Database, live_orders: int) -> None:
    """Count `live_orders` more of acme's orders, as another process's writes would."""
    sql = "INSERT INTO tenant_usage (tenant_id, quota, used) VALUES ('acme', 'live_orders', $1)"
    await db.execute(sql, live_orders)


async def test_far_from_every_limit_is_admitted_from_the_snapshot(settings: Settings) -> None:
    """With a fresh snapshot, a request far from the limit is admitted in memory even though other writes took
    the tenant past it, while one within its own worth of the limit runs the exact check and is refused."""
    async with acme_client(settings, 60.0) as (db, acme):
        assert await new_orders(acme, "o-0") == 200  # the snapshot: 0 stored, limit 10
        await store_elsewhere(db, 100)
        assert await new_orders(acme, "o-1") == 200  # 1 + 2 * 1 <= 10 by the snapshot: no query
        assert await new_orders(acme, *(f"o-{i}" for i in range(2, 7))) == 429  # 2 + 2 * 5 > 10: exact
        assert await new_orders(acme, "o-7") == 429  # the exact check refreshed the snapshot


async def test_the_snapshot_is_read_again_after_the_interval(settings: Settings) -> None:
    """Usage stored elsewhere (or a quota lowered) takes effect once the refresh interval has passed."""
    async with acme_client(settings, 0.3) as (db, acme):
        assert await new_orders(acme, "o-0") == 200
        await store_elsewhere(db, 100)
        await asyncio.sleep(0.3)
        assert await new_orders(acme, "o-1") == 429
        await db.execute(query("quotas.sql", "set_tenant_quotas"), "acme", "100000", 1000, None, None, None, None)
        await asyncio.sleep(0.3)
        assert await new_orders(acme, "o-1") == 200


async def test_refresh_zero_checks_every_request_exactly(settings: Settings) -> None:
    """NEXUS_QUOTA_REFRESH_S=0: every request reads the usage, so writes elsewhere count at once."""
    async with acme_client(settings, 0.0) as (db, acme):
        assert await new_orders(acme, "o-0") == 200
        await store_elsewhere(db, 100)
        assert await new_orders(acme, "o-1") == 429
