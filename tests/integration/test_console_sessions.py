"""Console sessions in PostgreSQL: any gateway process finds a session another made."""

from __future__ import annotations

import asyncio
import hashlib

from nexus.auth.keys import hash_key
from nexus.auth.sessions import SessionStore
from nexus.settings import Settings
from nexus.store.database import Database


async def test_a_session_made_by_one_store_is_found_by_another(db: Database, settings: Settings) -> None:
    """Two stores (two processes' worth) share sessions; dropping one in either ends it for both."""
    one, two = SessionStore(db, 60), SessionStore(await Database(settings).open(migrate=False), 60)
    try:
        sid, session = await one.create(hash_key("nxk_a"))
        other, second = await one.create(hash_key("nxk_a"))
        assert sid != other and session.csrf != second.csrf
        assert await two.get(sid) == session and await two.get("nope") is None and await two.get(None) is None
        await two.drop(other)
        assert await one.get(other) is None and await one.get(sid) == session
    finally:
        await two.db.close()


async def test_sessions_expire_and_expired_ones_are_deleted(db: Database) -> None:
    """A session is not found past its TTL, and the next sign-in deletes the expired rows."""
    store = SessionStore(db, 0.2)
    sid, _ = await store.create(hash_key("nxk_a"))
    await asyncio.sleep(0.3)
    assert await store.get(sid) is None
    await SessionStore(db, 60).create(hash_key("nxk_b"))
    assert await db.fetchval("SELECT count(*) FROM console_sessions") == 1


async def test_the_table_holds_neither_the_cookie_nor_the_key(db: Database) -> None:
    """Only hashes are stored: reading the table gives no usable cookie and no key."""
    sid, _ = await SessionStore(db, 60).create(hash_key("nxk_secret"))
    row = await db.fetchrow("SELECT id_hash, key_hash FROM console_sessions")
    assert row is not None
    assert bytes(row["id_hash"]) == hashlib.sha256(sid.encode()).digest() and sid.encode() not in bytes(row["id_hash"])
    assert bytes(row["key_hash"]) == hash_key("nxk_secret")
