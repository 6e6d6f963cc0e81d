"""The HTTP server's own limits: uvicorn's settings, plus what uvicorn lacks, in its protocol class.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but never a connection whose request
head or body stops half way (one byte a minute keeps it forever), and its connection cap answers in
plain text. `GuardedHttpToolsProtocol` adds a read deadline per request (from its first byte until its
body has fully arrived), a shorter head deadline (`NEXUS_HTTP_HEAD_TIMEOUT_S`: from a request's first
byte, or a connection's opening, until the end of its headers: a slowloris holds a socket that long at
most), a cap on the bytes of a request head, the cap on requests in flight answered with the API's one
error shape (`/healthz` and `/readyz` are answered even then), the fair shares of those requests counted as
soon as a request's head is complete (`nexus.auth.shares`: a tenant's burst is refused 429 TENANT_BUSY at its
share, before its tasks run, and never fills the cap for another tenant), and a cap on connections at which the
oldest idle or head-incomplete connection is closed to make room: a new client is served, and whoever
holds many idle sockets loses the oldest of them. While tenants compete, it handles at most
`NEXUS_HTTP_HEADS_PER_TURN` new request heads and closes a turn of the loop, the rest put off to later turns
round robin over their shares (`nexus.ingress.turns`). It also sends each
response's head and body in one write (uvicorn writes them separately: two system calls and two TCP
segments per answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from nexus import metrics
from nexus.auth.middleware import Gatekeeper
from nexus.auth.shares import TENANT_BUSY_MESSAGE, TICKET, UNCHECKED_BUSY_MESSAGE, Ticket
from nexus.error_shape import new_request_id, request_id_for
from nexus.errors import ErrorCode
from nexus.ingress.turns import TurnBudget, is_probe, share_of_head
from nexus.settings import Settings

log = logging.getLogger(__name__)


def _refusal(status: int, code: ErrorCode, message: str) -> Any:
    """An ASGI app answering every request with one error in the API's shape, closing the connection."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        rid = new_request_id()
        body = json.dumps({"code": code.value, "message": message, "request_id": rid}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", rid.encode()),
            (b"connection", b"close"),
        ]
        if status == 503:
            headers.append((b"retry-after", b"1"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


CLIENT_GONE = "nexus.client_gone"
"""The scope extension holding an asyncio.Event set when the request's connection is lost."""
_HEAD_TOO_LARGE = "request line and headers too large"
_busy = _refusal(503, ErrorCode.SERVER_BUSY, "too many requests in flight; retry later")
_head_too_large = _refusal(431, ErrorCode.INVALID_REQUEST, _HEAD_TOO_LARGE)
# Answered even at the request cap: a balancer's probes must not read a busy gateway as a dead one.
_PROBES = frozenset({"/healthz", "/readyz"})


def _share_refusal(message: str) -> Any:
    """An ASGI app answering 429 TENANT_BUSY as `AuthMiddleware` does (the same body and headers): a share of
    the process's requests in flight is full; the connection stays open."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        rid = request_id_for(scope)
        content = {"code": ErrorCode.TENANT_BUSY.value, "message": message, "request_id": rid, "retryable": True}
        body = json.dumps(content).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", rid.encode()),
            (b"retry-after", b"1"),
        ]
        metrics.record_http_error(ErrorCode.TENANT_BUSY.value)
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


_tenant_busy = _share_refusal(TENANT_BUSY_MESSAGE)
_unchecked_busy = _share_refusal(UNCHECKED_BUSY_MESSAGE)


def _raw_refusal(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer in the API's error shape, for a request that never reached the app."""
    rid = new_request_id()
    body = json.dumps({"code": ErrorCode.INVALID_REQUEST.value, "message": message, "request_id": rid}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"x-request-id: {rid}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _OneWritePerResponse:
    """The transport as a response cycle sees it: a response head is held until its body is written, and
    both go out in one write. A head whose body does not follow in the same turn of the loop (a streamed
    answer, HEAD) is written on the next turn; close() writes what is held first."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            if data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n"):
                self._held = data
                self._loop.call_soon(self.flush)
                return
            self._transport.write(data)
            return
        held, self._held = self._held, None
        self._transport.write(held + data)

    def flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a per-request read deadline, a head size cap, a JSON 503 cap on
    requests in flight and a cap on connections that closes the oldest idle one."""

    read_timeout_s: float = 30.0
    head_timeout_s: float = 5.0
    max_head_bytes: int = 65_536
    max_concurrency: int | None = None
    max_connections: int | None = None
    gate: Gatekeeper | None = None
    turns: TurnBudget | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn types its transport as BaseTransport; it is always a Transport here
        self._gone = asyncio.Event()  # every request of the connection sees it (nexus.lifecycle.waiting)
        self._head_bytes = 0
        self._in_head = False
        self._between = True  # the parser is between requests: what arrives now starts a new head
        self._share: str | None = None  # the share of the connection's last request (its close counts there)
        self._holds = False  # whether the connection is counted in `_share` (`turns`): once it had a request
        self._closes_later = False
        self._opened = self.loop.time()
        super().connection_made(transport)
        self._writer = _OneWritePerResponse(transport, self.loop)  # every response of the connection writes here
        self._read = _Deadline(transport, self.loop, self.read_timeout_s, "request", "http_read_timeout")
        self._head = _Deadline(transport, self.loop, self.head_timeout_s, "request head", "http_head_timeout")
        self._read.arm()
        self._head.arm()  # a new connection owes its first request head within the head timeout
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            self._make_room()

    def _closable(self) -> bool:
        """Idle between requests, or still receiving a request head: nothing of it is in flight."""
        return not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete)

    def _make_room(self) -> None:
        """At the connection cap: close the oldest closable connection (this new one if there is none)."""
        others = (c for c in self.connections if c is not self and isinstance(c, GuardedHttpToolsProtocol))
        victim = min((c for c in others if c._closable()), key=lambda c: c._opened, default=self)
        log.debug("connection cap reached; closing the oldest idle connection", extra={"action": "http_evict"})
        victim.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone.set()
        for _, queued in self.pipeline:  # requests queued behind one in flight never run now: not in flight
            if isinstance(queued, _Entry) and queued.ticket is not None:
                queued.ticket.release()
        self._read.stop()
        self._head.stop()
        if self.turns is not None and self._holds:
            self._holds = False
            self.turns.release(self._share)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        turns = self.turns
        between = self._between and (self.cycle is None or self.cycle.response_complete)
        if turns is not None and between and not turns.quiet():
            if turns.spent() and not is_probe(data) and self.gate is not None:
                share = share_of_head(data, self.gate)
                if turns.contended(share):
                    self._defer_head(turns, share, data)
                    return
            turns.charge(self.loop)
        self._parse(data)

    def _defer_head(self, turns: TurnBudget, share: str | None, data: bytes) -> None:
        """Hold a new head's bytes for a later turn (`nexus.ingress.turns`), reading nothing more meanwhile; the
        head deadline runs from now (the keep-alive timeout no longer applies: a request has begun)."""
        self.flow.pause_reading()
        self._unset_keepalive_if_required()
        if not self._head.armed:
            self._head.arm()

        def parse() -> bool:
            if self.transport.is_closing():
                return False
            self.flow.resume_reading()
            self._parse(data)
            return True

        turns.defer(self.loop, share, "head", parse)

    def eof_received(self) -> bool | None:  # type: ignore[override]  # uvicorn declares None; asyncio keeps a half-closed transport on True
        """The client closed its side: the connection is closed now, or on a later turn while the turn's budget
        is spent and another share is there (`TurnBudget.contended`; the half-closed transport is kept until then)."""
        turns = self.turns
        if turns is None or self._closes_later or turns.quiet():
            return self._closes_later or None
        if turns.spent() and turns.contended(self._share):
            self._closes_later = True
            turns.defer(self.loop, self._share, "close", self._close_later)
            return True
        turns.charge(self.loop)
        return None

    def _close_later(self) -> bool:
        if self.transport.is_closing():
            return False
        self.transport.close()
        return True

    def _parse(self, data: bytes) -> None:
        super().data_received(data)
        # Counted after parsing: a chunk that completes the head (and carries body bytes) is not head.
        if self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                log.debug("request head too large; closing", extra={"action": "http_head_too_large"})
                self.transport.write(_raw_refusal(431, "Request Header Fields Too Large", _HEAD_TOO_LARGE))
                self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._between = False
        self._in_head = True
        self._head_bytes = 0
        self._read.arm()
        if not self._head.armed:  # from the request's first byte (or the connection's opening)
            self._head.arm()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._head.disarm()
        too_large = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers) > self.max_head_bytes
        extensions: Any = self.scope.setdefault("extensions", {})
        extensions[CLIENT_GONE] = self._gone
        before, tasks = self.cycle, len(self.tasks)
        entry = _Entry()  # the request's task calls it; what it runs is chosen below, before the task starts
        app, self.app = self.app, entry
        try:
            super().on_headers_complete()
        finally:
            self.app = app
        if self.cycle is not None and self.cycle is not before:  # a new request (not an upgrade)
            if too_large:
                entry.app = _head_too_large
            else:
                self._admit(entry, app, tasks)
            # Its task has not run yet: it starts on the next turn of the loop.
            self.cycle.transport = self._writer  # type: ignore[assignment]  # a Transport wrapper where uvicorn declares the concrete class

    def _admit(self, entry: _Entry, app: Any, tasks: int) -> None:
        """Count the request whose head is complete in its share (`Gatekeeper.share_of`) and set what `entry`
        runs: the app, or a refusal (503 SERVER_BUSY at the cap, else 429 TENANT_BUSY at its share). Probes are
        neither counted nor refused. Without a gate (an app other than the gateway's) the cap counts tasks."""
        entry.app = app
        scope: Any = self.scope
        if scope["path"] in _PROBES:
            return
        cap, gate = self.max_concurrency, self.gate
        shares = gate.shares if gate is not None else None
        if gate is None or shares is None:
            if cap is not None and tasks >= cap:
                log.warning("request cap reached; answering 503", extra={"action": "http_busy", "cap": cap})
                entry.app = _busy
            return
        share = gate.share_of(scope)
        if self.turns is not None and not (self._holds and share == self._share):
            if self._holds:
                self.turns.release(self._share)
            self.turns.hold(share)
            self._holds = True
        self._share = share
        if cap is not None and shares.total >= cap:  # the cap first: the last word, as before
            log.warning("request cap reached; answering 503", extra={"action": "http_busy", "cap": cap})
            entry.app = _busy
        elif shares.full(share):
            entry.app = _unchecked_busy if share is None else _tenant_busy
        else:
            ticket = shares.take(share)
            entry.ticket = ticket
            scope["extensions"][TICKET] = ticket

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._between = True
        self._read.disarm()


class _Entry:
    """The ASGI app of one request's task: `app`, chosen once the request's head is parsed (before the task
    runs), and the release of the request's `ticket` (its count in a share) when it ends, however it ends."""

    __slots__ = ("app", "ticket")

    def __init__(self) -> None:
        self.app: Any = None
        self.ticket: Ticket | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if self.ticket is not None:
                self.ticket.release()


class _Deadline:
    """One deadline of a connection (the request's, the request head's): armed again from now, disarmed, or
    past it the connection is closed. It holds the connection's transport, not its protocol: the protocol
    holds it, and a reference back would make every closed connection a cycle that only the garbage collector
    frees (a burst of a thousand connections closing became tens of thousands of objects for one collection,
    a pause of the whole loop).

    Lazy: arming and disarming only move the due time; one timer per deadline wakes at the due time it saw when
    it was set, and either closes the connection, sets itself again for a later due time, or ends when there is
    none. Every request of a keep-alive connection arms and disarms both deadlines (a timer scheduled and one
    cancelled for each, per request, before); now each deadline's timer wakes once per its length at most. `stop` (the
    connection lost) cancels the timer."""

    __slots__ = ("_action", "_due", "_handle", "_loop", "_seconds", "_transport", "_what")

    def __init__(
        self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, seconds: float, what: str, action: str
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._seconds = seconds
        self._what = what
        self._action = action
        self._due: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> bool:
        return self._due is not None

    def arm(self) -> None:
        self._due = due = self._loop.time() + self._seconds
        if self._handle is None:
            self._handle = self._loop.call_at(due, self._wake)

    def disarm(self) -> None:
        self._due = None  # the timer, if set, wakes to nothing due and ends

    def stop(self) -> None:
        self._due = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _wake(self) -> None:
        due = self._due
        if due is not None and due > self._loop.time():  # armed again since the timer was set
            self._handle = self._loop.call_at(due, self._wake)
            return
        self._handle = None
        if due is None:
            return
        self._due = None
        if not self._transport.is_closing():
            log.debug("%s not received in time; closing", self._what, extra={"action": self._action})
            self._transport.close()


def server_config(app: Any, settings: Settings, gate: Gatekeeper | None = None) -> uvicorn.Config:
    """uvicorn's configuration for the gateway's API, every limit from `settings`; requests are counted in the
    shares of `gate` (by default the app's own, `app.state.gate`) as soon as their heads are complete."""
    if gate is None:
        gate = getattr(getattr(app, "state", None), "gate", None)
    shares = gate.shares if gate is not None else None
    per_turn = settings.http_heads_per_turn
    turns = TurnBudget(per_turn, shares) if per_turn > 0 and shares is not None else None
    protocol = type(
        "NexusHttpProtocol",
        (GuardedHttpToolsProtocol,),
        {
            "read_timeout_s": settings.http_read_timeout_s,
            "head_timeout_s": settings.http_head_timeout_s,
            "max_head_bytes": settings.http_max_head_bytes,
            "max_concurrency": settings.http_limit_concurrency,
            "max_connections": settings.http_max_connections,
            "gate": gate,
            "turns": turns,
        },
    )
    return uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        http=protocol,
        log_level="warning",
        log_config=None,  # uvicorn's records go through our handler (nexus.logging), not its own
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=settings.http_keep_alive_s,  # type: ignore[arg-type]  # used as a float by call_later
        backlog=settings.http_backlog,
        # The cap is enforced by the protocol above, which answers in the API's error shape.
        limit_concurrency=None,
    )
