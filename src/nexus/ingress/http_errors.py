"""One error shape for every error the API gives: `{"code", "message", "request_id"}`.

Every request gets a request id (the caller's `X-Request-ID` when it is a safe identifier, else a new
one), returned in the `X-Request-ID` header and in every error body. The framework's own answers (404
of an unknown path, 405, 422 of a malformed parameter) are rewritten to the shape; their messages name
where and what, never the input. Every 5xx is logged with the request id and a traceback; a client that
disconnects mid-request is logged once, at debug, and nothing else happens.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nexus.asgi import HttpMiddleware
from nexus.error_shape import (
    REQUEST_ID_HEADER,
    _request_id,
    error_response,
    request_id,
    request_id_for,
)
from nexus.errors import (
    AlreadyRedrivenError,
    ApprovalMismatchError,
    ApprovalNotPendingError,
    ErrorCode,
    KeyRevokedError,
    NexusError,
    NotFoundError,
    QuotaExceededError,
    TooManyWaitsError,
)

log = logging.getLogger(__name__)

# Parameters that name things: a malformed one is INVALID_IDENTIFIER, not a generic INVALID_REQUEST.
IDENTIFIER_PARAMS = frozenset({"order_id", "plan_id", "tenant_id", "correlation_id", "name", "id_or_name"})


class ErrorBody(BaseModel):
    """Every error answer of the API."""

    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    request_id: str


_DESCRIPTIONS = {
    400: "Malformed request (PARSE_ERROR, NESTING_TOO_DEEP)",
    401: "No API key, or an unknown or revoked one, also revoked during a wait (UNAUTHENTICATED)",
    403: "The key's role or tenant does not allow this (FORBIDDEN, TENANT_MISMATCH)",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict (PLAN_MISMATCH, ALREADY_REDRIVEN, APPROVAL_NOT_PENDING, APPROVAL_MISMATCH, name taken)",
    413: "Too large (PAYLOAD_TOO_LARGE, BATCH_TOO_LARGE)",
    415: "Content-Type is not application/json (UNSUPPORTED_MEDIA_TYPE)",
    431: "Request line and headers too large (INVALID_REQUEST)",
    422: "Invalid input (INVALID_EVENT, INVALID_IDENTIFIER, INVALID_REQUEST, INVALID_PARAMETER, UNSAFE_URL), or a"
    " REJECTED step",
    429: "Rate limit of the key's role, or of failed authentications from an address, reached (RATE_LIMITED,"
    " Retry-After); the key's or its tenant's open streams and long polls at their cap (TOO_MANY_WAITS); or the"
    " tenant's requests in flight at its share of the process (TENANT_BUSY, Retry-After); or the request would take"
    " its tenant beyond a quota on what it stores (QUOTA_EXCEEDED, with `quota`)",
    500: "Internal error",
    503: "Database unavailable or server busy; retry (Retry-After)",
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in _DESCRIPTIONS.items()
}


def public_message(exc: NexusError, status: int) -> str:
    """What an answer says of `exc`: never the input (a 404 would repeat the identifier asked for) nor the
    driver's words (a 5xx); the log has the details."""
    if status == 404:
        return "not found (or not visible to this key)"
    if status == 503:
        return "temporarily unavailable; retry"
    if status >= 500:
        return "internal error"
    return exc.message


def status_of(exc: NexusError) -> int:
    if exc.transient:
        return 503
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, AlreadyRedrivenError | ApprovalNotPendingError | ApprovalMismatchError):
        return 409
    if isinstance(exc, TooManyWaitsError | QuotaExceededError):
        return 429
    if isinstance(exc, KeyRevokedError):
        return 401
    return 500


class RequestContext(HttpMiddleware):
    """Pure ASGI middleware: request id, the last word on unhandled errors, quiet client disconnects."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid = request_id_for(scope)
        token = _request_id.set(rid)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                if REQUEST_ID_HEADER not in headers:  # the auth refusals set it themselves
                    headers.append(REQUEST_ID_HEADER, rid)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:
            log.debug(
                "client disconnected", extra={"action": "client_disconnect", "request_id": rid, "path": scope["path"]}
            )
        except Exception:
            log.exception(
                "request failed", extra={"action": "http_5xx", "request_id": rid, "path": scope["path"], "status": 500}
            )
            if not started:
                response = JSONResponse(
                    {"code": ErrorCode.INTERNAL_ERROR.value, "message": "internal error", "request_id": rid},
                    status_code=500,
                )
                await response(scope, receive, send_with_id)
        finally:
            _request_id.reset(token)


def install(app: FastAPI) -> None:
    """Route every error of `app` through the one shape."""

    @app.exception_handler(NexusError)
    async def _nexus_error(request: Request, exc: NexusError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500:
            log.error(
                "request failed",
                exc_info=exc,
                extra={"action": "http_5xx", "request_id": request_id(), "path": request.url.path, "status": status},
            )
        extra = {"quota": exc.quota} if isinstance(exc, QuotaExceededError) else {}
        return error_response(status, exc.code, public_message(exc, status), retryable=exc.transient, **extra)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}
        code = codes.get(exc.status_code, ErrorCode.INVALID_REQUEST)
        message = {404: "no such resource", 405: "method not allowed"}.get(exc.status_code, "invalid request")
        response = error_response(exc.status_code, code, message)
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        code, message = invalid_request(exc.errors())
        return error_response(422, code, message)


def invalid_request(errors: Sequence[Any], where: tuple[str, ...] = ()) -> tuple[ErrorCode, str]:
    """The code and message of a request's invalid fields (pydantic's errors; `where` prefixes each
    location, e.g. `("body",)` for a model built from a body): where and what, never the input."""
    code = ErrorCode.INVALID_REQUEST
    parts = []
    for err in errors[:5]:
        loc = [*where, *(str(p) for p in err.get("loc", ()))]
        if loc and loc[-1] in IDENTIFIER_PARAMS and err.get("type") != "missing":
            code = ErrorCode.INVALID_IDENTIFIER
        parts.append(f"{'.'.join(loc) or 'request'}: {err.get('msg', 'invalid')}")
    return code, "; ".join(parts) or "invalid request"
