"""Console sessions: a random cookie value names a server-side session holding the API key it signed in with.

The cookie carries no key and no claims, only an unguessable id; the key stays in the serving process,
so a revoked key ends its console sessions within the key cache's TTL (the key is looked up on each
request like a Bearer key). Sessions are lost when the process restarts: signing in again is the cure.
Each session has its own CSRF token, which every console form carries and every POST must return.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import time

COOKIE = "nexus_console"
LOGIN_COOKIE = "nexus_console_login"
"""Holds the CSRF token of the sign-in form (double submit), before any session exists."""


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    key: str
    csrf: str
    expires: float


class SessionStore:
    """Sessions of one process, by cookie value; expired ones are dropped as they are met."""

    def __init__(self, ttl_s: float, max_sessions: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}

    def create(self, key: str) -> tuple[str, Session]:
        now = time.monotonic()
        if len(self._sessions) >= self.max_sessions:
            self._sessions = {k: s for k, s in self._sessions.items() if s.expires > now}
            while len(self._sessions) >= self.max_sessions:  # still full: the oldest goes
                self._sessions.pop(next(iter(self._sessions)))
        sid = secrets.token_urlsafe(32)
        session = Session(key, secrets.token_urlsafe(24), now + self.ttl_s)
        self._sessions[sid] = session
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        if session.expires <= time.monotonic():
            self._sessions.pop(sid, None)
            return None
        return session

    def drop(self, sid: str | None) -> None:
        if sid:
            self._sessions.pop(sid, None)


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
