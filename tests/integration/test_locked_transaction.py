"""BEGIN with the orders' locks in one round trip (`nexus.store.locked`): the same locks as gateway.sql
`lock_orders` (a writer taking them either way excludes the other), whatever the keys hold, and a block that
raises leaves no transaction behind."""

from __future__ import annotations

import asyncpg
import pytest

from nexus.batch_rows import pairs
from nexus.store.database import Database
from nexus.store.locked import locked_transaction
from nexus.store.queries import query

UNSIGNED = 0xFFFF_FFFF_FFFF_FFFF
NASTY = [("acme", "o'1; DROP TABLE orders; --"), ("acme", "o\\2 \u00e9\u4e2d"), ("t\u2028x", "o3"), ("acme", "o1")]


async def _held_keys(conn: asyncpg.Connection, pid: int) -> set[int]:
    rows = await conn.fetch(
        "SELECT (classid::bigint << 32) | objid::bigint AS k FROM pg_locks"
        " WHERE locktype = 'advisory' AND pid = $1 AND granted",
        pid,
    )
    return {r["k"] & UNSIGNED for r in rows}


async def test_the_locks_are_lock_orders_locks_whatever_the_keys_hold(db: Database) -> None:
    holder, observer = await asyncpg.connect(db.url), await asyncpg.connect(db.url)
    try:
        expected = await observer.fetch(
            "SELECT DISTINCT hashtextextended(t || chr(31) || o, 0) AS k FROM unnest($1::text[], $2::text[]) u(t, o)",
            *pairs(NASTY),
        )
        async with locked_transaction(holder, NASTY):
            held = await _held_keys(observer, holder.get_server_pid())
        assert held == {r["k"] & UNSIGNED for r in expected}
        assert await _held_keys(observer, holder.get_server_pid()) == set()  # released at COMMIT
        assert await observer.fetchval("SELECT count(*) FROM orders WHERE order_id LIKE 'o''1%'") == 0
    finally:
        await holder.close()
        await observer.close()


async def test_a_writer_locking_either_way_excludes_the_other(db: Database) -> None:
    ours, theirs = await asyncpg.connect(db.url), await asyncpg.connect(db.url)
    try:
        await theirs.execute("SET lock_timeout = '200ms'")
        await ours.execute("SET lock_timeout = '200ms'")
        async with locked_transaction(ours, [("acme", "x1"), ("acme", "x2")]):
            with pytest.raises(asyncpg.LockNotAvailableError):
                async with theirs.transaction():
                    await theirs.execute(query("gateway.sql", "lock_orders"), ["acme"], ["x2"])
        async with theirs.transaction():
            await theirs.execute(query("gateway.sql", "lock_orders"), ["acme"], ["x2"])
            with pytest.raises(asyncpg.LockNotAvailableError):
                async with locked_transaction(ours, [("acme", "x2")]):
                    pass
            assert not ours.is_in_transaction()
    finally:
        await ours.close()
        await theirs.close()


async def test_a_block_that_raises_is_rolled_back(db: Database) -> None:
    conn = await asyncpg.connect(db.url)
    try:
        await conn.execute("CREATE TEMP TABLE scratch (n int)")
        with pytest.raises(RuntimeError):
            async with locked_transaction(conn, [("acme", "r1")]):
                await conn.execute("INSERT INTO scratch VALUES (1)")
                raise RuntimeError("the fold failed")
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT count(*) FROM scratch") == 0
        async with locked_transaction(conn, []):  # no orders: BEGIN alone
            await conn.execute("INSERT INTO scratch VALUES (2)")
        assert await conn.fetchval("SELECT count(*) FROM scratch") == 1
    finally:
        await conn.close()
