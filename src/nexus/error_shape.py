"""The one error shape of the HTTP API, `{"code", "message", "request_id"}`, and the request id.

The pieces every HTTP layer needs (the key check in `nexus.auth`, the routers, the ingress): kept below
them all so none has to import another to answer in the shape. `nexus.ingress.http_errors` installs them.
"""

from __future__ import annotations

import contextvars
import random
import re
from typing import Any

from fastapi.responses import JSONResponse
from starlette.types import Scope

from nexus import metrics
from nexus.errors import ErrorCode

REQUEST_ID_HEADER = "X-Request-ID"
# A caller's X-Request-ID is kept when it is this (it goes into logs and answers as it is), else replaced.
_CALLER_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("nexus_request_id", default="")


def new_request_id() -> str:
    """A fresh request id: 128 random bits in hex, as uuid4().hex but without a system call per request
    (an id needs to be unique, not unguessable: the random module's generator, seeded from the OS in each
    process and again in a forked child, as delivery/signing.py draws trace ids)."""
    return f"{random.getrandbits(128):032x}"


def request_id() -> str:
    return _request_id.get() or new_request_id()


def error_body(code: ErrorCode, message: str, /, **extra: Any) -> dict[str, Any]:
    return {"code": code.value, "message": message, "request_id": request_id(), **extra}


def error_response(http_status: int, code: ErrorCode, message: str, /, **extra: Any) -> JSONResponse:
    headers = {"Retry-After": "1"} if http_status in (429, 503) else None
    metrics.record_http_error(code.value)
    return JSONResponse(error_body(code, message, **extra), status_code=http_status, headers=headers)


def request_id_for(scope: Scope) -> str:
    """The request's id: the one already given to it (by the first layer that saw it), else the caller's
    `X-Request-ID` (the last one) when it is 1-64 characters of `A-Za-z0-9._:-`, else a new one."""
    state = scope.get("state")
    if isinstance(state, dict) and isinstance(state.get("request_id"), str):
        return str(state["request_id"])
    wanted = REQUEST_ID_HEADER.lower().encode()
    given = b""
    for name, value in scope.get("headers") or ():
        if name == wanted:
            given = value  # the last one, as a dict of the headers would keep
    rid = given.decode("ascii") if _CALLER_REQUEST_ID.fullmatch(given) else new_request_id()
    scope.setdefault("state", {})["request_id"] = rid
    return rid


def use_request_id(rid: str) -> contextvars.Token[str]:
    """Make `rid` the id `error_body` puts in answers (reset with the token when the request is done)."""
    return _request_id.set(rid)


def reset_request_id(token: contextvars.Token[str]) -> None:
    _request_id.reset(token)
