"""The key check of every request, on real PostgreSQL: a key is hashed once per request, and when its cache entry
lapses under load the requests arriving meanwhile share one read of it (revocation still seen within the TTL)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nexus.auth import middleware
from nexus.auth.keys import KeyCache, create_key, hash_key, revoke_key
from nexus.auth.middleware import Gatekeeper
from nexus.auth.roles import Principal, Role
from nexus.auth.shares import RequestShares
from nexus.store.database import Database


class CountedReads:
    """The real database, with its single-row reads counted (what a key check costs it)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.reads = 0

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        self.reads += 1
        return await self.db.fetchrow(sql, *args)


async def test_concurrent_checks_of_a_lapsed_key_share_one_read(db: Database) -> None:
    """Fifty requests checking one key whose entry has lapsed read it once, all get its principal, and a revoke
    is seen by the checks after the next lapse."""
    record, key = await create_key(db, "acme", frozenset({Role.AGENT}), "agent")
    counted = CountedReads(db)
    cache = KeyCache(counted, ttl_s=0.2)  # type: ignore[arg-type]  # the real database, reads counted
    digest = hash_key(key)
    found = await asyncio.gather(*(cache.check_hash(digest) for _ in range(50)))
    assert counted.reads == 1
    assert all(isinstance(p, Principal) and p.key_id == record.id for p in found)
    await revoke_key(db, record.id)
    await asyncio.sleep(0.25)
    again = await asyncio.gather(*(cache.check_hash(digest) for _ in range(50)))
    assert counted.reads == 2
    assert {str(p) for p in again} == {"revoked"}


async def test_a_request_hashes_its_key_once(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Admitting a request with an API key (unknown-key share on, so the key is looked at twice) hashes it once."""

    _, key = await create_key(db, "acme", frozenset({Role.AGENT}), "agent")
    hashed: list[str] = []

    def counting_hash(text: str) -> bytes:
        hashed.append(text)
        return hash_key(text)

    monkeypatch.setattr(middleware, "hash_key", counting_hash)
    gate = Gatekeeper(KeyCache(db), shares=RequestShares(100, 10))
    scope = {
        "type": "http",
        "path": "/v1/events",
        "method": "POST",
        "headers": [(b"authorization", f"Bearer {key}".encode())],
    }

    async def send(message: Any) -> None:
        raise AssertionError(f"nothing is answered to an admitted request: {message}")

    principal = await gate.admit(scope, send, frozenset({Role.AGENT}))
    assert principal is not None and principal.tenant_id == "acme"
    assert hashed == [key]
