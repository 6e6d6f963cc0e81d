"""Waits end with their client (issue 34, item 2), over real sockets to a real `nexus serve`: a long poll,
an SSE stream or an MCP `wait_for_order` whose client has gone frees its key's wait slot within a second or
so, and every kind of wait ends within the auth cache's TTL plus a second of its key's revocation."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import root_headers

pytestmark = pytest.mark.slow

WAITS = 16
# Generous (a loaded machine), and far under the waits' own 60 s: only a freed slot passes in time.
FREED_WITHIN_S = 10.0


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def long_poll(key: str) -> bytes:
    return f"GET /v1/orders/o-1?wait=60&after_seq=5 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode()


def stream(key: str) -> bytes:
    return f"GET /v1/orders/o-1/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode()


def mcp_wait(key: str) -> bytes:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "wait_for_order", "arguments": {"order_id": "o-1", "after_seq": 5, "timeout_s": 60}},
    }
    body = json.dumps(call).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def start_order(base: str, key: str) -> None:
    """The plan of order o-1 (last_seq 0): every wait below waits for its seq 6."""
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=bearer(key)) as api:
        started = await api.post("/v1/plans", json={"process": "order", "order_id": "o-1"})
        assert started.status_code == 201, started.text


async def open_wait(port: int, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that sent `request` and reads nothing unless asked."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    return reader, writer


async def answered(reader: asyncio.StreamReader) -> bool:
    """Whether the server answered (a refusal: a probe below took the slot this wait wanted) or closed."""
    try:
        return await asyncio.wait_for(reader.read(1), timeout=0.01) is not None
    except TimeoutError:
        return False


async def hold_every_slot(api: httpx.AsyncClient, key: str, port: int, request: bytes) -> list[asyncio.StreamWriter]:
    """WAITS waits holding every slot of the key: until its next wait is 429 TOO_MANY_WAITS. A probe holds
    a slot for 0.1 s, so a wait refused meanwhile is sent again."""
    conns = [await open_wait(port, request) for _ in range(WAITS)]
    deadline = time.monotonic() + 30
    await asyncio.sleep(0.5)
    while (await api.get("/v1/orders/o-1", params={"wait": "0.1"}, headers=bearer(key))).status_code != 429:
        assert time.monotonic() < deadline, "the waits never filled the key's slots"
        conns = [c if not await answered(c[0]) else await open_wait(port, request) for c in conns]
        await asyncio.sleep(0.5)
    return [writer for _, writer in conns]


async def next_waits_accepted(api: httpx.AsyncClient, key: str) -> float:
    """Seconds until the key's next WAITS waits are all accepted at once (none 429)."""
    started = time.monotonic()
    while time.monotonic() - started < FREED_WITHIN_S:
        answers = await asyncio.gather(
            *(api.get("/v1/orders/o-1", params={"wait": "0.5"}, headers=bearer(key)) for _ in range(WAITS))
        )
        if all(a.status_code == 404 for a in answers):  # the plan has no step yet: waited, then not found
            return time.monotonic() - started
        assert {a.status_code for a in answers} <= {404, 429}, [a.text for a in answers]
        await asyncio.sleep(0.2)
    raise AssertionError(f"the dropped waits still held their slots after {FREED_WITHIN_S} s")


@pytest.mark.parametrize("kind", ["long_poll", "stream", "mcp"])
async def test_dropped_waits_give_their_slots_back(start_gateway, db: Database, kind: str) -> None:  # type: ignore[no-untyped-def]
    """16 waits of one kind whose clients close their sockets free the key's 16 slots: the key's next 16
    waits are accepted within a generous deadline far under the dropped waits' 60 s."""
    _, base = start_gateway("--no-dispatcher")
    port = int(base.rsplit(":", 1)[1])
    _, key = await create_key(db, "acme", frozenset({Role.AGENT}), "waiter")
    await start_order(base, key)
    request = {"long_poll": long_poll, "stream": stream, "mcp": mcp_wait}[kind](key)
    async with httpx.AsyncClient(base_url=base, timeout=30) as api:
        writers = await hold_every_slot(api, key, port, request)
        for writer in writers:
            writer.close()
        await next_waits_accepted(api, key)


async def test_every_kind_of_wait_ends_soon_after_its_key_is_revoked(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database
) -> None:
    """A long poll, an SSE stream and an MCP wait of one key, all open, each end within the auth cache's
    TTL plus a second (and a margin for a loaded machine) after the key is revoked; the long poll says 401."""
    _, base = start_gateway("--no-dispatcher")
    record, key = await create_key(db, "acme", frozenset({Role.AGENT}), "revoked")
    await start_order(base, key)
    mcp_headers = {**bearer(key), "Accept": "application/json, text/event-stream"}
    call = json.loads(mcp_wait(key).split(b"\r\n\r\n", 1)[1])
    async with httpx.AsyncClient(base_url=base, timeout=90) as api:

        async def sse() -> int:
            async with api.stream("GET", "/v1/orders/o-1/stream", headers=bearer(key)) as streamed:
                async for _ in streamed.aiter_lines():
                    pass  # keepalives until the server ends the body
                return streamed.status_code

        waits = [
            asyncio.create_task(
                api.get("/v1/orders/o-1", params={"wait": "60", "after_seq": "5"}, headers=bearer(key))
            ),
            asyncio.create_task(sse()),
            asyncio.create_task(api.post("/mcp", json=call, headers=mcp_headers)),
        ]
        await asyncio.sleep(1.0)
        assert not any(w.done() for w in waits), [w.result() for w in waits if w.done()]
        revoked = await api.post(f"/v1/keys/{record.id}/revoke", headers=root_headers())
        assert revoked.status_code == 200
        started = time.monotonic()
        done, _ = await asyncio.wait(waits, timeout=settings.auth_cache_ttl_s + 1.0 + 3.0)
        assert len(done) == 3, f"{3 - len(done)} waits still open {time.monotonic() - started:.1f} s after revocation"
        polled = waits[0].result()
        assert polled.status_code == 401 and polled.json()["code"] == "UNAUTHENTICATED", polled.text
