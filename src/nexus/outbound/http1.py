"""A lean HTTP/1.1 client for the gateway's outbound calls: a POST, and its status (and a bounded body).

Why not aiohttp (deliv3): under the delivery bench its per-request machinery (request and response
objects, header multidicts, cookie jar, timers, payload registry, tracing hooks) was ~30 % of a
dispatcher's samples, about as much as everything else the dispatcher does per delivery; the webhook needs
none of it. This client writes the request head and body in one `transport.write`, parses the answer with
httptools (llhttp, the parser uvicorn uses), keeps the status and ``Retry-After``, and either discards the
body (webhooks: `body_limit` 0, no body callback at all) or keeps its first `body_limit` bytes (the saga
executors read a service's JSON answer).

* Every connection follows the `OutboundPolicy` (outbound/policy.py): its guard resolves and checks the
  host's addresses and the connection goes to a checked address; its deadline, TLS context. Redirects are
  answers, never followed.
* One pool of idle keep-alive connections per (scheme, host, port): a connection goes back only after a
  complete answer that allows keep-alive, and one the server closed while idle is never reused.
* One deadline (`policy.timeout_s`) covers resolving, connecting, sending and the whole answer; a
  connection that timed out, failed or was cancelled is closed, never reused.
* Failures are `OSError`s (`ConnectFailedError` when no connection was made: nothing was sent; refused,
  reset, `ServerDisconnectedError`, `BadResponseError` after that) or `TimeoutError`
  (`ConnectTimeoutError` when it ran out before a connection was made); `UnsafeUrlError` from the guard.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import socket
import ssl
from collections.abc import Callable
from typing import Any

import httptools
from yarl import URL

from nexus.outbound.policy import OutboundPolicy


class ServerDisconnectedError(ConnectionError):
    """The server closed the connection before its answer was complete."""


class BadResponseError(OSError):
    """The server's answer is not HTTP/1.x."""


class ConnectFailedError(ConnectionError):
    """No connection could be made (refused, unreachable, a name that does not resolve): nothing was sent."""


class ConnectTimeoutError(TimeoutError):
    """The deadline passed before a connection was made: nothing was sent."""


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """What the dispatcher keeps of an answer."""

    status: int
    retry_after: str | None
    body: bytes = b""
    """The first `body_limit` bytes of the body (always empty for a client that discards bodies)."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._status = 0
        self._retry_after: str | None = None
        self._keep_alive = False
        self._headers_done = False

    # -- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if self._headers_done and not self._keep_alive:
                waiter.set_result(None)  # an answer delimited by the end of the connection
            else:
                waiter.set_exception(ServerDisconnectedError("server closed the connection before answering"))

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BadResponseError(f"bad response: {exc}"))

    # -- httptools callbacks --------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self._retry_after = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        self._headers_done = True

    def on_message_complete(self) -> None:
        if 100 <= self._status < 200:  # an interim answer: the final one follows on the same connection
            self._headers_done = False
            self._retry_after = None
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- use ------------------------------------------------------------------------------------------

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    async def exchange(self, request: bytes) -> Answer:
        """Send one request and wait for its complete answer."""
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._status, self._retry_after, self._headers_done, self._keep_alive = 0, None, False, False
        self._start_body()
        self.transport.write(request)
        try:
            await self._waiter
        finally:
            self._waiter = None
        if not self._keep_alive:
            self.close()
        return Answer(self._status, self._retry_after, self._body())

    def _start_body(self) -> None:
        pass

    def _body(self) -> bytes:
        return b""

    @property
    def reusable(self) -> bool:
        return not self.closed and self._keep_alive and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _BodyConnection(_Connection):
    """A connection that keeps the first `limit` bytes of each answer's body (the rest is read and dropped).

    A subclass rather than a flag: httptools calls `on_body` only on a protocol that has it, so the
    webhook connections pay nothing for bodies they discard."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit
        self._chunks: list[bytes] = []
        self._kept = 0

    def on_body(self, body: bytes) -> None:
        room = self._limit - self._kept
        if room > 0:
            self._chunks.append(body[:room])
            self._kept += min(room, len(body))

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._start_body()  # an interim answer's body (none, by HTTP) is not the final one's

    def _start_body(self) -> None:
        self._chunks, self._kept = [], 0

    def _body(self) -> bytes:
        return b"".join(self._chunks)


class Http1Client:
    """POSTs over pools of keep-alive connections, one pool per (scheme, host, port), under one policy."""

    def __init__(self, policy: OutboundPolicy, user_agent: str, *, body_limit: int = 0) -> None:
        self.policy = policy
        self.timeout_s = policy.timeout_s
        self._user_agent = user_agent
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._factory: Callable[[], _Connection] = (
            functools.partial(_BodyConnection, body_limit) if body_limit > 0 else _Connection
        )
        self._closing = False

    async def post(self, url: URL, headers: dict[str, str], body: bytes) -> Answer:
        """POST `body` with `headers` to `url`; the answer's status and Retry-After."""
        host, port = url.raw_host or "", url.port or 0
        key = (url.scheme, host, port)
        head = [f"POST {url.raw_path_qs} HTTP/1.1\r\nhost: {url.host_port_subcomponent}\r\n"
                f"user-agent: {self._user_agent}\r\ncontent-length: {len(body)}\r\n"]  # fmt: skip
        head.extend(f"{name}: {value}\r\n" for name, value in headers.items())
        head.append("\r\n")
        request = "".join(head).encode("latin-1") + body
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                conn = self._idle_connection(key) or await self._connect(url.scheme, host, port)
                answer = await conn.exchange(request)
        except TimeoutError as exc:
            if conn is None:
                raise ConnectTimeoutError(f"no connection to {host}:{port} within {self.timeout_s:g}s") from exc
            conn.close()
            raise
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        if conn.reusable and not self._closing:
            self._idle.setdefault(key, []).append(conn)
        return answer

    def _idle_connection(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.reusable:
                return conn
        return None

    async def _connect(self, scheme: str, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = self.policy.tls() if scheme == "https" else None
        # The guard resolves and checks; the connection is made to an address it checked.
        try:
            addresses = await self.policy.addresses(host, port)
        except OSError as exc:
            raise ConnectFailedError(f"cannot resolve {host}: {exc}") from exc
        last: OSError | None = None
        for address, address_port in addresses:
            try:
                _, conn = await loop.create_connection(
                    self._factory,
                    address,
                    address_port,
                    ssl=tls,
                    server_hostname=host.strip("[]") if tls else None,
                )
            except OSError as exc:
                last = exc
                continue
            sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn
        if isinstance(last, ssl.SSLError):  # the handshake failed: a certificate is not a connectivity problem
            raise last
        raise ConnectFailedError(f"cannot connect to {host}:{port}: {last}") from last

    async def aclose(self) -> None:
        self._closing = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
