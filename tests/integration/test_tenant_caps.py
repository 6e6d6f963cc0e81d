"""Caps that keep one key or one client from holding a real `nexus serve` for everyone: waits per key,
streams ending at revocation, the request head deadline, bodies refused before they are read, and the
console's own protections."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.ingress.http_server import _Deadline
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import TEST_API_KEY, api_headers, root_headers

pytestmark = pytest.mark.slow


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_waits_per_key_are_capped(start_gateway, settings: Settings, db: Database) -> None:  # type: ignore[no-untyped-def]
    """With NEXUS_MAX_WAITS_PER_KEY=2, a key's third open stream or long poll is 429 TOO_MANY_WAITS in the
    one shape, another key still waits, and a slot given back (a stream closed) can be taken again."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(max_waits_per_key=2))
    _, other = await create_key(db, "default", frozenset({Role.AGENT}), "other")
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as api:
        async with (
            api.stream("GET", "/v1/orders/o-1/stream") as one,
            api.stream("GET", "/v1/orders/o-2/stream", headers={"Last-Event-ID": b"\xb2"}) as two,
        ):
            assert (one.status_code, two.status_code) == (200, 200)
            lines = [one.aiter_lines(), two.aiter_lines()]  # kept: a dropped iterator closes its stream
            for it in lines:
                assert (await anext(it)).startswith(":")
            refused = await api.get("/v1/orders/o-3/stream")
            assert refused.status_code == 429 and refused.json()["code"] == "TOO_MANY_WAITS"
            assert {"code", "message", "request_id"} <= set(refused.json())
            polled = await api.get("/v1/orders/o-3", params={"wait": "5"})
            assert polled.status_code == 429 and polled.json()["code"] == "TOO_MANY_WAITS"
            elsewhere = await api.get("/v1/orders/o-3", params={"wait": "0.2"}, headers=bearer(other))
            assert elsewhere.status_code == 404
        deadline = time.monotonic() + 5
        while (answer := await api.get("/v1/orders/o-3", params={"wait": "0.1"})).status_code == 429:
            assert time.monotonic() < deadline, "slots were not given back"
            await asyncio.sleep(0.1)
        assert answer.status_code == 404


async def test_a_stream_ends_soon_after_its_key_is_revoked(start_gateway, settings: Settings, db: Database) -> None:  # type: ignore[no-untyped-def]
    """An open SSE stream ends within the auth cache TTL plus a second after its key is revoked."""
    _, base = start_gateway("--no-dispatcher")
    record, key = await create_key(db, "default", frozenset({Role.AGENT}), "streamer")
    async with (
        httpx.AsyncClient(base_url=base, timeout=30) as api,
        api.stream("GET", "/v1/orders/o-1/stream", headers=bearer(key)) as stream,
    ):
        assert stream.status_code == 200
        lines = stream.aiter_lines()
        assert (await anext(lines)).startswith(":")
        revoked = await api.post(f"/v1/keys/{record.id}/revoke", headers=root_headers())
        assert revoked.status_code == 200
        started = time.monotonic()
        async for _ in lines:
            pass  # keepalives until the server ends the body
        assert time.monotonic() - started < settings.auth_cache_ttl_s + 1.0


async def test_a_slow_request_head_is_dropped_after_the_head_timeout(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """A connection whose request head is not complete within NEXUS_HTTP_HEAD_TIMEOUT_S is closed (a
    slowloris), well before the read timeout; a silent new connection too."""
    _, base = start_gateway(
        "--no-dispatcher", settings_=settings.replace(http_head_timeout_s=0.5, http_read_timeout_s=30.0)
    )
    port = int(base.rsplit(":", 1)[1])
    for opening in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b""):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(opening)
        started = time.monotonic()
        closed = False
        while not closed and time.monotonic() - started < 10:
            try:  # a header line every 0.1 s (or silence) keeps the head incomplete
                if opening:
                    writer.write(b"X-Slow: 1\r\n")
                    await writer.drain()
                closed = await asyncio.wait_for(reader.read(1024), timeout=0.1) == b""
            except TimeoutError:
                continue
            except ConnectionError:
                closed = True
        writer.close()
        assert closed and time.monotonic() - started < 3.0, (opening, time.monotonic() - started)
    async with httpx.AsyncClient(base_url=base) as api:
        assert (await api.get("/healthz")).status_code == 200


async def test_a_deadline_armed_again_counts_from_its_last_arming() -> None:
    """The connection deadlines are lazy (one timer, woken at the due time it was set for): a deadline armed
    again before its timer wakes is kept to its new due time, a disarmed one never closes, an armed one closes
    once its last due time passes, and `stop` leaves no timer behind."""
    loop = asyncio.get_running_loop()
    closed: list[float] = []

    class Recording(asyncio.Transport):
        def is_closing(self) -> bool:
            return bool(closed)

        def close(self) -> None:
            closed.append(loop.time())

    deadline = _Deadline(Recording(), loop, 0.3, "request head", "http_head_timeout")
    deadline.arm()
    armed_at = loop.time()
    for _ in range(4):  # armed again every 0.1 s, past the first due time
        await asyncio.sleep(0.1)
        deadline.disarm()
        deadline.arm()
        armed_at = loop.time()
    assert not closed
    await asyncio.sleep(0.5)
    assert len(closed) == 1 and closed[0] >= armed_at + 0.3 - 0.01, (closed, armed_at)
    closed.clear()
    deadline.arm()
    deadline.disarm()
    await asyncio.sleep(0.5)
    assert not closed and not deadline.armed
    deadline.arm()
    deadline.stop()
    assert deadline._handle is None
    await asyncio.sleep(0.5)
    assert not closed


async def read_answer(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), timeout=5)
    finally:
        writer.close()


async def test_an_oversized_console_form_is_refused_before_it_is_read(start_gateway) -> None:  # type: ignore[no-untyped-def]
    """POST /console/login declaring 150 MB is answered 413 in the one shape at once, before any of the
    body is sent; a streamed body is cut at the limit."""
    _, base = start_gateway("--no-dispatcher")
    port = int(base.rsplit(":", 1)[1])
    head = b"POST /console/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    answer = await read_answer(port, head + b"Content-Length: 150000000\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413") and b'"PAYLOAD_TOO_LARGE"' in answer and b"request_id" in answer
    async with httpx.AsyncClient(base_url=base, timeout=30) as api:

        async def chunks() -> Any:
            for _ in range(300):
                yield b"a" * 65536

        streamed = await api.post("/console/login", content=chunks())
        assert streamed.status_code == 413 and streamed.json()["code"] == "PAYLOAD_TOO_LARGE"


async def test_console_headers_cookies_notes_and_redirects(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Console answers carry a CSP and X-Frame-Options: DENY; with NEXUS_CONSOLE_SECURE its cookies are
    Secure; a `note` put into a URL by someone else is not shown; no redirect is built from the Host header."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(console_secure=True))
    async with httpx.AsyncClient(base_url=base, timeout=10) as browser:
        form = await browser.get("/console/login")
        assert form.headers["x-frame-options"] == "DENY"
        csp = form.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert "secure" in form.headers["set-cookie"].lower()
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        # Secure cookies are not sent back by a client over http: carry them by hand.
        login_cookie = form.headers["set-cookie"].split(";")[0]
        signed_in = await browser.post(
            "/console/login",
            data={"csrf": csrf.group(1), "api_key": TEST_API_KEY},
            headers={"Cookie": login_cookie},
        )
        assert signed_in.status_code == 303, signed_in.text[:300]
        session = next(c for c in signed_in.headers.get_list("set-cookie") if c.startswith("nexus_console="))
        assert "secure" in session.lower()
        cookie = {"Cookie": session.split(";")[0]}
        note = "Your session expired: sign in at evil.example"
        page = await browser.get("/console/dead", params={"note": note, "sig": "0" * 64}, headers=cookie)
        assert page.status_code == 200, page.text[:300]
        assert "evil.example" not in page.text
        assert page.headers["x-frame-options"] == "DENY"
        slash = await browser.get("/console/orders/", headers={**cookie, "Host": "evil.example"})
        assert "evil.example" not in slash.headers.get("location", "")
        api_slash = await browser.get("/v1/dead-letters/", headers={**api_headers(), "Host": "evil.example"})
        assert api_slash.status_code == 404 and "location" not in api_slash.headers
