"""Hostile requests against a real `nexus serve`: each test reproduces one way a single request
used to harm others or leak internals, and proves it no longer does."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from nexus.settings import Settings
from tests.conftest import api_headers
from tests.factories import abort_json, plan_json, step_json

pytestmark = pytest.mark.slow

JSON = api_headers(**{"content-type": "application/json"})
DRIVER_WORDS = ("asyncpg", "Error:", "Traceback", "pkey", "SQLSTATE", "CharacterNotInRepertoire", "psycopg")


@pytest.fixture
async def served(start_gateway, settings: Settings) -> Any:  # type: ignore[no-untyped-def]
    proc, base = start_gateway(
        "--no-dispatcher",
        settings_=settings.replace(http_read_timeout_s=1.0, http_keep_alive_s=1.0, max_events_per_request=100),
    )
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=api_headers()) as client:
        yield proc, client


@pytest.fixture
async def api(served: Any) -> httpx.AsyncClient:
    return served[1]  # type: ignore[no-any-return]


async def dead_letter_count(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM dead_letters"))
    finally:
        await conn.close()


def assert_error_shape(response: httpx.Response, status: int, code: str) -> None:
    body = response.json()
    assert (response.status_code, body.get("code")) == (status, code), body
    assert set(body) >= {"code", "message", "request_id"} and body["request_id"] == response.headers["x-request-id"]
    assert not any(word in response.text for word in DRIVER_WORDS), response.text


async def test_too_many_events_are_refused_whole_and_write_nothing(api: httpx.AsyncClient, database_url: str) -> None:
    """More events than the limit in one request: 413 BATCH_TOO_LARGE and no dead letter at all."""
    response = await api.post("/v1/events", content=json.dumps({"events": [{}] * 101}), headers=JSON)
    assert_error_shape(response, 413, "BATCH_TOO_LARGE")
    flood = b"[" + b",".join([b"{}"] * 300_000) + b"]"
    assert_error_shape(await api.post("/v1/events", content=flood, headers=JSON), 413, "BATCH_TOO_LARGE")
    assert await dead_letter_count(database_url) == 0


async def test_deep_nesting_is_refused_whole_and_writes_nothing(api: httpx.AsyncClient, database_url: str) -> None:
    """5,000 nested arrays, or an extra field nested 900 levels in data: 400 NESTING_TOO_DEEP, nothing written."""
    deep = b"[" * 5000 + b"]" * 5000
    assert_error_shape(await api.post("/v1/events", content=deep, headers=JSON), 400, "NESTING_TOO_DEEP")
    event = step_json("o-deep", "p", 1)
    event["data"]["extra"] = json.loads("[" * 900 + "]" * 900)
    response = await api.post(
        "/v1/events", content=json.dumps({"events": [event, step_json("o-ok", "p", 1)]}), headers=JSON
    )
    assert_error_shape(response, 400, "NESTING_TOO_DEEP")
    assert await dead_letter_count(database_url) == 0
    assert (await api.get("/v1/orders/o-ok")).status_code == 404


async def test_a_poisonous_item_fails_no_other_request(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """An item that cannot be serialized or stored is dead-lettered alone; 30 valid requests beside it all apply."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(max_nesting_depth=2000, batch_workers=1))
    async with httpx.AsyncClient(base_url=base, timeout=60, headers=api_headers()) as api:
        deep = step_json("o-poison-deep", "p", 1)
        deep["data"]["extra"] = json.loads("[" * 900 + "]" * 900)
        nul = step_json("o-poison-nul", "p", 1)
        nul["data"]["note"] = "\u0000"
        valid = [step_json(f"o-valid-{i}", "p", 1) for i in range(30)]
        poison_requests = [
            {"events": [deep, step_json("o-beside-1", "p", 1)]},
            {"events": [nul, step_json("o-beside-2", "p", 1)]},
        ]
        answers = await asyncio.gather(
            *(api.post("/v1/events", json=body) for body in poison_requests),
            *(api.post("/v1/events", json=event) for event in valid),
        )
        assert all(a.status_code < 500 for a in answers), [a.text for a in answers if a.status_code >= 500]
        for answer in answers[:2]:
            decisions = [r["decision"] for r in answer.json()["results"]]
            assert decisions[1] == "APPLY" and decisions[0] in ("DEAD_LETTER", "APPLY"), decisions
        assert [a.json()["results"][0]["decision"] for a in answers[2:]] == ["APPLY"] * 30
        for oid in ["o-beside-1", "o-beside-2"] + [f"o-valid-{i}" for i in range(30)]:
            assert (await api.get(f"/v1/orders/{oid}")).json()["last_seq"] == 1


@pytest.mark.parametrize("order_id", ["o\n1", "a/b1", "caf\u00e9", "nul\u0000id", "-leading", "x" * 201, ""])
async def test_unsafe_identifiers_are_invalid_identifier(api: httpx.AsyncClient, order_id: str) -> None:
    """An order_id outside the safe character set is 422 INVALID_IDENTIFIER, never a driver error."""
    response = await api.post("/v1/events", json=step_json(order_id, "p", 1))
    assert_error_shape(response, 422, "INVALID_IDENTIFIER")


async def test_framework_and_database_errors_have_the_one_shape(api: httpx.AsyncClient) -> None:
    """404, 405, 422 of the framework, an out-of-range offset and a reused event_id: one shape, no driver text."""
    assert_error_shape(await api.get("/v1/nope"), 404, "NOT_FOUND")
    assert_error_shape(await api.get("/v1/orders/a%2Fb1"), 404, "NOT_FOUND")  # no order can have a slash
    assert_error_shape(await api.get("/v1/orders/a%00b"), 422, "INVALID_IDENTIFIER")
    assert_error_shape(await api.delete("/v1/events"), 405, "METHOD_NOT_ALLOWED")
    assert_error_shape(await api.get("/v1/dead-letters", params={"offset": 2**63}), 422, "INVALID_REQUEST")
    assert_error_shape(await api.get("/v1/dead-letters", params={"limit": "many"}), 422, "INVALID_REQUEST")
    assert_error_shape(await api.post("/v1/dead-letters/99999999999999999999/redrive"), 422, "INVALID_REQUEST")
    first = step_json("o-first", "p", 1)
    assert (await api.post("/v1/events", json=first)).status_code == 200
    reused = step_json("o-second", "p", 1, event_id=first["event_id"])
    response = await api.post("/v1/events", json=reused)
    assert_error_shape(response, 422, "INVALID_EVENT")
    assert "event_id" in response.json()["message"]


async def test_redrive_is_idempotent(api: httpx.AsyncClient, database_url: str) -> None:
    """A dead letter redriven five times (at once) is redriven once; the others are 409 ALREADY_REDRIVEN."""
    s1, s2 = plan_json("o-redrive", "p", 2)
    await api.post("/v1/events", json=s1)
    await api.post("/v1/events", json=dict(s2, plan_id="wrong"))
    [letter] = (await api.get("/v1/dead-letters")).json()["dead_letters"]
    answers = await asyncio.gather(*(api.post(f"/v1/dead-letters/{letter['id']}/redrive") for _ in range(5)))
    assert sorted(a.status_code for a in answers) == [200, 409, 409, 409, 409]
    for answer in answers:
        if answer.status_code == 409:
            assert_error_shape(answer, 409, "ALREADY_REDRIVEN")
    assert_error_shape(await api.post(f"/v1/dead-letters/{letter['id']}/redrive"), 409, "ALREADY_REDRIVEN")
    assert await dead_letter_count(database_url) == 2  # the original and the one redrive's PLAN_MISMATCH


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (json.dumps(step_json("o-t", "p", 1, seq_id=True)), 422, "INVALID_EVENT"),
        (json.dumps(step_json("o-t", "p", 1, seq_id="1")), 422, "INVALID_EVENT"),
        (json.dumps(abort_json("o-t", "p", at_seq=2**64)), 422, "INVALID_EVENT"),
        (json.dumps(step_json("o-t", "p", 1, timestamp="0001-01-01T00:00+14:00")), 422, "INVALID_EVENT"),
        (json.dumps(step_json("o-t", "p", 1, timestamp="2026-01-01")), 422, "INVALID_EVENT"),
        (json.dumps(step_json("o-t", "p", 1)).replace('"data": {', '"data": {"x": NaN, '), 400, "PARSE_ERROR"),
        (json.dumps(step_json("o-t", "p", 1)).replace('"data": {', '"data": {"x": 1e309, '), 400, "PARSE_ERROR"),
        (
            json.dumps(step_json("o-t", "p", 1)).replace('"plan_id": "p"', '"plan_id": "p", "plan_id": "q"'),
            400,
            "PARSE_ERROR",
        ),
    ],
)
async def test_loose_types_are_refused(api: httpx.AsyncClient, body: str, status: int, code: str) -> None:
    """Booleans or strings as integers, integers past int64, unrepresentable or date-only timestamps, NaN,
    1e309 and duplicate keys are refused with the documented code."""
    assert_error_shape(await api.post("/v1/events", content=body, headers=JSON), status, code)
    assert (await api.get("/v1/orders/o-t")).status_code == 404


async def test_quantity_beyond_int64_and_utf16_and_media_type(api: httpx.AsyncClient) -> None:
    """quantity 2**70 is INVALID_EVENT, a UTF-16 body PARSE_ERROR, and any other Content-Type 415."""
    event = step_json("o-q", "p", 1)
    event["data"]["items"][0]["quantity"] = 2**70
    assert_error_shape(await api.post("/v1/events", json=event), 422, "INVALID_EVENT")
    utf16 = json.dumps(step_json("o-u", "p", 1)).encode("utf-16")
    assert_error_shape(await api.post("/v1/events", content=utf16, headers=JSON), 400, "PARSE_ERROR")
    good = json.dumps(step_json("o-m", "p", 1))
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-16"):
        response = await api.post("/v1/events", content=good, headers=api_headers(**{"content-type": ctype}))
        assert_error_shape(response, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert_error_shape(await api.post("/v1/events", content=good, headers=api_headers()), 415, "UNSUPPORTED_MEDIA_TYPE")
    assert (await api.get("/v1/orders/o-m")).status_code == 404


def _port(api: httpx.AsyncClient) -> int:
    return int(str(api.base_url).rsplit(":", 1)[1].strip("/"))


async def test_half_sent_and_idle_connections_are_closed_and_disconnects_are_quiet(served: Any) -> None:
    """A half-sent head or body, or an idle keep-alive, is closed after its timeout; a head over the cap is
    431 (a large body sent with its head is not); 50 clients leaving mid-body leave no traceback in the log."""
    proc, api = served
    port = _port(api)
    loop = asyncio.get_running_loop()

    async def closed_within(payload: bytes, seconds: float) -> bool:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        await writer.drain()
        started = time.monotonic()
        try:
            data = await asyncio.wait_for(reader.read(), seconds)
        finally:
            writer.close()
        return data == b"" or time.monotonic() - started < seconds

    assert await closed_within(b"GET /healthz HTTP/1.1\r\nHost: x\r\n", 5)  # half-sent head
    head = b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    assert await closed_within(head, 5)  # half-sent body
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.3)
    await reader.read(65536)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # idle keep-alive closed by the server
    writer.close()

    def leave_mid_body() -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(head)

    await asyncio.gather(*(loop.run_in_executor(None, leave_mid_body) for _ in range(50)))

    def raw_exchange(payload: bytes, half_close: bool = True) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(payload)
            if half_close:
                # Our FIN tells the server nothing more comes; a server may close at once on it, so a request
                # whose answer takes time asks for `Connection: close` instead and keeps its side open.
                s.shutdown(socket.SHUT_WR)
            return b"".join(iter(lambda: s.recv(65536), b""))

    huge_head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n"
    assert (await loop.run_in_executor(None, raw_exchange, huge_head)).startswith(b"HTTP/1.1 431")
    trickled = await loop.run_in_executor(None, raw_exchange, huge_head[:-4])  # never completes
    assert trickled.startswith(b"HTTP/1.1 431")
    big = b"[" + b",".join([b"{}"] * 300_000) + b"]"
    one_chunk = (
        b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n" % len(big)
    ) + (b"Authorization: " + api_headers()["Authorization"].encode() + b"\r\n\r\n")
    assert b"BATCH_TOO_LARGE" in await loop.run_in_executor(None, raw_exchange, one_chunk + big, False)
    await asyncio.sleep(0.5)
    assert (await api.get("/healthz")).status_code == 200
    log = Path(proc.log_path).read_text(errors="replace")
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


async def test_every_error_carries_a_request_id_and_5xx_are_logged(db: Any, settings: Settings, caplog: Any) -> None:
    """An unexpected failure answers 500 in the one shape with its request id, and is logged with a traceback."""
    from nexus.gateway import Gateway
    from nexus.ingress.http import create_app

    app = create_app(db, Gateway(db), settings=settings)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("internal detail")

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=api_headers()) as client:
        response = await client.get("/boom", headers={"x-request-id": "req-" + uuid.uuid4().hex})
    assert_error_shape(response, 500, "INTERNAL_ERROR")
    assert "internal detail" not in response.text
    [record] = [r for r in caplog.records if getattr(r, "action", None) == "http_5xx"]
    assert record.request_id == response.json()["request_id"] and record.exc_info is not None


async def test_connection_cap_answers_503_in_the_one_shape(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """Beyond the cap on requests in flight a request is answered 503 SERVER_BUSY in the error shape, at
    once, while /healthz and /readyz are still answered (a balancer must not read a busy gateway as a dead
    one); idle connections do not count."""
    settings_ = settings.replace(http_limit_concurrency=2, max_requests_per_tenant=2)
    _, base = start_gateway("--no-dispatcher", settings_=settings_)
    port = int(base.rsplit(":", 1)[1])
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=api_headers()) as api:
            assert (await api.get("/v1/processes")).status_code == 200  # idle connections are not requests
            polls = [asyncio.create_task(api.get("/v1/orders/o-cap", params={"wait": "4"})) for _ in range(2)]
            deadline = time.monotonic() + 20
            while (response := await api.get("/v1/processes")).status_code != 503:
                assert time.monotonic() < deadline, response.text
                await asyncio.sleep(0.1)
            busy = response.json()
            assert busy["code"] == "SERVER_BUSY" and {"code", "message", "request_id"} <= set(busy)
            assert (await api.get("/healthz")).status_code == 200
            assert (await api.get("/readyz")).status_code == 200
            await asyncio.gather(*polls)
    finally:
        for _, writer in idle:
            writer.close()
    await asyncio.sleep(0.3)
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as api:
        assert (await api.get("/healthz")).status_code == 200
