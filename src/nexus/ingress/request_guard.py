"""What every request of the app passes before its route: parameters without NUL, a body within its
limit, strict JSON.

* A NUL (U+0000) in the query, a header or a console path is 422 INVALID_PARAMETER: PostgreSQL text
  cannot hold one, and a parameter is refused here, before anything reaches the database.
* A body larger than `NEXUS_MAX_BODY_BYTES` is 413 PAYLOAD_TOO_LARGE, decided from its Content-Length
  before a byte is read, or as soon as the streamed bytes pass the limit (the console's forms too).
* A JSON body is strict (`nexus.core.strict_json`): duplicate keys, NaN or Infinity, a number beyond
  float range, non-UTF-8, a lone surrogate (escaped or raw): 400 PARSE_ERROR; nested too deep: 400
  NESTING_TOO_DEEP; a string beyond the limit: 413 PAYLOAD_TOO_LARGE; a NUL in any string: 422
  INVALID_REQUEST; an integer beyond int64: 422 INVALID_EVENT on the steps API, plans and MCP,
  INVALID_REQUEST elsewhere. The body is then handed to the route as it came.

Every answer under `/console` carries a Content-Security-Policy, `X-Frame-Options: DENY`,
`X-Content-Type-Options: nosniff` and a same-origin Referrer-Policy.

Every request runs with its `WaitingClient` (nexus.lifecycle.waiting): the server's "connection lost"
event and a check of the calling credential, so any wait it holds ends with its client, its key's
revocation or its access token's expiry.

`POST /v1/events` keeps its own reading (nexus.ingress.events_body): its problems are per item and
dead-lettered, not refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from nexus.asgi import HttpMiddleware
from nexus.auth.keys import KeyCache
from nexus.auth.roles import ALL_TENANTS
from nexus.auth.slots import ProcessingSlots, cost_of, processing
from nexus.core import strict_json, wording
from nexus.core.strict_json import InputLimits
from nexus.error_shape import error_response
from nexus.errors import ErrorCode, InvalidEventError, NexusError
from nexus.ingress.events_body import Disconnected, has_nul, in_thread, limits_of, receive_body
from nexus.ingress.http_server import CLIENT_GONE
from nexus.lifecycle.waiting import CLIENT, WaitingClient
from nexus.settings import Settings

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_OWN_READER = frozenset({"/v1/events"})
# Bodies that carry a step's data (REST and MCP): an integer beyond int64 there is INVALID_EVENT, as in an envelope.
_STEP_PATHS = ("/v1/orders/", "/v1/plans", "/mcp")


def nul_in_parameters(scope: Any) -> bool:
    query = scope.get("query_string", b"")
    # The API's path parameters have patterns of their own (a NUL there is INVALID_IDENTIFIER); the
    # console's pages take theirs as they are.
    if (scope["path"].startswith("/console") and "\x00" in scope["path"]) or b"%00" in query or b"\x00" in query:
        return True
    return any(b"\x00" in value for _, value in scope["headers"])


def _is_json(scope: Any) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return bool(media == b"application/json" or media.endswith(b"+json"))
    return False


# The console's pages load only their own script and styles (its <style> blocks are inline), submit only
# to themselves, and are never framed (clickjacking).
CONSOLE_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


def _with_console_headers(send: Any) -> Any:
    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *CONSOLE_HEADERS]}
        await send(message)

    return sending


class RequestGuard(HttpMiddleware):
    """Pure ASGI middleware: the checks above, then the route."""

    def __init__(
        self, app: Any, settings: Settings, keys: KeyCache | None = None, slots: ProcessingSlots | None = None
    ) -> None:
        self.app = app
        self.settings = settings
        self.keys = keys
        self.slots = slots

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        token = CLIENT.set(self._client(scope))
        try:
            await self._guarded(scope, receive, send)
        finally:
            CLIENT.reset(token)

    async def _guarded(self, scope: Any, receive: Any, send: Any) -> None:
        if nul_in_parameters(scope):
            message = "a parameter (path, query or header) contains a NUL character"
            await error_response(422, ErrorCode.INVALID_PARAMETER, message)(scope, receive, send)
            return
        if scope["path"].startswith("/console"):
            send = _with_console_headers(send)
        if scope["path"] in _OWN_READER:  # its own reader (and its slot: nexus.ingress.fast_events)
            await self.app(scope, receive, send)
            return
        if scope["method"] not in _BODY_METHODS:
            async with self._slot(scope, 0):
                await self.app(scope, receive, send)
            return
        body = await self._read(scope, receive, send)
        if body is None:
            return
        if body and _is_json(scope) and not await self._strict(body, scope, receive, send):
            return
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: only the disconnect is left to wait for

        async with self._slot(scope, len(body)):
            await self.app(scope, replay, send)

    def _slot(self, scope: Any, body_bytes: int) -> contextlib.AbstractAsyncContextManager[None]:
        """One of the process's processing slots for an authenticated request, its body read (none for a
        request without a principal: the probes, the console's sign-in)."""
        principal = scope.get("state", {}).get("principal")
        if principal is None:
            return contextlib.nullcontext()
        return processing(self.slots, principal.tenant_id or ALL_TENANTS, cost_of(body_bytes))

    def _client(self, scope: Any) -> WaitingClient:
        """The request's client for its waits: gone with its connection, valid while its key is (an access
        token: until its `exp`, the principal's `expires_at`)."""
        state = scope.get("state", {})
        session = state.get("console_session")
        digest: bytes | None = state.get("key_hash") or (session.key_hash if session is not None else None)
        keys = self.keys
        principal = state.get("principal")
        expires_at = principal.expires_at if principal is not None else None

        async def key_valid() -> bool:
            if expires_at is not None and time.time() >= expires_at:
                return False
            if keys is None or digest is None:
                return True
            try:
                return await keys.lookup_hash(digest) is not None
            except NexusError:  # the database away: a wait is no reason to refuse; asked again shortly
                return True

        tenant = (principal.tenant_id if principal is not None else None) or ALL_TENANTS
        return WaitingClient(scope.get("extensions", {}).get(CLIENT_GONE), key_valid, tenant)

    async def _read(self, scope: Any, receive: Any, send: Any) -> bytes | None:
        """The body, or None once 413 has been sent (from the declared length, or the streamed bytes)."""
        limit = self.settings.max_body_bytes
        too_large = error_response(413, ErrorCode.PAYLOAD_TOO_LARGE, wording.body_too_large(limit))
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > limit):
                await too_large(scope, receive, send)
                return None
        try:
            body = await receive_body(receive, limit)
        except Disconnected:
            return None
        if body is None:
            await too_large(scope, receive, send)
        return body

    async def _strict(self, body: bytes, scope: Any, receive: Any, send: Any) -> bool:
        """Whether the JSON body is strict; False once the refusal has been sent. A large body is checked in a
        worker thread (`in_thread`: decoding it holds the GIL in slices, the event loop goes on)."""
        limits = limits_of(self.settings)
        step_path = scope["path"].startswith(_STEP_PATHS)
        if in_thread(body, self.settings):
            refusal = await asyncio.to_thread(_refusal_of, body, limits, step_path)
        else:
            refusal = _refusal_of(body, limits, step_path)
        if refusal is not None:
            await error_response(*refusal)(scope, receive, send)
            return False
        return True


def _refusal_of(body: bytes, limits: InputLimits, step_path: bool) -> tuple[int, ErrorCode, str] | None:
    """Why a JSON body is not strict (status, code, message), or None: pure, so a large body's runs in a thread."""
    try:
        value = strict_json.loads(body, limits)
        strict_json.check_strings(value, limits)
    except InvalidEventError as exc:
        return {ErrorCode.PAYLOAD_TOO_LARGE: 413}.get(exc.code, 400), exc.code, exc.message
    if has_nul(value):
        return 422, ErrorCode.INVALID_REQUEST, "a string in the body contains a NUL character"
    if strict_json.find_oversized_int(value) is not None:
        code = ErrorCode.INVALID_EVENT if step_path else ErrorCode.INVALID_REQUEST
        return 422, code, "an integer in the body is outside the 64-bit range"
    return None
