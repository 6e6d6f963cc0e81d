"""Console sessions: a random cookie value names a server-side session standing for the API key it signed in with.

The cookie carries no key and no claims, only an unguessable id. Sessions live in PostgreSQL
(`console_sessions`, migration 0012): every gateway process (`nexus serve --workers N`, or
several gateways) knows a session made by any of them, and a restart signs nobody out. The table holds
the SHA-256 of the cookie value and of the key (as `api_keys` does), never either itself; the key is
looked up by its hash on each request like a Bearer key, so a revoked key ends its console sessions
within the key cache's TTL. Each session has its own CSRF token, which every console form carries and
every POST must return.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets

from nexus.auth.keys import hash_key
from nexus.store.database import Database
from nexus.store.queries import query

COOKIE = "nexus_console"
LOGIN_COOKIE = "nexus_console_login"
"""Holds the CSRF token of the sign-in form (double submit), before any session exists."""


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    key_hash: bytes
    """SHA-256 of the API key the session signed in with (nexus.auth.keys.hash_key)."""
    csrf: str


class SessionStore:
    """Sessions by cookie value, in PostgreSQL; expired ones are never found, and deleted at each sign-in."""

    def __init__(self, db: Database, ttl_s: float) -> None:
        self.db = db
        self.ttl_s = ttl_s

    async def create(self, key_hash: bytes) -> tuple[str, Session]:
        """A new session for the key with this hash; returns the cookie value and the session."""
        await self.db.execute(query("auth.sql", "delete_expired_sessions"))
        sid = secrets.token_urlsafe(32)
        session = Session(key_hash, secrets.token_urlsafe(24))
        await self.db.execute(query("auth.sql", "insert_session"), hash_key(sid), key_hash, session.csrf, self.ttl_s)
        return sid, session

    async def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        row = await self.db.fetchrow(query("auth.sql", "session_by_id"), hash_key(sid))
        return None if row is None else Session(bytes(row["key_hash"]), row["csrf"])

    async def drop(self, sid: str | None) -> None:
        if sid:
            await self.db.execute(query("auth.sql", "delete_session"), hash_key(sid))


def same_token(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison of a form's CSRF token with the expected one (both must be present)."""
    return bool(given) and bool(expected) and hmac.compare_digest(str(given), str(expected))


def cookie_of(scope_headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    """One cookie's value from raw ASGI headers."""
    for header, value in scope_headers:
        if header == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                if k == name:
                    return v
    return None
