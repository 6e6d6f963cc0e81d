"""The outbound HTTP/1.1 client (outbound/http1.py) against real sockets: keep-alive reuse and when a
connection must not be reused, interim answers, answers delimited by the connection's end, timeouts."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from yarl import URL

from nexus.outbound.http1 import ConnectFailedError, Http1Client, ServerDisconnectedError
from nexus.outbound.policy import OutboundPolicy
from nexus.settings import Settings

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]


class Server:
    """A raw TCP server answering each request with `handler`; counts connections and requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                if not await self.handler(reader, writer, len(self.requests)):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> URL:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return URL(f"http://127.0.0.1:{port}/hook")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Server]]]:
    servers: list[Server] = []

    async def start(handler: Handler) -> Server:
        server = Server(handler)
        server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for s in servers:
        assert s.server is not None
        s.server.close()


def client(timeout_s: float = 5.0) -> Http1Client:
    return Http1Client(OutboundPolicy.for_webhooks(Settings(allow_private_urls="127.0.0.0/8"), timeout_s), "test")


async def answer(writer: asyncio.StreamWriter, raw: bytes) -> None:
    writer.write(raw)
    await writer.drain()


async def test_keep_alive_connections_are_reused_and_requests_carry_headers_and_body(serve) -> None:  # type: ignore[no-untyped-def]
    """Three sequential POSTs share one connection; each carries the given headers and the exact body."""

    async def ok(_: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        await answer(writer, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        return True

    server = await serve(ok)
    http = client()
    try:
        for i in range(3):
            got = await http.post(server.url, {"x-test": str(i)}, b'{"n": %d}' % i)
            assert got.status == 200 and got.retry_after is None
    finally:
        await http.aclose()
    assert server.connections == 1
    assert server.requests[2].startswith(b"POST /hook HTTP/1.1\r\n")
    assert b"\r\nx-test: 2\r\n" in server.requests[2] and server.requests[2].endswith(b'\r\n\r\n{"n": 2}')


async def test_a_connection_the_server_closes_is_not_reused(serve) -> None:  # type: ignore[no-untyped-def]
    """After `Connection: close`, and after the server drops an idle connection, the next POST gets a new
    connection and succeeds (no request goes to a closed socket)."""

    async def close_each(_: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            await answer(writer, b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
        else:
            await answer(writer, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        return False  # the server closes after every answer

    server = await serve(close_each)
    http = client()
    try:
        assert (await http.post(server.url, {}, b"a")).status == 200
        assert (await http.post(server.url, {}, b"b")).status == 200  # after Connection: close
        await asyncio.sleep(0.1)  # the server has dropped the keep-alive connection by now
        assert (await http.post(server.url, {}, b"c")).status == 200
    finally:
        await http.aclose()
    assert server.connections == 3


async def test_interim_answers_retry_after_and_close_delimited_answers(serve) -> None:  # type: ignore[no-untyped-def]
    """A 100 before the final answer is skipped; Retry-After is kept; a body ended by closing is read."""

    async def varied(_: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            await answer(
                writer, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nRetry-After: 7\r\ncontent-length: 0\r\n\r\n"
            )
            return True
        await answer(writer, b"HTTP/1.1 429 Slow\r\n\r\nno length, ends with the connection")
        return False

    server = await serve(varied)
    http = client()
    try:
        first = await http.post(server.url, {}, b"a")
        assert (first.status, first.retry_after) == (503, "7")
        assert (await http.post(server.url, {}, b"b")).status == 429
    finally:
        await http.aclose()


async def test_a_hanging_server_times_out_and_a_dropped_request_is_an_error(serve) -> None:  # type: ignore[no-untyped-def]
    """No answer within the deadline is a TimeoutError; a connection closed before answering is an OSError."""

    async def hang_then_drop(_: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            await asyncio.sleep(0.5)  # past the client's deadline
        return False

    server = await serve(hang_then_drop)
    http = client(timeout_s=0.3)
    try:
        with pytest.raises(TimeoutError):
            await http.post(server.url, {}, b"a")
        with pytest.raises(ServerDisconnectedError):
            await http.post(server.url, {}, b"b")
        await asyncio.sleep(0.4)  # the first handler wakes up and ends before the server goes
    finally:
        await http.aclose()
    assert server.connections == 2  # the timed-out connection was not reused


def _self_signed() -> tuple[bytes, bytes]:
    """A certificate for the name `localhost` (no address in it) and its key (PEM), made here."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


async def test_https_with_a_verified_certificate_and_keep_alive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Over TLS to a name, the connection goes to the address the guard resolved while the certificate is
    verified for the name (a client that does not trust it fails); two POSTs share one connection."""
    import ssl

    cert, key = _self_signed()
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")

    async def ok(_: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        await answer(writer, b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n")
        return True

    server = Server(ok)
    server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=server_tls)
    url = server.url.with_scheme("https").with_host("localhost")
    policy = OutboundPolicy.for_webhooks(Settings(allow_private_urls="127.0.0.0/8,::1/128"), 5.0)
    trusting_tls = ssl.create_default_context(cafile=tmp_path / "cert.pem")
    trusting = Http1Client(dataclasses.replace(policy, ssl_context=trusting_tls), "test")
    distrusting = Http1Client(policy, "test")
    try:
        assert (await trusting.post(url, {}, b"a")).status == 201
        assert (await trusting.post(url, {}, b"b")).status == 201
        with pytest.raises(ssl.SSLCertVerificationError):
            await distrusting.post(url, {}, b"c")
    finally:
        await trusting.aclose()
        await distrusting.aclose()
        server.server.close()
    assert server.connections == 1  # both POSTs on one connection (a refused handshake never gets this far)


async def test_a_bounded_body_keeps_its_first_bytes_and_the_connection(serve) -> None:  # type: ignore[no-untyped-def]
    """With a body limit, an answer's first `body_limit` bytes are kept (chunked or not), the rest is read and
    dropped so the connection stays reusable; without one, no body is kept at all."""

    async def big(_: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            await answer(writer, b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n0123456789")
        else:
            await answer(
                writer, b"HTTP/1.1 201 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
            )
        return True

    server = await serve(big)
    policy = OutboundPolicy.for_webhooks(Settings(allow_private_urls="127.0.0.0/8"), 5.0)
    bounded = Http1Client(policy, "test", body_limit=5)
    discarding = Http1Client(policy, "test")
    try:
        assert (await bounded.post(server.url, {}, b"a")).body == b"01234"
        second = await bounded.post(server.url, {}, b"b")
        assert (second.status, second.body) == (201, b"abcde")
        assert (await discarding.post(server.url, {}, b"c")).body == b""
    finally:
        await bounded.aclose()
        await discarding.aclose()
    assert server.connections == 2  # one per client: the bounded client reused its connection


async def test_a_refused_connection_is_told_apart_from_a_failure_after_sending(serve) -> None:  # type: ignore[no-untyped-def]
    """Nothing listening: `ConnectFailedError` (nothing was sent); a server that takes the request and
    drops the connection: `ServerDisconnectedError` (the request may have been acted on)."""

    async def drop(_: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
        return False

    server = await serve(drop)
    closed = await serve(drop)
    assert closed.server is not None
    url_closed = closed.url
    closed.server.close()
    await closed.server.wait_closed()
    http = client()
    try:
        with pytest.raises(ConnectFailedError):
            await http.post(url_closed, {}, b"a")
        with pytest.raises(ServerDisconnectedError):
            await http.post(server.url, {}, b"b")
    finally:
        await http.aclose()
