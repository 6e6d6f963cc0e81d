"""Migration 0045 on a real PostgreSQL: the group commit's write (`batch_rows.write_rows`, gateway.sql `write_batch`)
appends its orders' live_orders and unstarted_plans deltas itself, counted against what `read_batch` read of each
order, no trigger on orders: exact for orders inserted live or finished, updated to finished (or back), of two
tenants in one statement, with and without a plan row; one delta row per tenant and quota per statement; an order
written without being read is refused, not counted as new; no scan of every order, no process read."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest

from nexus.batch_rows import UnreadOrderError, read_batch, write_rows
from nexus.core.decide.rows import OrderRow
from nexus.store.database import Database
from nexus.store.queries import query

USED = "SELECT coalesce(sum(used), 0)::int FROM tenant_usage WHERE tenant_id = $1 AND quota = $2"
LIVE_ROWS = "SELECT count(*)::int FROM orders WHERE tenant_id = $1 AND finished_at IS NULL"
SCANS = "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = $1"

Order = tuple[str, str, int, bool]
"""(tenant, order, last_seq, finished)"""


def row(tenant: str, order: str, seq: int, finished: bool) -> OrderRow:
    status = "completed" if finished else "created"
    return OrderRow(order, tenant, f"p-{order}", status, seq, False, seq, "order", 2, "{}", "", None, finished)


async def write(conn: asyncpg.Connection, *orders: Order) -> None:
    """Read the orders (`read_batch`) and write them (`write_rows`, one write_batch statement), as the gateway does."""
    keys = sorted({(t, o) for t, o, _, _ in orders})
    reads = await read_batch(conn, keys, validated=False)
    await write_rows(conn, live=reads.live, read=keys, orders=[row(*o) for o in orders])


async def plan(conn: asyncpg.Connection, tenant: str, order: str) -> None:
    """A started plan's row, as a plan start writes it (steps.sql `create_plan`; the plans trigger counts it)."""
    await conn.execute(query("steps.sql", "create_plan"), tenant, order, f"p-{order}", "order", None, "test")


async def used(conn: asyncpg.Connection, tenant: str, quota: str = "live_orders") -> int:
    return int(await conn.fetchval(USED, tenant, quota))


async def test_each_kind_of_write_moves_live_orders_by_what_it_changed(db: Database) -> None:
    """Inserted live +1, inserted finished 0, live -> finished -1, finished stays finished 0, finished written
    live again (the fold's flag clears finished_at) +1, live stays live 0; two tenants in one statement each get
    their own; live_orders equals the tenant's orders with finished_at NULL after every write."""
    async with db.pool.acquire() as conn, conn.transaction():
        await write(conn, ("acme", "a", 1, False), ("acme", "b", 1, False), ("acme", "c", 1, True),
                    ("globex", "g", 1, False))  # fmt: skip
        assert (await used(conn, "acme"), await used(conn, "globex")) == (2, 1)
        await write(conn, ("acme", "a", 2, True), ("acme", "c", 2, True), ("globex", "g", 2, False))
        assert (await used(conn, "acme"), await used(conn, "globex")) == (1, 1)
        await write(conn, ("acme", "a", 3, False), ("globex", "g", 3, True), ("globex", "h", 1, False))
        assert (await used(conn, "acme"), await used(conn, "globex")) == (2, 1)
        for tenant in ("acme", "globex"):
            assert await used(conn, tenant) == await conn.fetchval(LIVE_ROWS, tenant)


async def test_an_order_inserted_with_a_plan_row_leaves_unstarted_plans_once(db: Database) -> None:
    """A plan start counts an unstarted plan (the plans trigger); the order's first write counts it out, its later
    writes do not again; an order inserted without a plan row changes nothing there."""
    async with db.pool.acquire() as conn, conn.transaction():
        await plan(conn, "acme", "a")
        await plan(conn, "acme", "b")
        assert await used(conn, "acme", "unstarted_plans") == 2
        await write(conn, ("acme", "a", 1, False), ("acme", "x", 1, False))
        assert await used(conn, "acme", "unstarted_plans") == 1
        await write(conn, ("acme", "a", 2, False), ("acme", "b", 1, True))
        assert await used(conn, "acme", "unstarted_plans") == 0
        assert await used(conn, "acme") == 2  # a and x live, b inserted finished


async def test_a_statement_appends_one_delta_row_per_tenant_and_quota(db: Database) -> None:
    """Sixteen orders of one tenant inserted, then finished, in one statement each: one live_orders row per
    statement (the triggers appended one per statement plus one per order finished)."""
    async with db.pool.acquire() as conn, conn.transaction():
        await write(conn, *(("acme", f"o{i}", 1, False) for i in range(16)))
        await write(conn, *(("acme", f"o{i}", 5, True) for i in range(16)))
        rows = await conn.fetch("SELECT used FROM tenant_usage WHERE tenant_id = 'acme' ORDER BY used DESC")
        assert [r["used"] for r in rows] == [16, -16]


async def test_the_counts_read_each_order_by_key_and_no_process(db: Database) -> None:
    """With a thousand orders and plans stored and the statements planned while both were empty, a read and write
    of orders reads each by key (no sequential scan of orders, nor of plans) and reads no process."""
    async with db.pool.acquire() as conn, conn.transaction():
        await write(conn, ("acme", "first", 1, False))  # planned now, on empty tables
        await conn.execute(
            "INSERT INTO plans (tenant_id, order_id, plan_id, process, actor)"
            " SELECT 'acme', 'planned' || i, 'p', 'order', 'test' FROM generate_series(1, 1000) AS i"
        )
        await write(conn, *(("acme", f"o{i}", 1, False) for i in range(1000)))
        before = {t: tuple(await conn.fetchrow(SCANS, t)) for t in ("orders", "plans", "processes")}
        await write(conn, ("acme", "o1", 2, True), ("acme", "new", 1, False), ("acme", "planned7", 1, False))
        after = {t: tuple(await conn.fetchrow(SCANS, t)) for t in ("orders", "plans", "processes")}
        assert after["orders"][0] == before["orders"][0]  # no sequential scan
        assert after["plans"][0] == before["plans"][0]
        assert after["processes"] == before["processes"]
        assert await used(conn, "acme") == 1002
        assert await used(conn, "acme", "unstarted_plans") == 999


async def test_live_orders_follow_the_rows_over_random_writes(db: Database) -> None:
    """Random statements of up to eight orders of three tenants, each order written live or finished at random
    (including finished back to live): after each, every tenant's live_orders equals its orders with finished_at
    NULL."""
    rng = random.Random(45)
    tenants = ("acme", "globex", "initech")
    async with db.pool.acquire() as conn, conn.transaction():
        for step in range(40):
            keys = rng.sample([(t, f"o{i}") for t in tenants for i in range(12)], rng.randint(1, 8))
            await write(conn, *((t, o, step + 1, rng.random() < 0.4) for t, o in keys))
            for tenant in tenants:
                assert await used(conn, tenant) == await conn.fetchval(LIVE_ROWS, tenant), (step, tenant)


async def test_an_order_written_without_being_read_is_refused_not_counted_as_new(db: Database) -> None:
    """A stored live order whose row comes without its read (not among the orders read) is refused before anything
    is written: counted as inserted it would add one live order more than the rows hold."""
    async with db.pool.acquire() as conn:
        async with conn.transaction():
            await write(conn, ("acme", "a", 1, False))
        with pytest.raises(UnreadOrderError):
            async with conn.transaction():
                await write_rows(conn, live={}, read=[("acme", "b")], orders=[row("acme", "a", 2, False)])
        assert await conn.fetchval("SELECT last_seq FROM orders WHERE order_id = 'a'") == 1
        assert await used(conn, "acme") == 1


async def test_a_recount_restores_counts_that_drifted_and_waits_for_writers_in_flight(db: Database) -> None:
    """Orders inserted by a plain INSERT (as an earlier release's gateway writes after migration 0045: uncounted)
    and a bogus delta of another tenant are corrected by `nexus_recount_usage`, for one tenant or all; a recount
    started while a write is uncommitted waits for it and counts it (the write's delta is not added twice)."""
    async with db.pool.acquire() as conn, db.pool.acquire() as other:
        await write(conn, ("acme", "a", 1, False), ("acme", "b", 1, True))
        await conn.execute(
            "INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, process,"
            " process_version, facts) VALUES ('old', 'acme', 'p', 'created', 1, false, 0, 'order', 2, '{}')"
        )
        await conn.execute("INSERT INTO tenant_usage VALUES ('globex', 'live_orders', 5)")
        assert (await used(conn, "acme"), await used(conn, "globex")) == (1, 5)
        await conn.execute(query("quotas.sql", "recount_usage"), "acme")
        assert (await used(conn, "acme"), await used(conn, "globex")) == (2, 5)
        await conn.execute(query("quotas.sql", "recount_usage"), None)
        assert (await used(conn, "acme"), await used(conn, "globex")) == (2, 0)
        async with conn.transaction():
            await write(conn, ("acme", "c", 1, False), ("acme", "a", 2, True))  # +1 -1, and an order inserted
            await write(conn, ("acme", "d", 1, False))
            recount = asyncio.create_task(other.execute(query("quotas.sql", "recount_usage"), None))
            await asyncio.sleep(0.3)
            assert not recount.done()  # waits for the writer's transaction
        await recount
        assert await used(conn, "acme") == await conn.fetchval(LIVE_ROWS, "acme") == 3
