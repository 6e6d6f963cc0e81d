"""Waits over their share refused as soon as the key is known: no processing slot, no routing, no JSON model.

A tenant at its limits opens long polls and SSE streams faster than they end; once its key's
(`NEXUS_MAX_WAITS_PER_KEY`) or its tenant's (`NEXUS_MAX_WAITS_PER_TENANT`) waits are all held, every new one
is refused 429 TOO_MANY_WAITS. Through the framework each refusal cost a processing slot (queued behind
its tenant's turn), the request guard, routing, parameter validation, an exception and its handler, and a
rendered JSON response: the event loop's time, taken from every other tenant. `WaitRefusals` sits right
behind the key check (`AuthMiddleware`): a request that is a wait (`GET /v1/orders/{id}?wait=S`,
`GET /v1/orders/{id}/stream`) whose key or tenant holds every wait it may is answered here, from a
prebuilt body, with the route's own answer: 429, the same code, message, `retryable: false`,
`Retry-After: 1` and `X-Request-ID`, in the same header order.

Only a request the route would refuse for the wait alone is answered here: the path's identifier, the
wait's parameters (`wait`, `after_seq`, `after`) plainly valid, no `tenant` parameter (whose check comes
first in the route) and no NUL in the parameters (the request guard's 422); anything else, and every
request within the share, goes on to the route, which decides as before (the MCP `wait_for_order`, whose
wait is known only from its body, included).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

from nexus import metrics
from nexus.asgi import HttpMiddleware
from nexus.auth.roles import ALL_TENANTS
from nexus.error_shape import request_id_for
from nexus.errors import ErrorCode
from nexus.ingress.request_guard import nul_in_parameters
from nexus.lifecycle.waiting import WaitSlots
from nexus_wire.envelope import SAFE_IDENTIFIER_PATTERN

_ORDER_ID = re.compile(SAFE_IDENTIFIER_PATTERN)
_PREFIX = "/v1/orders/"
_STREAM = "/stream"
_SECONDS = re.compile(r"\d{1,5}(?:\.\d{1,9})?")
_COUNT = re.compile(r"\d{1,10}")
_PLACEHOLDER = "@request_id@"


def _plain(value: str, pattern: re.Pattern[str], most: float) -> bool:
    return pattern.fullmatch(value) is not None and float(value) <= most


def _long_poll_parameters(params: dict[str, str]) -> bool:
    """`wait`, `after_seq` and `after_status` as the route validates them (and well inside its limits)."""
    if "wait" not in params or not _plain(params["wait"], _SECONDS, 86400):
        return False
    if "after_seq" in params and not _plain(params["after_seq"], _COUNT, 2**31):
        return False
    return len(params.get("after_status", "")) <= 200


def is_plain_wait(scope: Any) -> bool:
    """Whether the request is a long poll or an SSE stream whose only possible refusal left is its wait."""
    path: str = scope["path"]
    if scope["method"] != "GET" or not path.startswith(_PREFIX):
        return False
    order_id = path[len(_PREFIX) :]
    stream = order_id.endswith(_STREAM)
    if stream:
        order_id = order_id[: -len(_STREAM)]
    if len(order_id) > 200 or _ORDER_ID.fullmatch(order_id) is None or nul_in_parameters(scope):
        return False
    params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
    if "tenant" in params:
        return False
    if stream:
        return "after" not in params or _plain(params["after"], _COUNT, 2**31)
    return _long_poll_parameters(params)


class PrebuiltRefusal:
    """One refusal's answer rendered once: the body as the framework renders it, but for the request id."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        self.status = status
        self.code = code
        content = {"code": code.value, "message": message, "request_id": _PLACEHOLDER, "retryable": False}
        rendered = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
        before, after = rendered.encode().split(_PLACEHOLDER.encode())
        self._before = before
        self._after = after

    async def send(self, scope: Any, send: Any) -> None:
        """Answer the request (its id is one of ASCII letters, digits and `._:-`: nothing to escape)."""
        rid = request_id_for(scope).encode()
        body = b"".join((self._before, rid, self._after))
        headers = [
            (b"retry-after", b"1"),
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
            (b"x-request-id", rid),
        ]
        metrics.record_http_error(self.code.value)
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class WaitRefusals(HttpMiddleware):
    """Pure ASGI middleware behind the key check: a plain wait over its key's or tenant's share answered 429
    TOO_MANY_WAITS at once; every other request to `app`."""

    def __init__(self, app: Any, slots: WaitSlots) -> None:
        self.app = app
        self.slots = slots
        self._refusals = {
            message: PrebuiltRefusal(429, ErrorCode.TOO_MANY_WAITS, message) for message in slots.refusal_messages()
        }

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        principal = scope.get("state", {}).get("principal")
        # The share first (two dict reads): a request within it, the usual case, parses nothing here
        if principal is not None and scope["path"].startswith(_PREFIX):
            message = self.slots.refusal(principal.key_id, principal.tenant_id or ALL_TENANTS)
            if message is not None and is_plain_wait(scope):
                await self._refusals[message].send(scope, send)
                return
        await self.app(scope, receive, send)
