"""`POST /v1/events`, answered without the framework's per-request layers.

The route is the gateway's hot path: under wrk, the framework's middleware stack, routing and request
objects took more of the server's time than deciding the events. `EventsFastPath` is a pure ASGI
application in front of the whole app (FastAPI's own layers included) that answers `POST /v1/events`
itself and hands every other request (and this one too while tracing is on, so its spans stay those of
the maintained ASGI instrumentation) to the app.

It keeps every check of the framework route, through the same code: the key, role and rate limit
(`Gatekeeper`, shared with `AuthMiddleware`, and the same `RateLimiter` buckets), the media type, the body
size (declared and streamed), the strict JSON and limits (`events_body`), the tenant binding, group commit,
and the answer (`answer_events`, which the framework route calls too). Its responses are the framework's
byte for byte: the same JSON rendering, the same headers, `X-Request-ID`, every error in the one shape with
its request id, and a 500 logged with a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from typing import Any

from nexus import metrics, tracing
from nexus.auth import quotas
from nexus.auth.middleware import Gatekeeper
from nexus.auth.ratelimit import retry_after_header
from nexus.auth.roles import ALL_TENANTS, Principal, required_roles
from nexus.auth.slots import cost_of, processing
from nexus.core import wording
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming
from nexus.core.strict_json import InputLimits
from nexus.error_shape import error_body, request_id_for, reset_request_id, use_request_id
from nexus.errors import ErrorCode, NexusError, QuotaExceededError
from nexus.fold_thread import weight_of
from nexus.ingress import http_errors, tenants
from nexus.ingress.batcher import GroupCommitter
from nexus.ingress.events_body import (
    Disconnected,
    Parsed,
    Refusal,
    in_thread,
    limits_of,
    media_type_refusal,
    parse_body,
    receive_body,
)
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_wire.codes import Decision

log = logging.getLogger(__name__)

PATH = "/v1/events"
_ROLES = required_roles("POST", PATH)


async def answer_events(
    body: bytes,
    traceparent: str | None,
    principal: Principal,
    settings: Settings,
    submitter: GroupCommitter,
    gate: Gatekeeper | None = None,
    db: Database | None = None,
) -> tuple[int, dict[str, Any], list[tuple[bytes, bytes]]]:
    """Decide a request's events: its status, JSON body (the results, or the error shape) and extra headers.
    Each envelope is a unit of the key's and tenant's rates: the request paid one, `gate` charges the rest;
    with `db`, a request that would take its tenant beyond a quota (nexus.auth.quotas) is refused 429."""
    limits = limits_of(settings)
    if in_thread(body, settings):  # a large body: decoded and bound in a worker thread, the loop goes on
        parsed, bound = await asyncio.to_thread(_parse_bound, body, traceparent, limits, principal, weigh=True)
    else:  # a small body (a step): decoded at once, no coroutine
        parsed, bound = _parse_bound(body, traceparent, limits, principal)
    if isinstance(parsed, Refusal):
        return parsed.status, error_body(parsed.code, parsed.message), []
    wait = gate.charge(principal, len(parsed.items) - 1) if gate is not None else 0.0
    if wait > 0:  # refused as a whole, nothing written
        message = "rate limit of this key or its tenant exceeded (each envelope counts)"
        return (
            429,
            error_body(ErrorCode.RATE_LIMITED, message),
            [(b"retry-after", retry_after_header(wait).encode())],
        )
    if any(b is None for b in bound):
        # Refused as a whole, before anything is decided or written (no dead letter either).
        message = wording.tenant_mismatch(str(principal.tenant_id))
        return 403, error_body(ErrorCode.TENANT_MISMATCH, message), []
    admitted = [b for b in bound if b is not None]
    if db is not None and not quotas.admitted_now(db, admitted):
        try:  # refused as a whole, nothing written
            await quotas.check_items(db, admitted)
        except QuotaExceededError as exc:
            return 429, error_body(exc.code, exc.message, quota=exc.quota), [(b"retry-after", b"1")]
    outcomes = await submitter.submit(admitted)
    if len(outcomes) >= IN_THREAD_RESULTS:
        results = await asyncio.to_thread(_as_json, outcomes)
    else:
        results = [o.as_json() for o in outcomes]
    status = single_status(outcomes[0]) if parsed.single and outcomes else 200
    content: dict[str, Any] = {"results": results}
    if status >= 400:
        first = outcomes[0]
        code = first.code or ErrorCode.INVALID_EVENT
        extra = {"check": first.check} if first.decision is Decision.REJECTED else {}
        content = {
            **error_body(code, first.message or first.error or code.value, **extra),
            "results": results,
        }
    return status, content, []


IN_THREAD_RESULTS = 64
"""An answer of at least this many results is built and rendered in a worker thread: a 1,000-envelope batch's
took several milliseconds of the event loop in one piece, which every other tenant's requests waited behind."""


def _parse_bound(
    body: bytes, traceparent: str | None, limits: InputLimits, principal: Principal, *, weigh: bool = False
) -> tuple[Parsed | Refusal, list[Incoming | None]]:
    """The body decoded (`parse_body`) and its items bound to the principal's tenant and actor (`tenants.bind`:
    None for an envelope naming another tenant): pure, so a large body's run in a worker thread, where its items
    are weighed too (`weigh`: `Incoming.weight`, which the group commit would otherwise walk on the loop)."""
    parsed = parse_body(body, traceparent, limits)
    if isinstance(parsed, Refusal):
        return parsed, []
    tenant, actor, name = principal.tenant_id, principal.actor, principal.name
    if weigh:
        return parsed, [tenants.bind(i, tenant, actor, name, weight=weight_of(i)) for i in parsed.items]
    return parsed, [tenants.bind(item, tenant, actor, name) for item in parsed.items]


def _as_json(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [o.as_json() for o in outcomes]


def single_status(outcome: Outcome) -> int:
    """The HTTP status of a request that carried one envelope, from its outcome."""
    if outcome.decision is Decision.DEAD_LETTER:
        return 400 if outcome.code is ErrorCode.PARSE_ERROR else 422
    if outcome.decision is Decision.PLAN_MISMATCH:
        return 409
    if outcome.decision is Decision.REJECTED:
        return 422
    if outcome.decision is Decision.HELD:
        return 202  # Accepted, waiting for a person
    return 200


# One encoder for every answer: `json.dumps` with these options would build one per call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode


def render(content: dict[str, Any]) -> bytes:
    """JSON as the framework's JSONResponse renders it."""
    return _ENCODE(content).encode()


@dataclasses.dataclass(slots=True)
class EventsFastPath:
    """Pure ASGI middleware answering `POST /v1/events`; everything else goes to `app`."""

    app: Any
    _: dataclasses.KW_ONLY
    gate: Gatekeeper
    submitter: GroupCommitter
    settings: Settings
    db: Database | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST" or tracing.active():
            await self.app(scope, receive, send)
            return
        principal = await self.gate.admit(scope, send, _ROLES)
        if principal is None:
            return
        try:  # the answer in this frame, not a coroutine of its own: one frame less on every turn of the request
            rid = request_id_for(scope)
            token = use_request_id(rid)
            try:
                status, content, headers = await self._answer(scope, receive, principal)
            except Disconnected:
                log.debug("client disconnected", extra={"action": "client_disconnect", "request_id": rid, "path": PATH})
                return
            except NexusError as exc:  # as the app's exception handler answers it
                status, content, headers = _error_answer(exc, rid)
            except Exception:
                log.exception(
                    "request failed", extra={"action": "http_5xx", "request_id": rid, "path": PATH, "status": 500}
                )
                status, headers = 500, []
                content = {"code": ErrorCode.INTERNAL_ERROR.value, "message": "internal error", "request_id": rid}
            finally:
                reset_request_id(token)
            if status >= 400 and "code" in content:
                metrics.record_http_error(content["code"])
            results = content.get("results")
            body = (
                await asyncio.to_thread(render, content)
                if results and len(results) >= IN_THREAD_RESULTS
                else render(content)
            )
            headers += [
                (b"content-length", str(len(body)).encode()),
                (b"content-type", b"application/json"),
                (b"x-request-id", rid.encode()),
            ]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        finally:
            self.gate.release(scope, principal)

    async def _answer(
        self, scope: Any, receive: Any, principal: Principal
    ) -> tuple[int, dict[str, Any], list[tuple[bytes, bytes]]]:
        content_type = declared = traceparent = None
        for name, value in scope["headers"]:  # the first of each, as the framework's request.headers.get
            if name == b"content-type" and content_type is None:
                content_type = value.decode("latin-1")
            elif name == b"content-length" and declared is None:
                declared = value.decode("latin-1")
            elif name == b"traceparent" and traceparent is None:
                traceparent = value.decode("latin-1")
        limit = self.settings.max_body_bytes  # declared or streamed beyond it: refused, as `events_body.read_body`
        refusal = media_type_refusal(content_type) or _declared_too_large(declared, limit)
        body = refusal or await receive_body(receive, limit)
        if body is None:
            body = _too_large(limit)
        if isinstance(body, Refusal):
            return body.status, error_body(body.code, body.message), []
        async with processing(self.gate.slots, principal.tenant_id or ALL_TENANTS, cost_of(len(body))):
            return await answer_events(body, traceparent, principal, self.settings, self.submitter, self.gate, self.db)


def _error_answer(exc: NexusError, rid: str) -> tuple[int, dict[str, Any], list[tuple[bytes, bytes]]]:
    """A NexusError answered as the app's exception handler answers it (a 5xx logged with its traceback)."""
    status = http_errors.status_of(exc)
    if status >= 500:
        log.error(  # as the app's handler: the NexusError itself is the record
            "request failed",
            exc_info=exc,
            extra={"action": "http_5xx", "request_id": rid, "path": PATH, "status": status},
        )
    content = error_body(exc.code, http_errors.public_message(exc, status), retryable=exc.transient)
    return status, content, [(b"retry-after", b"1")] if status == 503 else []


def _declared_too_large(declared: str | None, limit: int) -> Refusal | None:
    """The refusal of a request whose Content-Length is beyond `limit` bytes (its body is then never read)."""
    return _too_large(limit) if declared is not None and declared.isdigit() and int(declared) > limit else None


@functools.lru_cache(maxsize=8)
def _too_large(limit: int) -> Refusal:
    """The refusal of a body beyond `limit` bytes (built when one is refused, not for every request)."""
    return Refusal(413, ErrorCode.PAYLOAD_TOO_LARGE, wording.body_too_large(limit))
