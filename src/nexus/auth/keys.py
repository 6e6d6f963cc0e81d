"""API keys: created random (256 bits), stored as their SHA-256, shown once; looked up through a cache
whose entries live at most `auth_cache_ttl_s` (1 s), so a revoked key is refused by every gateway process
within that time without a database read per request."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import hashlib
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

from nexus.auth import quotas
from nexus.auth.roles import ALL_TENANTS, Principal, Role, check_key_name, check_key_scope
from nexus.errors import NexusError
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.found import require_row
from nexus.store.queries import query
from nexus_wire.envelope import is_safe_identifier

log = logging.getLogger(__name__)

KEY_PREFIX = "nxk_"
ADMIN_KEY_FILE = "admin.key"


def generate_key() -> str:
    """A new API key: a prefix (so leaked keys are recognisable) and 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


@dataclasses.dataclass(frozen=True, slots=True)
class KeyRecord:
    """A stored key as `nexus keys list` and `GET /v1/keys` show it (never the key itself)."""

    id: int
    name: str | None
    tenant_id: str | None
    roles: tuple[str, ...]
    created_at: dt.datetime
    revoked_at: dt.datetime | None

    @classmethod
    def of(cls, row: Any) -> KeyRecord:
        return cls(row["id"], row["name"], row["tenant_id"], tuple(row["roles"]), row["created_at"], row["revoked_at"])

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "tenant": self.tenant_id if self.tenant_id is not None else ALL_TENANTS,
            "roles": list(self.roles),
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }

    def line(self) -> str:
        """One line of `nexus keys list`: the id first."""
        state = f"revoked {self.revoked_at.isoformat()}" if self.revoked_at else "active"
        tenant = self.tenant_id if self.tenant_id is not None else ALL_TENANTS
        if self.tenant_id is not None and not is_safe_identifier(self.tenant_id):
            # Stored before tenants were checked: it keeps working, shown quoted and marked for review.
            tenant = f"{self.tenant_id!r}\tINVALID-TENANT"
        name = self.name if self.name is None or self.name.isprintable() else repr(self.name)
        return f"{self.id}\ttenant={tenant}\troles={','.join(self.roles)}\tname={name or '-'}\t{state}"


async def create_key(
    db: Database, tenant: str, roles: frozenset[Role], name: str | None = None
) -> tuple[KeyRecord, str]:
    """Store a new key; return its record and the key (the only time it exists outside the caller).
    Beyond the tenant's `active_keys` quota: QuotaExceededError, nothing stored."""
    stored_tenant = check_key_scope(tenant, roles)
    check_key_name(name)
    await quotas.check_key(db, stored_tenant)  # QuotaExceededError (active_keys): nothing stored
    key = generate_key()
    row = await db.fetchrow(
        query("auth.sql", "insert_key"), name, stored_tenant, sorted(r.value for r in roles), hash_key(key)
    )
    assert row is not None
    record = KeyRecord.of(row)
    log.info("api key created", extra={"action": "key_create", "key_id": record.id, "tenant": tenant})
    return record, key


async def list_keys(db: Database, tenant: str | None = None) -> list[KeyRecord]:
    """The keys of `tenant` (not those spanning every tenant), or every key when None; filtered in SQL."""
    return [KeyRecord.of(r) for r in await db.fetch(query("auth.sql", "list_keys"), tenant)]


async def revoke_key(db: Database, key_id: int, tenant: str | None = None) -> KeyRecord:
    """Revoke a key of `tenant` (any key when None); NotFoundError for another tenant's key."""
    row = await require_row(db, query("auth.sql", "revoke_key"), key_id, tenant, missing=f"no key {key_id}")
    log.info("api key revoked", extra={"action": "key_revoke", "key_id": key_id})
    return KeyRecord.of(row)


def bootstrap_key_path(settings: Settings) -> Path | None:
    """Where the bootstrap admin key goes: `NEXUS_BOOTSTRAP_KEY_FILE`, else `<data_dir>/admin.key`; None
    when the setting is `none` (no key is created)."""
    chosen = settings.bootstrap_key_file
    if chosen is None:
        return Path(settings.data_dir) / ADMIN_KEY_FILE
    return None if chosen.strip().lower() == "none" else Path(chosen)


async def bootstrap_admin_key(db: Database, path: Path | None) -> Path | None:
    """On a database without any key, create an admin key (every tenant) and write it to `path` (mode
    0600); return that path, or None if keys already exist or `path` is None (no bootstrap key wanted)."""
    if path is None:
        return None
    with wrap_db_errors():
        async with db.pool.acquire() as conn, conn.transaction():
            await conn.execute(query("auth.sql", "bootstrap_lock"))
            if await conn.fetchval(query("auth.sql", "count_keys")):
                return None
            key = generate_key()
            await conn.execute(query("auth.sql", "insert_key"), "bootstrap-admin", None, ["admin"], hash_key(key))
            # Written inside the transaction: if the file cannot be written, no key exists that nobody has.
            _write_key_file(path, key)
    log.info("bootstrap admin key written", extra={"action": "key_bootstrap", "path": str(path)})
    return path


def _write_key_file(path: Path, key: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    os.chmod(path, 0o600)


class Refusal(enum.StrEnum):
    """Why a key was not accepted (the `reason` of nexus_auth_failures_total)."""

    UNKNOWN = "unknown"
    REVOKED = "revoked"


class KeyCache:
    """Principals by key hash, each entry trusted for at most `ttl_s`; unknown keys are cached too (as
    a refusal) so a flood of wrong keys costs one query per distinct key per `ttl_s`, and the cache is
    bounded so it cannot be grown without limit."""

    def __init__(self, db: Database, ttl_s: float = 1.0, max_entries: int = 10_000) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[float, Principal | Refusal]] = {}
        self._reads: dict[bytes, asyncio.Future[None]] = {}

    def known_valid(self, digest: bytes) -> bool:
        """Whether the key with this SHA-256 was valid when last checked, even if its entry is due for another
        check: its request is a tenant's (it counts against its tenant's share while it is checked again), not
        one of the unknown keys the unauthenticated share bounds. Checking still decides whether it is valid."""
        return self.known_tenant(digest) is not None

    def known_tenant(self, digest: bytes) -> str | None:
        """The tenant whose share a request with this key counts in before it is checked (nothing awaited): the
        tenant of the key as last checked valid (`ALL_TENANTS` for a key spanning every tenant, a lapsed entry
        included, as `known_valid`); None for a key the cache does not know valid."""
        hit = self._entries.get(digest)
        if hit is None or not isinstance(hit[1], Principal):
            return None
        return hit[1].tenant_id or ALL_TENANTS

    def fresh(self, digest: bytes) -> Principal | None:
        """The principal of the key with this SHA-256 while its entry is within its TTL (nothing awaited); None
        for any other key (unknown, revoked, or due for its next check: `check_hash` decides)."""
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            found = hit[1]
            return found if isinstance(found, Principal) else None
        return None

    async def lookup(self, key: str) -> Principal | None:
        return await self.lookup_hash(hash_key(key))

    async def lookup_hash(self, digest: bytes) -> Principal | None:
        """The principal of the key with this SHA-256 (a console session holds only the hash)."""
        found = await self.check_hash(digest)
        return found if isinstance(found, Principal) else None

    async def check_hash(self, digest: bytes) -> Principal | Refusal:
        """The principal of the key with this SHA-256, or why there is none (unknown, revoked).

        One read per key at a time: when an entry lapses under load, the requests that arrive while it is read
        again wait for that read (none is staler than the entry it refreshes) instead of each reading the key
        themselves; if the read fails or is cancelled they read it themselves."""
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        pending = self._reads.get(digest)
        if pending is not None:
            await asyncio.shield(pending)
            hit = self._entries.get(digest)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reads.setdefault(digest, future)
        try:
            return await self._read(digest, hit)
        finally:
            if self._reads.get(digest) is future:
                del self._reads[digest]
            future.set_result(None)

    async def _read(self, digest: bytes, hit: tuple[float, Principal | Refusal] | None) -> Principal | Refusal:
        """Read the key from the database and cache what was found."""
        now = time.monotonic()
        try:
            row = await self.db.fetchrow(query("auth.sql", "key_by_hash"), digest)
        except NexusError:
            # The database is down: a key known a moment ago stays known (nothing can be revoked, and little
            # done, until it is back); an unknown key cannot be checked and the caller answers 503.
            if hit is not None and isinstance(hit[1], Principal):
                return hit[1]
            raise
        found: Principal | Refusal
        if row is None:
            found = Refusal.UNKNOWN
        elif row["revoked"]:
            found = Refusal.REVOKED
        else:
            found = Principal(row["id"], row["tenant_id"], frozenset(Role(r) for r in row["roles"]), row["name"])
        if len(self._entries) >= self.max_entries:
            self._entries = {d: e for d, e in self._entries.items() if e[0] > now}
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
        self._entries[digest] = (now + self.ttl_s, found)
        return found
