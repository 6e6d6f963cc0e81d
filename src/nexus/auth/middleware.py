"""Authentication, authorization and rate limiting of every HTTP request (an ASGI middleware).

Runs before routing: the route policy (`roles.required_roles`) says which roles a path needs; the key
from `Authorization: Bearer <key>` is hashed and looked up through `KeyCache`; the principal goes into
`request.state.principal` for the routes (tenancy). Refusals answer the one error shape
`{"code", "message", "request_id"}` and write nothing: 401 UNAUTHENTICATED (no key, unknown or revoked
key), 403 FORBIDDEN (no role for the route), 429 RATE_LIMITED with Retry-After.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import MutableMapping
from typing import Any

from nexus.auth.keys import KeyCache
from nexus.auth.ratelimit import RateLimiter, retry_after_header
from nexus.auth.roles import Principal, Role, allowed, required_roles, uses_session
from nexus.auth.sessions import COOKIE, SessionStore, cookie_of
from nexus.errors import ErrorCode, NexusError

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Any
Send = Any


def principal_of(request: Any) -> Principal:
    """The principal the middleware attached to a request (routes behind the middleware always have one)."""
    principal: Principal = request.state.principal
    return principal


class Gatekeeper:
    """Who is calling, and may they: the key (or console session), the route's roles, the rate limit.
    Shared by the middleware and the events fast path (nexus.ingress.fast_events), so both refuse alike."""

    def __init__(
        self, keys: KeyCache, limiter: RateLimiter | None = None, sessions: SessionStore | None = None
    ) -> None:
        self.keys = keys
        self.limiter = limiter
        self.sessions = sessions

    async def admit(self, scope: Scope, send: Send, roles: frozenset[Role]) -> Principal | None:
        """The caller's principal; None once a refusal (401, 403, 429, 503, or the console's sign-in
        redirect) has been sent."""
        session_route = uses_session(scope["path"])
        try:
            if session_route:  # issue 16: the console signs in with a form; its session cookie stands for the key
                session = await self.sessions.get(cookie_of(scope["headers"], COOKIE)) if self.sessions else None
                if session is None:
                    await _to_login(send)
                    return None
                scope.setdefault("state", {})["console_session"] = session
                principal = await self.keys.lookup_hash(session.key_hash)
            else:
                key = _bearer(scope)
                if key is None:
                    message = "an API key is required (Authorization: Bearer <key>)"
                    await _refuse(scope, send, 401, ErrorCode.UNAUTHENTICATED, message)
                    return None
                principal = await self.keys.lookup(key)
        except NexusError as exc:
            message = "cannot check the API key now"
            await _refuse(scope, send, 503, exc.code, message, {"retry-after": "1"}, retryable=True)
            return None
        if principal is None:
            if session_route:
                await _to_login(send)
                return None
            await _refuse(scope, send, 401, ErrorCode.UNAUTHENTICATED, "unknown or revoked API key")
            return None
        if not allowed(principal, roles):
            need = " or ".join(sorted(r.value for r in roles))
            await _refuse(scope, send, 403, ErrorCode.FORBIDDEN, f"this key lacks the role for this route ({need})")
            return None
        if self.limiter is not None:
            wait = self.limiter.take(principal.key_id, principal.roles, time.monotonic())
            if wait > 0:
                await _refuse(
                    scope,
                    send,
                    429,
                    ErrorCode.RATE_LIMITED,
                    "rate limit of this key exceeded",
                    {"retry-after": retry_after_header(wait)},
                )
                return None
        return principal


class AuthMiddleware:
    def __init__(
        self, app: Any, keys: KeyCache, limiter: RateLimiter | None = None, sessions: SessionStore | None = None
    ) -> None:
        self.app = app
        self.gate = Gatekeeper(keys, limiter, sessions)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        roles = required_roles(scope["method"], scope["path"])
        if not roles:
            await self.app(scope, receive, send)
            return
        principal = await self.gate.admit(scope, send, roles)
        if principal is not None:
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, send)


async def _to_login(send: Send) -> None:
    """A console page without a live session: to the sign-in form (a browser follows; nothing is written)."""
    headers = [(b"location", b"/console/login"), (b"content-length", b"0"), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            text: str = value.decode("latin-1")
            scheme, _, token = text.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                return token
            return None
    return None


def request_id_of(scope: Scope) -> str:
    state = scope.get("state") or {}
    rid = state.get("request_id")
    if isinstance(rid, str):
        return rid
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            given: str = value.decode("latin-1")[:200]
            return given
    return uuid.uuid4().hex


async def _refuse(
    scope: Scope,
    send: Send,
    status: int,
    code: ErrorCode,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    retryable: bool | None = None,
) -> None:
    content: dict[str, Any] = {"code": code.value, "message": message, "request_id": request_id_of(scope)}
    if retryable is not None:  # as the app's own 503 answers say (DESIGN: transient errors are retryable)
        content["retryable"] = retryable
    body = json.dumps(content).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        raw.append((b"www-authenticate", b"Bearer"))
    raw.extend((k.encode(), v.encode()) for k, v in (headers or {}).items())
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
