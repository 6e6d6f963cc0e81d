"""The pool's connections go round the tenants, and a tenant holds at most its share while another is active
(`nexus.store.fair_pool`), against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from nexus.store.database import Database
from nexus.store.fair_pool import DB_SHARE
from tests.conftest import fast_settings


@pytest.fixture
async def small(database_url: str) -> AsyncIterator[Database]:
    """A pool of four connections, one tenant holding at most one while another is active."""
    database = await Database(fast_settings(database_url, db_pool_size=4, db_connections_per_tenant=1)).open(
        migrate=False
    )
    yield database
    await database.close()


async def _hold(db: Database, share: str | None, got: asyncio.Event, until: asyncio.Event) -> None:
    """Take a connection in `share`'s name, use it, and keep it until `until` is set."""
    DB_SHARE.set(share)
    async with db.pool.acquire() as conn:
        await conn.fetchval("SELECT 1")
        got.set()
        await until.wait()


async def _use(db: Database, share: str | None, order: list[str | None] | None = None) -> None:
    DB_SHARE.set(share)
    async with db.pool.acquire() as conn:
        await conn.fetchval("SELECT 1")
        if order is not None:
            order.append(share)


async def test_a_tenant_at_its_share_waits_while_another_is_active_and_the_other_is_served(small: Database) -> None:
    """acme holds its one connection; while initech is active acme's second waits with three connections free,
    and initech's is served at once; acme's comes when its first is released."""
    first, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_hold(small, "acme", first, release))
    await asyncio.wait_for(first.wait(), 10)
    await asyncio.create_task(_use(small, "initech"))  # initech is active now
    second = asyncio.create_task(_use(small, "acme"))
    try:
        await asyncio.sleep(0.3)
        assert not second.done(), "acme took a second connection while initech was active"
        await asyncio.wait_for(asyncio.create_task(_use(small, "initech")), 5)
    finally:
        release.set()
    await asyncio.wait_for(second, 5)
    await holder


async def test_a_tenant_alone_keeps_the_whole_pool(small: Database) -> None:
    """With no other tenant active, one tenant holds every connection at once."""
    got = [asyncio.Event() for _ in range(4)]
    release = asyncio.Event()
    holders = [asyncio.create_task(_hold(small, "acme", g, release)) for g in got]
    await asyncio.wait_for(asyncio.gather(*(g.wait() for g in got)), 10)
    release.set()
    await asyncio.gather(*holders)


async def _no_tenant_takes_every_connection(db: Database) -> None:
    """Four holders of no tenant (the gateway's own work) get the pool's four connections at once, then give them
    back."""
    got = [asyncio.Event() for _ in range(4)]
    release = asyncio.Event()
    holders = [asyncio.create_task(_hold(db, None, g, release)) for g in got]
    await asyncio.wait_for(asyncio.gather(*(g.wait() for g in got)), 10)
    release.set()
    await asyncio.gather(*holders)


async def test_the_gateways_own_work_is_never_held_to_a_share(small: Database) -> None:
    """Work of no tenant (the group commit, the sweepers) takes every connection while tenants are active."""
    await asyncio.create_task(_use(small, "acme"))
    await asyncio.create_task(_use(small, "initech"))
    await _no_tenant_takes_every_connection(small)


async def test_the_connections_go_round_the_tenants_waiting(database_url: str) -> None:
    """One connection: five of acme's queries queued before one of initech's; initech's is the second served,
    not the sixth (first come, first served)."""
    db = await Database(fast_settings(database_url, db_pool_size=1)).open(migrate=False)
    try:
        got, release = asyncio.Event(), asyncio.Event()
        holder = asyncio.create_task(_hold(db, None, got, release))
        await asyncio.wait_for(got.wait(), 10)
        order: list[str | None] = []
        waiters = [asyncio.create_task(_use(db, "acme", order)) for _ in range(5)]
        await asyncio.sleep(0.05)
        waiters.append(asyncio.create_task(_use(db, "initech", order)))
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.wait_for(asyncio.gather(holder, *waiters), 10)
        assert order.index("initech") == 1, order
    finally:
        release.set()
        await db.close()


async def test_a_cancelled_wait_leaves_no_connection_behind(small: Database) -> None:
    """A query cancelled while it waits for a connection (its client went) holds nothing: afterwards the
    gateway's own work takes all four connections."""
    first, release = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_hold(small, "acme", first, release))
    await asyncio.wait_for(first.wait(), 10)
    await asyncio.create_task(_use(small, "initech"))
    waiting = asyncio.create_task(_use(small, "acme"))
    await asyncio.sleep(0.2)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await holder
    await _no_tenant_takes_every_connection(small)


async def test_a_requests_queries_run_in_its_tenants_share(db: Database, api) -> None:  # type: ignore[no-untyped-def]
    """The key check names the request's tenant as the share its queries are counted in."""
    assert db.pool.shares.last_seen("acme") is None
    answer = await api.get("/v1/orders/not-there")
    assert answer.status_code == 404
    assert db.pool.shares.last_seen("acme") is not None
