"""Authentication, authorization and rate limiting of every HTTP request (an ASGI middleware).

Runs before routing: the route policy (`roles.required_roles`) says which roles a path needs; the key
from `Authorization: Bearer <key>` is hashed and looked up through `KeyCache`; the principal goes into
`request.state.principal` for the routes (tenancy). With OAuth on (`NEXUS_PUBLIC_URL`), a Bearer credential of
a JWT's form is an access token checked by `nexus.auth.oauth` instead, to the same kind of principal; every
401 then points at the resource's metadata (`WWW-Authenticate: Bearer resource_metadata="..."`) and a token
without the route's role is answered 403 FORBIDDEN with `error="insufficient_scope"`. Refusals answer the
one error shape `{"code", "message", "request_id"}` and write nothing: 401 UNAUTHENTICATED (no key, unknown or revoked
key), 403 FORBIDDEN (no role for the route), 429 RATE_LIMITED with Retry-After, 429 TENANT_BUSY with
Retry-After (the caller's tenant, or the requests still without a known key, at their share of the
process's requests in flight: `nexus.auth.shares`). An admitted request holds its tenant's share until
its answer ends (`Gatekeeper.release`); once its body is read it waits for one of the process's processing
slots (`Gatekeeper.slots`, `nexus.auth.slots`: the request guard and the events fast path take it).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import re
import time
from collections.abc import MutableMapping
from typing import Any

from nexus import metrics
from nexus.asgi import HttpMiddleware
from nexus.auth.keys import KeyCache, Refusal, hash_key
from nexus.auth.oauth import SCOPES, OAuthVerifier, TokenRefusal, looks_like_jwt
from nexus.auth.ratelimit import FailureThrottle, RateLimiter, retry_after_header
from nexus.auth.roles import ALL_TENANTS, Principal, Role, allowed, required_roles, uses_session
from nexus.auth.sessions import COOKIE, SessionStore, cookie_of
from nexus.auth.shares import (
    TENANT_BUSY_MESSAGE,
    TICKET,
    UNCHECKED_BUSY_MESSAGE,
    RequestShares,
    Ticket,
)
from nexus.auth.slots import ProcessingSlots
from nexus.error_shape import request_id_for
from nexus.errors import ErrorCode, NexusError
from nexus.store.fair_pool import DB_SHARE, UNCHECKED

log = logging.getLogger(__name__)

_CREDENTIAL = "nexus.credential"
"""The scope extension holding the request's `_Credential` once `Gatekeeper.share_of` has read it."""

Scope = MutableMapping[str, Any]
Receive = Any
Send = Any


def principal_of(request: Any) -> Principal:
    """The principal the middleware attached to a request (routes behind the middleware always have one)."""
    principal: Principal = request.state.principal
    return principal


class Gatekeeper:
    """Who is calling, and may they: the key (or console session), the route's roles, the rate limit.
    Shared by the middleware and the events fast path (nexus.ingress.fast_events), so both refuse alike.

    A failed authentication (reason missing, malformed, unknown or revoked) is counted
    (`nexus_auth_failures_total{reason}`), logged without the key, and throttled per source address:
    past `failures`' allowance the address's failed attempts get 429 RATE_LIMITED instead of 401."""

    def __init__(
        self,
        keys: KeyCache,
        limiter: RateLimiter | None = None,
        sessions: SessionStore | None = None,
        failures: FailureThrottle | None = None,
        shares: RequestShares | None = None,
        oauth: OAuthVerifier | None = None,
        slots: ProcessingSlots | None = None,
    ) -> None:
        self.keys = keys
        self.slots = slots
        self.oauth = oauth
        self.limiter = limiter
        self.sessions = sessions
        self.failures = failures
        self.shares = shares

    async def admit(self, scope: Scope, send: Send, roles: frozenset[Role]) -> Principal | None:
        """The caller's principal, holding one of its tenant's shares until `release`; None once a refusal
        (401, 403, 429, 503, or the console's sign-in redirect) has been sent. A request the server counted at
        its head (a `Ticket` in the scope, `share_of`) is moved to its key's tenant; any other is counted here."""
        shares = self.shares
        extensions = scope.get("extensions") or {}
        credential: _Credential = extensions.get(_CREDENTIAL) or _credential(scope)
        ticket: Ticket | None = extensions.get(TICKET) if shares is not None else None
        digest = credential.digest
        principal = self.keys.fresh(digest) if digest is not None and not credential.session else None
        if principal is not None:  # a key checked valid within the cache's TTL: no coroutine, no share to enter
            scope.setdefault("state", {})["key_hash"] = digest
        else:
            unknown = shares is not None and ticket is None and not self._known(credential)
            if unknown and shares is not None and not shares.enter_unauthenticated():
                await _busy(scope, send, UNCHECKED_BUSY_MESSAGE)
                return None
            known = self.keys.known_tenant(digest) if digest is not None else None
            DB_SHARE.set(known or UNCHECKED)  # the lookup's connection, in the share of the key's last tenant
            try:
                principal = await self._identify(scope, send, credential)
            finally:
                if unknown and shares is not None:
                    shares.leave_unauthenticated()
            if principal is None:
                return None
        if not allowed(principal, roles):
            await self._forbidden(scope, send, principal, roles)
            return None
        if self.limiter is not None:
            wait = self.charge(principal, 1)
            if wait > 0:
                message = "rate limit of this key or its tenant exceeded"
                await _refuse(
                    scope, send, 429, ErrorCode.RATE_LIMITED, message, {"retry-after": retry_after_header(wait)}
                )
                return None
        counted = ticket.move(principal.tenant_id) if ticket is not None else True
        if not counted or (shares is not None and ticket is None and not shares.enter(principal.tenant_id)):
            await _busy(scope, send, TENANT_BUSY_MESSAGE)
            return None
        DB_SHARE.set(principal.tenant_id or ALL_TENANTS)  # the request's queries: its tenant's share of the pool
        return principal

    def share_of(self, scope: Scope) -> str | None:
        """The share a request counts in from the moment its head is complete, from what is remembered (nothing
        awaited): its Bearer key's tenant when the cache knows the key valid (ALL_TENANTS for a key spanning
        every tenant), a remembered access token's tenant alike; None (the unauthenticated share) for any other
        key or token, a console session, or no credential. The credential read (the key's SHA-256) is kept in
        the scope for `admit`: a key is hashed once per request."""
        credential = _credential(scope)
        scope.setdefault("extensions", {})[_CREDENTIAL] = credential
        if credential.session or credential.key is None:
            return None
        if credential.digest is not None:
            return self.keys.known_tenant(credential.digest)
        principal = self.oauth.remembered_principal(credential.key) if self.oauth is not None else None
        return None if principal is None else principal.tenant_id or ALL_TENANTS

    async def _forbidden(self, scope: Scope, send: Send, principal: Principal, roles: frozenset[Role]) -> None:
        """403 FORBIDDEN: the key lacks the route's role, or the token its scope (RFC 6750 insufficient_scope)."""
        need = " or ".join(sorted(r.value for r in roles))
        if principal.issuer is None:
            await _refuse(scope, send, 403, ErrorCode.FORBIDDEN, f"this key lacks the role for this route ({need})")
            return
        scopes = " ".join(sorted(SCOPES[r] for r in roles))
        challenge = f'Bearer error="insufficient_scope", scope="{scopes}"'
        message = f"this token lacks the role and scope for this route ({need}: {scopes})"
        await _refuse(scope, send, 403, ErrorCode.FORBIDDEN, message, {"www-authenticate": challenge})

    def _known(self, credential: _Credential) -> bool:
        """Whether the request's Bearer key (or access token) was valid when last seen (a key whose cache entry
        is due for its next check included: each key of a busy tenant lapses once per TTL, and must not then
        queue behind another tenant's flood of unknown keys)."""
        if credential.session or credential.key is None:
            return False
        if credential.digest is None:  # an access token
            return self.oauth is not None and self.oauth.remembered(credential.key)
        return self.keys.known_valid(credential.digest)

    def charge(self, principal: Principal, units: int) -> float:
        """Spend `units` of work (an envelope of a batch is one) of the key's and its tenant's rates; 0.0 if
        allowed, else the seconds until they would be."""
        if self.limiter is None or units <= 0:
            return 0.0
        return self.limiter.take(principal.key_id, principal.roles, time.monotonic(), units, principal.tenant_id)

    def release(self, scope: Scope, principal: Principal) -> None:
        """The admitted request of `principal` has ended: its tenant's share is free again (its ticket's, once,
        when the server counted it)."""
        ticket: Ticket | None = (scope.get("extensions") or {}).get(TICKET)
        if ticket is not None:
            ticket.release()
        elif self.shares is not None:
            self.shares.leave(principal.tenant_id)

    async def _identify(self, scope: Scope, send: Send, credential: _Credential) -> Principal | None:
        """The principal of the key (or console session); None once a refusal has been sent."""
        session_route = credential.session
        found: Principal | Refusal | None
        try:
            if session_route:  # The console signs in with a form; its session cookie stands for the key
                session = await self.sessions.get(cookie_of(scope["headers"], COOKIE)) if self.sessions else None
                if session is None:
                    await _to_login(send)
                    return None
                scope.setdefault("state", {})["console_session"] = session
                found = await self.keys.lookup_hash(session.key_hash)
            else:
                key, digest = credential.key, credential.digest
                if key is None:
                    await self._failed(scope, send, credential.reason)
                    return None
                if digest is None and self.oauth is not None:
                    return await self._token(scope, send, self.oauth, key)
                digest = digest or hash_key(key)
                found = await self.keys.check_hash(digest)
                scope.setdefault("state", {})["key_hash"] = digest
        except NexusError as exc:
            message = "cannot check the credential now"
            await _refuse(scope, send, 503, exc.code, message, {"retry-after": "1"}, retryable=True)
            return None
        if not isinstance(found, Principal):
            if session_route:
                await _to_login(send)
                return None
            await self._failed(scope, send, found or Refusal.UNKNOWN)
            return None
        return found

    async def _token(self, scope: Scope, send: Send, oauth: OAuthVerifier, token: str) -> Principal | None:
        """The access token's principal; None once a refusal has been sent (the token is not kept)."""
        found = await oauth.check(token)
        if isinstance(found, Principal):
            return found
        await self._failed(scope, send, AuthFailure.INVALID_TOKEN, found)
        return None

    def record_failure(self, scope: Scope, reason: AuthFailure | Refusal, detail: str | None = None) -> float:
        """Count and log (never the key) a failed authentication; the seconds its source address must
        wait before failing again (0.0: within the allowance). The console's sign-in form calls it too."""
        address = _client_address(scope)
        metrics.AUTH_FAILURES.labels(reason=reason).inc()
        wait = self.failures.fail(address, time.monotonic()) if self.failures is not None else 0.0
        log.warning(
            "authentication failed",
            extra={
                "action": "auth_failure",
                "reason": detail or reason,
                "client": address,
                "path": scope["path"][:200],
                "throttled": wait > 0,
            },
        )
        return wait

    async def _failed(
        self, scope: Scope, send: Send, reason: AuthFailure | Refusal, token: TokenRefusal | None = None
    ) -> None:
        """Count, log and answer a failed authentication: 401, or 429 past the allowance."""
        wait = self.record_failure(scope, reason, token)
        if wait > 0:
            message = "too many failed authentications from this address; retry later"
            await _refuse(scope, send, 429, ErrorCode.RATE_LIMITED, message, {"retry-after": retry_after_header(wait)})
            return
        messages: dict[str, str] = {
            AuthFailure.MISSING: "an API key is required (Authorization: Bearer <key>)",
            AuthFailure.MALFORMED: "the Authorization header is not 'Bearer <key>'",
        }
        message = token.message if token is not None else messages.get(reason, "unknown or revoked API key")
        challenge = None
        if self.oauth is not None:  # where a client finds how to get a token (RFC 9728)
            error = "invalid_token" if token is not None else None
            challenge = {"www-authenticate": self.oauth.resource.challenge(error)}
        await _refuse(scope, send, 401, ErrorCode.UNAUTHENTICATED, message, challenge)


class AuthMiddleware(HttpMiddleware):
    """The `Gatekeeper` in front of every route of the app (the events fast path calls the same one)."""

    def __init__(self, app: Any, gate: Gatekeeper) -> None:
        self.app = app
        self.gate = gate

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        roles = required_roles(scope["method"], scope["path"])
        if not roles:
            await self.app(scope, receive, send)
            return
        principal = await self.gate.admit(scope, send, roles)
        if principal is not None:
            scope.setdefault("state", {})["principal"] = principal
            try:
                await self.app(scope, receive, send)
            finally:
                self.gate.release(scope, principal)


async def _busy(scope: Scope, send: Send, message: str) -> None:
    """429 TENANT_BUSY: a share of the process's requests in flight is full; a second is enough to retry."""
    await _refuse(scope, send, 429, ErrorCode.TENANT_BUSY, message, {"retry-after": "1"}, retryable=True)


async def _to_login(send: Send) -> None:
    """A console page without a live session: to the sign-in form (a browser follows; nothing is written)."""
    headers = [(b"location", b"/console/login"), (b"content-length", b"0"), (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": 303, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


class AuthFailure(enum.StrEnum):
    """Why a request carried no usable key (beside keys.Refusal: unknown, revoked)."""

    MISSING = "missing"
    MALFORMED = "malformed"
    # An OAuth access token refused (nexus.auth.oauth.TokenRefusal says why)
    INVALID_TOKEN = "invalid_token"  # noqa: S105 - a reason, not a secret


# RFC 6750's b64token, bounded: what a Bearer credential may be (a key is nxk_ and URL-safe base64; an
# access token a JWT, a few hundred to a few thousand characters).
_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]{1,8192}=*")


@dataclasses.dataclass(frozen=True, slots=True)
class _Credential:
    """What a request presents, read once per request: a console route (its session cookie stands for the key),
    or the Bearer credential (`key`, None with the `reason` it is missing) and, for an API key, its SHA-256
    (`digest`; None for a JWT-shaped access token, which `oauth` checks when on)."""

    session: bool
    reason: AuthFailure
    key: str | None
    digest: bytes | None


def _credential(scope: Scope) -> _Credential:
    if uses_session(scope["path"]):
        return _Credential(True, AuthFailure.MISSING, None, None)
    reason, key = _bearer(scope)
    digest = None if key is None or looks_like_jwt(key) else hash_key(key)
    return _Credential(False, reason, key, digest)


def _bearer(scope: Scope) -> tuple[AuthFailure, str | None]:
    """The key of `Authorization: Bearer <key>` (the first such header), or why there is none."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            text: str = value.decode("latin-1")
            scheme, _, token = text.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and _TOKEN.fullmatch(token):
                return AuthFailure.MALFORMED, token
            return AuthFailure.MALFORMED, None
    return AuthFailure.MISSING, None


def _client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


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
    rid = request_id_for(scope)
    content: dict[str, Any] = {"code": code.value, "message": message, "request_id": rid}
    if retryable is not None:  # as the app's own 503 answers say (DESIGN: transient errors are retryable)
        content["retryable"] = retryable
    body = json.dumps(content).encode()
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", rid.encode()),
    ]
    if status == 401 and "www-authenticate" not in (headers or {}):
        raw.append((b"www-authenticate", b"Bearer"))
    raw.extend((k.encode(), v.encode()) for k, v in (headers or {}).items())
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
